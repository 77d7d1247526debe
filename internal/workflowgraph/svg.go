package workflowgraph

import (
	"encoding/xml"
	"fmt"
	"strings"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
)

// The geometry of an SVG drawing, in pixels.
const (
	nodeW, nodeH = 124, 42
	gapX, gapY   = 14, 46
	margin       = 10
	legendH      = 30
)

// colours are the fill, the border and the text of a state's nodes.
type colours struct{ fill, stroke, text string }

var stateColours = map[jobs.State]colours{
	jobs.StateBlocked:   {"#f1ecfb", "#6b46c1", "#4c2f91"},
	jobs.StateAvailable: {"#fdf3e0", "#b7791f", "#7a5010"},
	jobs.StateRunning:   {"#e6edfb", "#2f5bd3", "#1d3f9e"},
	jobs.StateSucceeded: {"#e3f4ea", "#1f8a4c", "#15623a"},
	jobs.StateDead:      {"#fbe7e5", "#c0392b", "#8e2419"},
	jobs.StateCancelled: {"#f2f2f2", "#98a2b3", "#667085"},
}

// otherColours are those of a state another application wrote, and
// summaryColours those of a summary.
var (
	otherColours   = colours{"#eef1f6", "#475467", "#1d2330"}
	summaryColours = colours{"#ffffff", "#98a2b3", "#475467"}
)

func coloursOf(s jobs.State) colours {
	if c, ok := stateColours[s]; ok {
		return c
	}
	return otherColours
}

// svgWriter writes one drawing; every string that came from a document
// goes through text or attr, escaped for XML (inline SVG in HTML reads
// it the same).
type svgWriter struct {
	b strings.Builder
}

func (w *svgWriter) raw(format string, a ...any) { fmt.Fprintf(&w.b, format, a...) }

// text writes s escaped as character data or an attribute's value.
func (w *svgWriter) text(s string) {
	_ = xml.EscapeText(&w.b, []byte(s)) // a strings.Builder never fails
}

// SVG draws g as an SVG document: a legend of the states drawn, edges
// parent to dependent, each task a box in its state's colours, labelled
// with its name (its kind when it has none) and state, linking to
// href(its id), its full name and id in its tooltip; each summary a
// dashed box counting its tasks by state.
func SVG(g Graph, href func(queue.JobID) string) string {
	width, height := g.size()
	w := &svgWriter{}
	w.raw(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="system-ui, sans-serif" font-size="12" role="img" aria-label="the workflow drawn in layers, parents above their dependents">`,
		width, height, width, height)
	w.raw(`<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#98a2b3"/></marker></defs>`)
	w.legend(g)
	for _, e := range g.Edges {
		w.edge(g, e)
	}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		x, y := g.at(n)
		if n.Task == nil {
			w.summary(n, x, y)
		} else {
			w.task(n.Task, x, y, href(n.Task.JobID))
		}
	}
	w.raw(`</svg>`)
	return w.b.String()
}

// size is the drawing's width and height.
func (g Graph) size() (int, int) {
	widest := 1
	for _, l := range g.Layers {
		widest = max(widest, len(l))
	}
	return 2*margin + widest*nodeW + (widest-1)*gapX, legendH + 2*margin + len(g.Layers)*(nodeH+gapY) - gapY
}

// at is where node n's box starts: its layer centred under the widest.
func (g Graph) at(n *Node) (int, int) {
	width, _ := g.size()
	row := len(g.Layers[n.Layer])
	left := (width - row*nodeW - (row-1)*gapX) / 2
	return left + n.Pos*(nodeW+gapX), legendH + margin + n.Layer*(nodeH+gapY)
}

// legend writes a swatch and a name for each state drawn, and for
// summaries when there are some.
func (w *svgWriter) legend(g Graph) {
	x := margin
	item := func(c colours, dashed bool, name string) {
		dash := ""
		if dashed {
			dash = ` stroke-dasharray="4 3"`
		}
		w.raw(`<rect x="%d" y="%d" width="14" height="14" rx="3" fill="%s" stroke="%s"%s/>`, x, margin-2, c.fill, c.stroke, dash)
		w.raw(`<text x="%d" y="%d" fill="#475467">`, x+19, margin+9)
		w.text(name)
		w.raw(`</text>`)
		x += 19 + 7*len([]rune(name)) + 16
	}
	w.raw(`<g class="legend">`)
	for _, s := range legendStates(g) {
		if s == "" {
			item(otherColours, false, "other state")
		} else {
			item(coloursOf(s), false, string(s))
		}
	}
	if g.Folded > 0 {
		item(summaryColours, true, "tasks counted, not drawn")
	}
	w.raw(`</g>`)
}

