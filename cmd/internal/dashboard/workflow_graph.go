package dashboard

// The drawing on the workflow page: the page's tasks laid out in layers
// (workflowgraph), as inline SVG, and what it says it leaves out.

import (
	"fmt"
	"html/template"

	"github.com/docketq/docket/cmd/internal/workflowgraph"
	"github.com/docketq/docket/queue"
)

// graphView is what the template of the drawing gets.
type graphView struct {
	// SVG is the drawing: workflowgraph.SVG escapes every stored string.
	SVG template.HTML
	// Caption says what is drawn; LeftOut what is not, "" when nothing.
	Caption, LeftOut string
}

// drawing draws the tasks of the page of v, nil when it has none.
func drawing(v queue.WorkflowView) *graphView {
	if len(v.Tasks) == 0 {
		return nil
	}
	g := workflowgraph.Layout(v.Tasks)
	tasks := workflowgraph.Plural(v.Shown(), "task", "tasks")
	if v.Gate {
		tasks += " and the gate"
	}
	layers := workflowgraph.Plural(len(g.Layers), "layer", "layers")
	caption := fmt.Sprintf("The %s in %s, parents above their dependents; each box links to its job.", tasks, layers)
	if v.Offset > 0 || v.Shown() < v.Total || v.AtLeast {
		caption = fmt.Sprintf("This page's %s (%s to %s of %s) in %s, parents above their dependents; parents on other pages are not drawn; each box links to its job.",
			tasks, thousands(int64(v.Offset+1)), thousands(int64(v.Offset+v.Shown())), totalLabel(v), layers)
	}
	return &graphView{SVG: template.HTML(workflowgraph.SVG(g, jobPath)), Caption: caption, LeftOut: g.LeftOut()} //nolint:gosec // escaped by workflowgraph.SVG
}
