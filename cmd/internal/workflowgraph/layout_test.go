package workflowgraph_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/docketq/docket/cmd/internal/workflowgraph"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

// task is a task named id, in state, waiting on after.
func task(id string, state jobs.State, after ...string) queue.WorkflowTask {
	t := queue.WorkflowTask{Name: id}
	t.JobID, t.ID, t.State, t.Kind = queue.StringJobID(id), id, state, "k"
	t.CreatedAt = time.Unix(0, 0)
	for _, a := range after {
		t.After = append(t.After, queue.StringJobID(a))
	}
	return t
}

// randomDAG is n tasks, each waiting on up to 3 of the tasks before it,
// in a shuffled order.
func randomDAG(r *rand.Rand, n int) []queue.WorkflowTask {
	tasks := make([]queue.WorkflowTask, n)
	for i := range tasks {
		var after []string
		for range r.IntN(4) {
			if i > 0 {
				after = append(after, fmt.Sprint(r.IntN(i)))
			}
		}
		tasks[i] = task(fmt.Sprint(i), jobs.StateBlocked, after...)
	}
	r.Shuffle(n, func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
	return tasks
}

// layerOf is the layer each task is drawn in, by id.
func layerOf(g workflowgraph.Graph) map[string]int {
	out := map[string]int{}
	for _, n := range g.Nodes {
		if n.Task != nil {
			out[n.Task.ID] = n.Layer
		}
	}
	return out
}

// longestPath is, by id, the length of the longest chain of parents
// above each task: computed by recursion, the reference the layout must
// agree with.
func longestPath(tasks []queue.WorkflowTask) map[string]int {
	byID := map[string]queue.WorkflowTask{}
	for _, t := range tasks {
		byID[t.ID] = t
	}
	memo := map[string]int{}
	var depth func(id string) int
	depth = func(id string) int {
		if d, ok := memo[id]; ok {
			return d
		}
		d := 0
		for _, p := range byID[id].After {
			d = max(d, depth(p.String())+1)
		}
		memo[id] = d
		return d
	}
	for id := range byID {
		depth(id)
	}
	return memo
}

// Random DAGs small enough to be drawn whole: every task is in the layer
// of its longest chain of parents, so every edge goes down at least one
// layer and each task sits right below one of its parents; every task
// and edge is drawn once; the same tasks give the same graph.
func TestLayoutLayersByLongestPath(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		tasks := randomDAG(r, 1+r.IntN(40))
		g := workflowgraph.Layout(tasks)
		if len(g.Layers) > workflowgraph.MaxLayers || g.Folded > 0 {
			continue // checked with bounds below
		}
		require.Equal(t, longestPath(tasks), layerOf(g), "round %d", round)
		edges := 0
		for _, tk := range tasks {
			edges += len(uniq(tk.After))
		}
		require.Len(t, g.Edges, edges)
		for _, e := range g.Edges {
			require.Less(t, g.Nodes[e.From].Layer, g.Nodes[e.To].Layer, "round %d: every edge goes down", round)
			require.False(t, e.Up)
		}
		for l, nodes := range g.Layers {
			for pos, i := range nodes {
				require.Equal(t, [2]int{l, pos}, [2]int{g.Nodes[i].Layer, g.Nodes[i].Pos})
			}
		}
		require.Equal(t, g, workflowgraph.Layout(tasks), "deterministic")
	}
}

func uniq(ids []queue.JobID) map[string]bool {
	out := map[string]bool{}
	for _, id := range ids {
		out[id.String()] = true
	}
	return out
}

// crossings counts the pairs of edges between the same two layers that
// cross.
func crossings(g workflowgraph.Graph) int {
	n := 0
	for i, a := range g.Edges {
		for _, b := range g.Edges[i+1:] {
			na, nb := [2]workflowgraph.Node{g.Nodes[a.From], g.Nodes[a.To]}, [2]workflowgraph.Node{g.Nodes[b.From], g.Nodes[b.To]}
			if na[0].Layer != nb[0].Layer || na[1].Layer != nb[1].Layer {
				continue
			}
			if (na[0].Pos-nb[0].Pos)*(na[1].Pos-nb[1].Pos) < 0 {
				n++
			}
		}
	}
	return n
}

// Two chains and a fan-in listed so that drawn in the tasks' order their
// edges cross: the barycenter sweeps untangle them.
func TestLayoutOrdersLayersToCutCrossings(t *testing.T) {
	t.Parallel()
	tasks := []queue.WorkflowTask{
		task("a", jobs.StateSucceeded), task("b", jobs.StateSucceeded), task("c", jobs.StateSucceeded),
		task("c1", jobs.StateRunning, "c"), task("b1", jobs.StateRunning, "b"), task("a1", jobs.StateRunning, "a"),
		task("a2", jobs.StateBlocked, "a1"), task("bc2", jobs.StateBlocked, "b1", "c1"),
	}
	g := workflowgraph.Layout(tasks)
	require.Equal(t, 0, crossings(g))
	names := func(l int) []string {
		var out []string
		for _, i := range g.Layers[l] {
			out = append(out, g.Nodes[i].Task.ID)
		}
		return out
	}
	require.Equal(t, []string{"a", "b", "c"}, names(0), "the first layer keeps the tasks' order")
	require.Equal(t, []string{"a1", "b1", "c1"}, names(1))
	require.Equal(t, []string{"a2", "bc2"}, names(2))
}