// legendStates are the states of g's tasks and summaries: the known ones
// in their order, then "" for any other.
func legendStates(g Graph) []jobs.State {
	seen := map[jobs.State]bool{}
	for _, n := range g.Nodes {
		if n.Task != nil {
			seen[n.Task.State] = true
		}
		for _, c := range n.States {
			seen[c.State] = true
		}
	}
	var out []jobs.State
	other := false
	for s := range seen {
		if _, known := stateColours[s]; !known {
			other = true
		}
	}
	for _, s := range knownStates {
		if seen[s] {
			out = append(out, s)
		}
	}
	if other {
		out = append(out, "")
	}
	return out
}

// edge writes a curve from the bottom of e's parent to the top of its
// dependent; one that does not go down is dashed.
func (w *svgWriter) edge(g Graph, e Edge) {
	x1, y1 := g.at(&g.Nodes[e.From])
	x2, y2 := g.at(&g.Nodes[e.To])
	x1, y1, x2 = x1+nodeW/2, y1+nodeH, x2+nodeW/2
	dy := gapY / 2
	extra := ""
	if e.Up {
		extra = ` stroke-dasharray="5 4" class="edge up"`
	} else {
		extra = ` class="edge"`
	}
	w.raw(`<path d="M%d,%d C%d,%d %d,%d %d,%d" fill="none" stroke="#98a2b3" stroke-width="1.2" marker-end="url(#arrow)"%s/>`,
		x1, y1, x1, y1+dy, x2, y2-dy, x2, y2, extra)
}

// task writes the box of task t at x, y, linking to href.
func (w *svgWriter) task(t *queue.WorkflowTask, x, y int, href string) {
	c := coloursOf(t.State)
	state := string(t.State)
	if state == "" {
		state = "other"
	}
	w.raw(`<a class="node" href="`)
	w.text(href)
	w.raw(`" data-token="`)
	w.text(t.JobID.Token())
	w.raw(`"><title>`)
	w.text(Label(taskName(t), titleRunes) + "\n" + Label(t.JobID.String(), titleRunes) + "\n" + Label(state, titleRunes))
	w.raw(`</title><svg x="%d" y="%d" width="%d" height="%d">`, x, y, nodeW, nodeH)
	w.raw(`<rect x="0.5" y="0.5" width="%d" height="%d" rx="6" fill="%s" stroke="%s"/>`, nodeW-1, nodeH-1, c.fill, c.stroke)
	w.raw(`<text class="name" x="8" y="17" fill="#1d2330" font-weight="600">`)
	w.text(Label(taskName(t), labelRunes))
	w.raw(`</text><text class="state" x="8" y="33" fill="%s" font-size="11">`, c.text)
	w.text(Label(state, labelRunes))
	w.raw(`</text></svg></a>`)
}

// summary writes the dashed box of summary n at x, y.
func (w *svgWriter) summary(n *Node, x, y int) {
	c := summaryColours
	w.raw(`<g class="more"><title>`)
	w.text(summaryLabel(*n) + ", not drawn: " + statesLabel(*n))
	w.raw(`</title><svg x="%d" y="%d" width="%d" height="%d">`, x, y, nodeW, nodeH)
	w.raw(`<rect x="0.5" y="0.5" width="%d" height="%d" rx="6" fill="%s" stroke="%s" stroke-dasharray="4 3"/>`, nodeW-1, nodeH-1, c.fill, c.stroke)
	w.raw(`<text class="name" x="8" y="17" fill="%s" font-weight="600">`, c.text)
	w.text(summaryLabel(*n))
	w.raw(`</text><text class="state" x="8" y="33" fill="%s" font-size="11">`, c.text)
	w.text(fitted(statesLabel(*n), " · ", 20))
	w.raw(`</text></svg></g>`)
}

// LeftOut says what a drawing of g leaves out, "" when nothing: tasks
// counted in summaries, edges not drawn.
func (g Graph) LeftOut() string {
	var parts []string
	if g.Folded > 0 {
		parts = append(parts, fmt.Sprintf("%s of %s are counted in dashed boxes, not drawn one by one (a layer shows at most %d tasks, and %d layers are drawn)",
			plural(g.Folded, "task", "tasks"), itoa(g.Tasks), MaxPerLayer-1, MaxLayers))
	}
	if g.EdgesLeftOut > 0 {
		parts = append(parts, fmt.Sprintf("%s past the first %s are not drawn", plural(g.EdgesLeftOut, "edge", "edges"), itoa(MaxEdges)))
	}
	return strings.Join(parts, "; ")
}

// fitted is the first parts of s (split at sep) that fit in n
// characters, then "…" when some do not.
func fitted(s, sep string, n int) string {
	parts := strings.Split(s, sep)
	out := parts[0]
	for _, p := range parts[1:] {
		if len([]rune(out+sep+p)) > n {
			return out + " …"
		}
		out += sep + p
	}
	return out
}
