// Package workflowgraph draws a page of a workflow view (queue.WorkflowTasks):
// it lays the tasks out in layers, parents above their dependents, and
// writes the drawing as SVG (the dashboard's workflow page) or as Graphviz
// DOT (docketctl workflow --dot).
//
// A drawing is bounded whatever the page holds: a layer wider than
// MaxPerLayer shows MaxPerLayer-1 tasks and one node that counts the
// others by state, layers past MaxLayers are counted in one node, and at
// most MaxEdges edges are drawn. A Graph says what it left out, and both
// writers say so.
package workflowgraph