// A layer wider than MaxPerLayer shows MaxPerLayer-1 tasks and one
// summary counting the rest by state; edges to folded tasks go to the
// summary, once per pair of nodes.
func TestLayoutFoldsAWideLayer(t *testing.T) {
	t.Parallel()
	tasks := []queue.WorkflowTask{task("root", jobs.StateSucceeded)}
	for i := range 100 {
		s := jobs.StateAvailable
		if i%10 == 0 {
			s = jobs.StateDead
		}
		if i == 99 {
			s = "weird"
		}
		tasks = append(tasks, task(fmt.Sprintf("t%02d", i), s, "root"))
	}
	tasks = append(tasks, task("sink", jobs.StateBlocked, "t98", "t99", "t00"))
	g := workflowgraph.Layout(tasks)
	require.Len(t, g.Layers, 3)
	require.Len(t, g.Layers[1], workflowgraph.MaxPerLayer)
	more := g.Nodes[g.Layers[1][workflowgraph.MaxPerLayer-1]]
	require.Nil(t, more.Task)
	require.Equal(t, 100-(workflowgraph.MaxPerLayer-1), more.More)
	require.Equal(t, 1, more.Layers)
	require.Equal(t, 93, g.Folded)
	require.Equal(t, 102, g.Tasks)
	n := 0
	for _, c := range more.States {
		n += c.N
	}
	require.Equal(t, more.More, n)
	require.Equal(t, queue.StateCount{State: "weird", N: 1}, more.States[len(more.States)-1], "an unknown state counted last")
	sinkParents := map[int]bool{}
	for i, n := range g.Nodes {
		if n.Task != nil && n.Task.ID == "t00" {
			sinkParents[i] = true
		}
	}
	sinkParents[g.Layers[1][workflowgraph.MaxPerLayer-1]] = true // t98 and t99
	require.Len(t, g.Edges, workflowgraph.MaxPerLayer+len(sinkParents), "root to each node of the layer, the nodes of t00, t98 and t99 to sink")
	require.Contains(t, g.LeftOut(), "93 tasks of 102 are counted in dashed boxes")
}

// A chain deeper than MaxLayers draws MaxLayers-1 layers and counts the
// rest in one node in the last.
func TestLayoutFoldsDeepLayers(t *testing.T) {
	t.Parallel()
	tasks := []queue.WorkflowTask{task("0", jobs.StateSucceeded)}
	for i := 1; i < 45; i++ {
		tasks = append(tasks, task(fmt.Sprint(i), jobs.StateBlocked, fmt.Sprint(i-1)))
	}
	g := workflowgraph.Layout(tasks)
	require.Len(t, g.Layers, workflowgraph.MaxLayers)
	last := g.Nodes[g.Layers[workflowgraph.MaxLayers-1][0]]
	require.Nil(t, last.Task)
	require.Equal(t, 45-(workflowgraph.MaxLayers-1), last.More)
	require.Equal(t, 45-(workflowgraph.MaxLayers-1), last.Layers)
	require.Len(t, g.Edges, workflowgraph.MaxLayers-1)
}

// Past MaxEdges, edges are counted, not drawn, and the graph says so.
func TestLayoutBoundsEdges(t *testing.T) {
	t.Parallel()
	var tasks []queue.WorkflowTask
	for l := range 20 {
		for i := range workflowgraph.MaxPerLayer {
			var after []string
			for _, p := range tasks[:l*workflowgraph.MaxPerLayer] {
				after = append(after, p.ID)
			}
			tasks = append(tasks, task(fmt.Sprintf("%d-%d", l, i), jobs.StateBlocked, after...))
		}
	}
	g := workflowgraph.Layout(tasks)
	all := 0
	for l := range 20 {
		all += workflowgraph.MaxPerLayer * workflowgraph.MaxPerLayer * l
	}
	require.Len(t, g.Edges, workflowgraph.MaxEdges)
	require.Equal(t, all-workflowgraph.MaxEdges, g.EdgesLeftOut)
	require.Contains(t, g.LeftOut(), "10,160 edges past the first 2,000 are not drawn")
}

// Another application's data: a cycle, a task waiting on itself, a
// parent listed twice, a parent not on the page, the same id twice. All
// are laid out, an edge that cannot go down is marked Up, and nothing
// panics.
func TestLayoutForeignGraphs(t *testing.T) {
	t.Parallel()
	tasks := []queue.WorkflowTask{
		task("a", jobs.StateBlocked, "c"), task("b", jobs.StateBlocked, "a", "a", "elsewhere"),
		task("c", jobs.StateBlocked, "b"), task("self", jobs.StateBlocked, "self"), task("self", "x"),
	}
	g := workflowgraph.Layout(tasks)
	require.Len(t, g.Nodes, 5)
	up := 0
	for _, e := range g.Edges {
		if e.Up {
			up++
		}
	}
	require.Len(t, g.Edges, 3, "a→b once, b→c, c→a; no self edge")
	require.Equal(t, 1, up, "the cycle's closing edge")
	require.Empty(t, workflowgraph.Layout(nil).Nodes)
}
