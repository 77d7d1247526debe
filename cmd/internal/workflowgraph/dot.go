package workflowgraph

import (
	"fmt"
	"io"
	"strings"
)

// DOT writes g as a Graphviz digraph named title: each node n0, n1, … in
// its state's colours, labelled with its task's name, id and state, its
// tooltip the whole name (a summary labelled with its count by state), each layer a rank, edges parent to
// dependent. Every string from a document is quoted and escaped (a name
// cannot end the quoted string or start an escape Graphviz reads), and a
// comment says what the drawing left out.
func DOT(out io.Writer, g Graph, title string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n", dotQuote(Label(title, titleRunes)))
	if s := g.LeftOut(); s != "" {
		fmt.Fprintf(&b, "  label=%s;\n  labelloc=t;\n", dotQuote("Left out: "+s))
	}
	b.WriteString("  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=11];\n  edge [color=\"#98a2b3\"];\n")
	for i, n := range g.Nodes {
		fmt.Fprintf(&b, "  n%d [%s];\n", i, dotNode(n))
	}
	for _, l := range g.Layers {
		if len(l) > 1 {
			b.WriteString("  { rank=same;")
			for _, i := range l {
				fmt.Fprintf(&b, " n%d;", i)
			}
			b.WriteString(" }\n")
		}
	}
	for _, e := range g.Edges {
		style := ""
		if e.Up {
			style = " [style=dashed, constraint=false]"
		}
		fmt.Fprintf(&b, "  n%d -> n%d%s;\n", e.From, e.To, style)
	}
	b.WriteString("}\n")
	_, err := io.WriteString(out, b.String())
	return err
}

// dotLabelRunes bounds a name or an id in a DOT label; the tooltip holds
// the name to titleRunes.
const dotLabelRunes = 40

// dotNode is the attributes of node n.
func dotNode(n Node) string {
	if n.Task == nil {
		c := summaryColours
		return fmt.Sprintf("label=%s, style=\"rounded,dashed\", color=%s, fontcolor=%s",
			dotQuote(summaryLabel(n)+"\n"+statesLabel(n)), dotQuote(c.stroke), dotQuote(c.text))
	}
	t := n.Task
	c := coloursOf(t.State)
	state := string(t.State)
	if state == "" {
		state = "other"
	}
	return fmt.Sprintf("label=%s, tooltip=%s, fillcolor=%s, color=%s",
		dotQuote(Label(taskName(t), dotLabelRunes)+"\n"+Label(t.JobID.String(), dotLabelRunes)+"\n"+Label(state, labelRunes)),
		dotQuote(Label(taskName(t), titleRunes)), dotQuote(c.fill), dotQuote(c.stroke))
}

// dotQuote quotes s as a DOT string whose label Graphviz shows as s: a
// backslash doubled (Graphviz reads \N, \l and others in labels), a
// double quote escaped, a new line as \n (centred), any other control
// character as its picture.
func dotQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '"':
			b.WriteString(`\"`)
		case r == '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(visible(r))
		}
	}
	b.WriteByte('"')
	return b.String()
}
