package workflowgraph

import (
	"cmp"
	"slices"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
)

const (
	// MaxPerLayer bounds the nodes drawn in one layer: a wider layer
	// shows its first MaxPerLayer-1 tasks and one node counting the rest.
	MaxPerLayer = 8
	// MaxLayers bounds the layers drawn: the tasks of the layers past
	// MaxLayers-1 are counted in one node in the last.
	MaxLayers = 30
	// MaxEdges bounds the edges drawn.
	MaxEdges = 2000
)

// Node is one box of a drawing: a task, or a summary counting tasks left
// out of a layer (or of the layers below the last).
type Node struct {
	// Task is the task drawn; nil for a summary.
	Task *queue.WorkflowTask
	// Layer is the node's layer, from 0 at the top; Pos its place in it.
	Layer, Pos int
	// More is how many tasks a summary stands for, States how many of
	// them are in each state; Layers how many layers it folds (1 for a
	// layer's overflow).
	More   int
	States []queue.StateCount
	Layers int
}

// Edge joins the node of a parent to the node of its dependent, by their
// indexes in Graph.Nodes. Up marks an edge that does not go down a layer:
// a cycle (which only another application can write), or an edge inside
// folded layers.
type Edge struct {
	From, To int
	Up       bool
}

// Graph is a page of tasks laid out in layers.
type Graph struct {
	Nodes []Node
	// Layers holds the indexes of each layer's nodes, left to right.
	Layers [][]int
	Edges  []Edge
	// Tasks is how many tasks were laid out; Folded how many of them a
	// summary stands for.
	Tasks, Folded int
	// EdgesLeftOut is how many edges past MaxEdges were not drawn.
	EdgesLeftOut int
}

// Layout lays tasks out: each task one layer below its lowest parent among
// tasks (longest path from the roots), each layer ordered to cut
// crossings (barycenter sweeps from the tasks' order), then bounded. The
// same tasks give the same graph. Parents that are not among tasks are
// not drawn.
func Layout(tasks []queue.WorkflowTask) Graph {
	if len(tasks) == 0 {
		return Graph{}
	}
	parents := parentIndexes(tasks)
	layer := longestPathLayers(parents)
	layers := orderLayers(layer, parents)
	return bound(tasks, parents, layers)
}

// parentIndexes are, for each task, the indexes of its parents among
// tasks, each once, in the order of its after.
func parentIndexes(tasks []queue.WorkflowTask) [][]int {
	index := make(map[string]int, len(tasks))
	for i, t := range tasks {
		if _, dup := index[t.JobID.Token()]; !dup {
			index[t.JobID.Token()] = i
		}
	}
	out := make([][]int, len(tasks))
	for i, t := range tasks {
		seen := map[int]bool{}
		for _, p := range t.After {
			if j, ok := index[p.Token()]; ok && j != i && !seen[j] {
				seen[j] = true
				out[i] = append(out[i], j)
			}
		}
	}
	return out
}

// longestPathLayers gives each node the layer one below its lowest
// parent, roots at 0. A cycle is broken at its first node (by index),
// laid out below its parents already placed.
func longestPathLayers(parents [][]int) []int {
	n := len(parents)
	waits := make([]int, n)
	children := make([][]int, n)
	for i, ps := range parents {
		waits[i] = len(ps)
		for _, p := range ps {
			children[p] = append(children[p], i)
		}
	}
	layer := make([]int, n)
	placed := make([]bool, n)
	var ready []int
	for i, w := range waits {
		if w == 0 {
			ready = append(ready, i)
		}
	}
	next := 0 // the first node that may be unplaced, for breaking cycles
	for range n {
		if len(ready) == 0 {
			for placed[next] || waits[next] < 0 {
				next++
			}
			ready = append(ready, next)
		}
		v := ready[0]
		ready = ready[1:]
		placed[v], waits[v] = true, -1
		for _, p := range parents[v] {
			if placed[p] {
				layer[v] = max(layer[v], layer[p]+1)
			}
		}
		for _, c := range children[v] {
			if waits[c]--; waits[c] == 0 {
				ready = append(ready, c)
			}
		}
	}
	return layer
}

// orderLayers groups nodes by layer, each in index order, then sorts
// each layer by the barycenter of its nodes' neighbours' places (a
// normalised place, so layers of different widths compare): down, up,
// down again. A node with no neighbour in the sweep's direction keeps
// its place; ties keep the earlier order.
func orderLayers(layer []int, parents [][]int) [][]int {
	depth := 0
	for _, l := range layer {
		depth = max(depth, l+1)
	}
	layers := make([][]int, depth)
	for v, l := range layer {
		layers[l] = append(layers[l], v)
	}
	children := make([][]int, len(parents))
	for v, ps := range parents {
		for _, p := range ps {
			children[p] = append(children[p], v)
		}
	}
	place := make([]float64, len(layer))
	setPlaces := func(l []int) {
		for i, v := range l {
			place[v] = (float64(i) + 0.5) / float64(len(l))
		}
	}
	for _, l := range layers {
		setPlaces(l)
	}
	sweep := func(l []int, neighbours [][]int) {
		key := make(map[int]float64, len(l))
		for _, v := range l {
			key[v] = barycenter(place, neighbours[v], place[v])
		}
		slices.SortStableFunc(l, func(a, b int) int { return cmp.Compare(key[a], key[b]) })
		setPlaces(l)
	}
	for round := range 3 {
		if round%2 == 0 {
			for _, l := range layers[1:] {
				sweep(l, parents)
			}
		} else {
			for i := len(layers) - 2; i >= 0; i-- {
				sweep(layers[i], children)
			}
		}
	}
	return layers
}

