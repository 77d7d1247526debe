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
	b     strings.Builder
	g     Graph
	width int // of the drawing
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
	w := &svgWriter{g: g, width: width}
	w.raw(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="system-ui, sans-serif" font-size="12" role="group" aria-label="the workflow drawn in layers, parents above their dependents">`,
		width, height, width, height)
	w.raw(`<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#98a2b3"/></marker></defs>`)
	w.legend(g)
	for _, e := range g.Edges {
		w.edge(e)
	}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		x, y := w.at(n)
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
	width := max(widest*nodeW+(widest-1)*gapX, legendWidth(legendItems(g)))
	return 2*margin + width, legendH + 2*margin + len(g.Layers)*(nodeH+gapY) - gapY
}

// legendItem is one entry of the legend.
type legendItem struct {
	colours
	dashed bool
	name   string
}

// legendItems are the legend's entries: the states drawn, and summaries
// when there are some.
func legendItems(g Graph) []legendItem {
	var out []legendItem
	for _, s := range legendStates(g) {
		if s == "" {
			out = append(out, legendItem{otherColours, false, "other state"})
		} else {
			out = append(out, legendItem{coloursOf(s), false, string(s)})
		}
	}
	if g.Folded > 0 {
		out = append(out, legendItem{summaryColours, true, "tasks counted, not drawn"})
	}
	return out
}

// legendStep is the width of a legend's entry: its swatch, its name (7
// pixels a character, about) and a gap.
func legendStep(it legendItem) int { return 19 + 7*len([]rune(it.name)) + 16 }

func legendWidth(items []legendItem) int {
	w := 0
	for _, it := range items {
		w += legendStep(it)
	}
	return w
}

// at is where node n's box starts: its layer centred in the drawing.
func (w *svgWriter) at(n *Node) (int, int) {
	return w.rowLeft(n.Layer) + n.Pos*(nodeW+gapX), legendH + margin + n.Layer*(nodeH+gapY)
}

// rowLeft is where the first box of layer l starts.
func (w *svgWriter) rowLeft(l int) int {
	row := len(w.g.Layers[l])
	return (w.width - row*nodeW - (row-1)*gapX) / 2
}

// legend writes a swatch and a name for each entry, from the left.
func (w *svgWriter) legend(g Graph) {
	x := margin
	w.raw(`<g class="legend">`)
	for _, it := range legendItems(g) {
		dash := ""
		if it.dashed {
			dash = ` stroke-dasharray="4 3"`
		}
		w.raw(`<rect x="%d" y="%d" width="14" height="14" rx="3" fill="%s" stroke="%s"%s/>`, x, margin-2, it.fill, it.stroke, dash)
		w.raw(`<text x="%d" y="%d" fill="#475467">`, x+19, margin+9)
		w.text(it.name)
		w.raw(`</text>`)
		x += legendStep(it)
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
// dependent. An edge that crosses layers passes each between two boxes
// (the gap nearest the straight line), so it never runs behind a box it
// does not join; one that does not go down is dashed and direct.
func (w *svgWriter) edge(e Edge) {
	from, to := &w.g.Nodes[e.From], &w.g.Nodes[e.To]
	x1, y1 := w.at(from)
	x2, y2 := w.at(to)
	x1, y1, x2 = x1+nodeW/2, y1+nodeH, x2+nodeW/2
	var d strings.Builder
	fmt.Fprintf(&d, "M%d,%d", x1, y1)
	if !e.Up {
		for l := from.Layer + 1; l < to.Layer; l++ {
			top := legendH + margin + l*(nodeH+gapY)
			along := float64(top-y1) / float64(y2-y1)
			gx := w.nearestGap(l, x1+int(along*float64(x2-x1)))
			curve(&d, x1, y1, gx, top)
			fmt.Fprintf(&d, " L%d,%d", gx, top+nodeH)
			x1, y1 = gx, top+nodeH
		}
	}
	curve(&d, x1, y1, x2, y2)
	class := `class="edge"`
	if e.Up {
		class = `class="edge up" stroke-dasharray="5 4"`
	}
	w.raw(`<path d="%s" fill="none" stroke="#98a2b3" stroke-width="1.2" marker-end="url(#arrow)" %s/>`, d.String(), class)
}

// curve adds to d a curve from x1, y1 to x2, y2 leaving and arriving
// upright.
func curve(d *strings.Builder, x1, y1, x2, y2 int) {
	dy := max((y2-y1)/2, gapY/2)
	fmt.Fprintf(d, " C%d,%d %d,%d %d,%d", x1, y1+dy, x2, y2-dy, x2, y2)
}

// nearestGap is the middle of the gap of layer l nearest x: between two
// of its boxes, or beside the first or the last.
func (w *svgWriter) nearestGap(l, x int) int {
	left, row := w.rowLeft(l), len(w.g.Layers[l])
	step := nodeW + gapX
	i := 0 // the gap before box i; row: after the last
	if x > left-gapX/2 {
		i = min((x-left+gapX/2+step/2)/step, row)
	}
	return left + i*step - gapX/2
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
	w.text(fitted(statesLabel(*n), " · ", 18))
	w.raw(`</text></svg></g>`)
}

// LeftOut says what a drawing of g leaves out, "" when nothing: tasks
// counted in summaries, edges not drawn.
func (g Graph) LeftOut() string {
	var parts []string
	if g.Folded > 0 {
		parts = append(parts, fmt.Sprintf("%s of %s are counted in dashed boxes, not drawn one by one (a layer shows at most %d tasks, and %d layers at most, the tasks below them in one box)",
			Plural(g.Folded, "task", "tasks"), itoa(g.Tasks), MaxPerLayer-1, MaxLayers-1))
	}
	if g.EdgesLeftOut > 0 {
		parts = append(parts, fmt.Sprintf("%s past the first %s are not drawn", Plural(g.EdgesLeftOut, "edge", "edges"), itoa(MaxEdges)))
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