// barycenter is the mean place of neighbours, or own when there are none.
func barycenter(place []float64, neighbours []int, own float64) float64 {
	if len(neighbours) == 0 {
		return own
	}
	sum := 0.0
	for _, n := range neighbours {
		sum += place[n]
	}
	return sum / float64(len(neighbours))
}

// bound builds the drawn graph from ordered layers: layers past
// MaxLayers-1 fold into one summary, a layer wider than MaxPerLayer keeps
// its first MaxPerLayer-1 tasks and a summary of the rest, and edges
// join the nodes that hold their tasks, each pair once, at most MaxEdges.
func bound(tasks []queue.WorkflowTask, parents [][]int, layers [][]int) Graph {
	g := Graph{Tasks: len(tasks)}
	nodeOf := make([]int, len(tasks))
	if len(layers) > MaxLayers {
		deep := slices.Concat(layers[MaxLayers-1:]...)
		g.addSummary(tasks, deep, MaxLayers-1, len(layers)-(MaxLayers-1), nodeOf)
		layers = layers[:MaxLayers-1]
	}
	for l, vs := range layers {
		kept := vs
		if len(vs) > MaxPerLayer {
			kept = vs[:MaxPerLayer-1]
		}
		for _, v := range kept {
			g.add(Node{Task: &tasks[v], Layer: l}, v, nodeOf)
		}
		if len(kept) < len(vs) {
			g.addSummary(tasks, vs[len(kept):], l, 1, nodeOf)
		}
	}
	g.placeNodes()
	g.addEdges(parents, nodeOf)
	return g
}

// add adds node n holding task v.
func (g *Graph) add(n Node, v int, nodeOf []int) {
	nodeOf[v] = len(g.Nodes)
	g.Nodes = append(g.Nodes, n)
}

// addSummary adds one node in layer l standing for the tasks vs, of
// layers layers.
func (g *Graph) addSummary(tasks []queue.WorkflowTask, vs []int, l, layers int, nodeOf []int) {
	counts := map[jobs.State]int{}
	for _, v := range vs {
		counts[tasks[v].State]++
		nodeOf[v] = len(g.Nodes)
	}
	g.Nodes = append(g.Nodes, Node{Layer: l, More: len(vs), States: stateCounts(counts), Layers: layers})
	g.Folded += len(vs)
}

// placeNodes fills Layers and each node's Pos: nodes in the order they
// were added, a layer's summary last.
func (g *Graph) placeNodes() {
	for i := range g.Nodes {
		n := &g.Nodes[i]
		for len(g.Layers) <= n.Layer {
			g.Layers = append(g.Layers, nil)
		}
		n.Pos = len(g.Layers[n.Layer])
		g.Layers[n.Layer] = append(g.Layers[n.Layer], i)
	}
}

// addEdges adds an edge for each parent of each task, between the nodes
// holding them, each pair once, in the order of the tasks.
func (g *Graph) addEdges(parents [][]int, nodeOf []int) {
	seen := map[[2]int]bool{}
	for v, ps := range parents {
		for _, p := range ps {
			e := [2]int{nodeOf[p], nodeOf[v]}
			if e[0] == e[1] || seen[e] {
				continue
			}
			seen[e] = true
			if len(g.Edges) == MaxEdges {
				g.EdgesLeftOut++
				continue
			}
			g.Edges = append(g.Edges, Edge{From: e[0], To: e[1], Up: g.Nodes[e[0]].Layer >= g.Nodes[e[1]].Layer})
		}
	}
}

// knownStates are the states in the order a summary counts them.
var knownStates = []jobs.State{jobs.StateBlocked, jobs.StateAvailable, jobs.StateRunning, jobs.StateSucceeded, jobs.StateDead, jobs.StateCancelled}

// stateCounts are counts in the order of knownStates, then the other
// states by name.
func stateCounts(counts map[jobs.State]int) []queue.StateCount {
	var out []queue.StateCount
	for _, s := range knownStates {
		if n := counts[s]; n > 0 {
			out = append(out, queue.StateCount{State: s, N: n})
			delete(counts, s)
		}
	}
	rest := len(out)
	for s, n := range counts {
		out = append(out, queue.StateCount{State: s, N: n})
	}
	slices.SortFunc(out[rest:], func(a, b queue.StateCount) int { return cmp.Compare(a.State, b.State) })
	return out
}
