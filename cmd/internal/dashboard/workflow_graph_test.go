package dashboard_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/docketq/docket/cmd/internal/dashboard"
	"github.com/docketq/docket/internal/store"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// drawnTask is a task of a test workflow: its id (also its name), state
// and parents.
type drawnTask struct {
	id, state string
	after     []string
}

// insertWorkflow writes the tasks of workflow wf as another application
// would, created in their order.
func (b *bundle) insertWorkflow(t *testing.T, wf string, tasks []drawnTask) {
	t.Helper()
	var docs []any
	for i, tk := range tasks {
		after := bson.A{}
		for _, a := range tk.after {
			after = append(after, a)
		}
		docs = append(docs, bson.D{{Key: "_id", Value: tk.id}, {Key: "kind", Value: "step"}, {Key: "queue", Value: "default"}, {Key: "state", Value: tk.state},
			{Key: "attempt", Value: 1}, {Key: "maxAttempts", Value: 5}, {Key: "createdAt", Value: time.Unix(int64(i), 0)},
			{Key: "after", Value: after}, {Key: "workflow", Value: wf}, {Key: "workflowTask", Value: tk.id}})
	}
	for len(docs) > 0 {
		n := min(len(docs), 500)
		_, err := store.Of(b.q).Collection().InsertMany(b.ctx, docs[:n])
		require.NoError(t, err)
		docs = docs[n:]
	}
}

// drawnNode is a box of the drawing as the browser shows it.
type drawnNode struct {
	Name, State, Href string
	X, Y              float64
}

// drawnNodes reads the drawing's task boxes, in the order they are drawn.
func drawnNodes(br *browser) []drawnNode {
	rows := br.script(`return Array.from(document.querySelectorAll("#graph a.node")).map(a => {
		var s = a.querySelector("svg"); return [a.querySelector("text.name").textContent, a.querySelector("text.state").textContent,
		a.getAttribute("href"), s.x.baseVal.value, s.y.baseVal.value]; })`).([]any)
	out := make([]drawnNode, len(rows))
	for i, r := range rows {
		f := r.([]any)
		out[i] = drawnNode{f[0].(string), f[1].(string), f[2].(string), f[3].(float64), f[4].(float64)}
	}
	return out
}

// byName indexes nodes by name.
func byName(nodes []drawnNode) map[string]drawnNode {
	out := map[string]drawnNode{}
	for _, n := range nodes {
		out[n.Name] = n
	}
	return out
}

// TestWorkflowDrawingOfAChain: a chain is drawn one task a layer, top to
// bottom, each box in its state's colours with its name and state, a
// legend of the states drawn, an edge per link; a box leads to its job.
// Saves the screenshot "workflow-chain".
func TestWorkflowDrawingOfAChain(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Refresh: -1})
	chain := []drawnTask{{"build", "succeeded", nil}, {"test", "succeeded", []string{"build"}}, {"package", "running", []string{"test"}},
		{"publish", "blocked", []string{"package"}}, {"announce", "blocked", []string{"publish"}}}
	b.insertWorkflow(t, "release-1.4", chain)
	br := startBrowser(t)
	br.open(b.srv.URL + "/workflows/release-1.4")
	require.Equal(t, "The 5 tasks in 5 layers, parents above their dependents; each box links to its job.", br.text("#graph-caption"))
	require.Equal(t, float64(0), br.script(`return document.querySelectorAll("#graph-leftout").length`))
	nodes := drawnNodes(br)
	require.Len(t, nodes, len(chain))
	for i, n := range nodes {
		require.Equal(t, chain[i].id, n.Name)
		require.Equal(t, chain[i].state, n.State)
		require.Equal(t, "/jobs/"+chain[i].id, n.Href)
		if i > 0 {
			require.Greater(t, n.Y, nodes[i-1].Y, "%s below its parent", n.Name)
			require.Equal(t, nodes[0].X, n.X, "one column")
		}
	}
	require.Equal(t, float64(4), br.script(`return document.querySelectorAll("#graph path.edge").length`))
	require.Equal(t, "blocked running succeeded", br.script(`return Array.from(document.querySelectorAll("#graph .legend text")).map(t => t.textContent).join(" ")`),
		"the states drawn, in their order")
	require.Equal(t, "#6b46c1", br.script(`return document.querySelectorAll("#graph a.node")[3].querySelector("rect").getAttribute("stroke")`), "blocked's colour")
	br.screenshot("workflow-chain")
	br.click(`#graph a.node[data-token="package"]`)
	require.Equal(t, "package", br.script(`return document.querySelector("h1 .mono").textContent`))
}

// TestWorkflowDrawingOfAFanIn: six sources, a join waiting on them all,
// and two steps after it: the sources share the top layer, the join sits
// below them all, with an edge from each. Saves "workflow-fanin".
func TestWorkflowDrawingOfAFanIn(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Refresh: -1})
	sources := []drawnTask{{"fetch-orders", "succeeded", nil}, {"fetch-customers", "succeeded", nil}, {"fetch-refunds", "dead", nil},
		{"fetch-invoices", "succeeded", nil}, {"fetch-stock", "running", nil}, {"fetch-rates", "available", nil}}
	tasks := append([]drawnTask{}, sources...)
	var names []string
	for _, s := range sources {
		names = append(names, s.id)
	}
	tasks = append(tasks, drawnTask{"join-data", "blocked", names}, drawnTask{"compute-totals", "blocked", []string{"join-data"}},
		drawnTask{"email-finance", "blocked", []string{"compute-totals", "fetch-rates"}})
	b.insertWorkflow(t, "nightly-report", tasks)
	br := startBrowser(t)
	br.open(b.srv.URL + "/workflows/nightly-report")
	nodes := byName(drawnNodes(br))
	require.Len(t, nodes, len(tasks))
	for _, s := range sources {
		require.Equal(t, nodes["fetch-orders"].Y, nodes[s.id].Y, "%s in the top layer", s.id)
		require.Less(t, nodes[s.id].Y, nodes["join-data"].Y)
	}
	require.Less(t, nodes["join-data"].Y, nodes["compute-totals"].Y)
	require.Less(t, nodes["compute-totals"].Y, nodes["email-finance"].Y, "longest path: below compute-totals, not right under fetch-rates")
	require.Equal(t, float64(9), br.script(`return document.querySelectorAll("#graph path.edge").length`))
	require.Equal(t, "dead", nodes["fetch-refunds"].State)
	br.screenshot("workflow-fanin")
}

// TestWorkflowDrawingOfALargeDAG: a DAG of 1,000 tasks in 10 layers of
// 100, each task waiting on two of the layer above. The page's 500 tasks
// are drawn in their 5 layers, each showing 7 tasks and a dashed box
// counting the others by state; the page says what is drawn and what is
// only counted, and stays small. Saves "workflow-dag".
func TestWorkflowDrawingOfALargeDAG(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Refresh: -1})
	var tasks []drawnTask
	states := []string{"succeeded", "succeeded", "running", "available", "blocked"}
	for l := range 10 {
		for i := range 100 {
			tk := drawnTask{id: fmt.Sprintf("L%d-%02d", l, i), state: states[min(l, 4)]}
			if l == 2 && i%9 == 0 {
				tk.state = "dead"
			}
			if l > 0 {
				tk.after = []string{fmt.Sprintf("L%d-%02d", l-1, i), fmt.Sprintf("L%d-%02d", l-1, (i*7+3)%100)}
			}
			tasks = append(tasks, tk)
		}
	}
	b.insertWorkflow(t, "dag", tasks)
	code, body := b.get(t, "/workflows/dag")
	require.Equal(t, http.StatusOK, code, body)
	require.Less(t, len(body), 400_000)

	br := startBrowser(t)
	br.open(b.srv.URL + "/workflows/dag")
	require.Equal(t, "This page's 500 tasks (1 to 500 of 1,000) in 5 layers, parents above their dependents; parents on other pages are not drawn; each box links to its job.",
		br.text("#graph-caption"))
	require.Equal(t, "Not all drawn: 465 tasks of 500 are counted in dashed boxes, not drawn one by one (a layer shows at most 7 tasks, and 29 layers at most, the tasks below them in one box).",
		br.text("#graph-leftout"))
	nodes := drawnNodes(br)
	require.Len(t, nodes, 35)
	deadDrawn := 0
	for _, n := range nodes {
		if n.State == "dead" {
			deadDrawn++
		}
	}
	more := br.script(`return Array.from(document.querySelectorAll("#graph g.more")).map(g => g.querySelector("text.name").textContent + " / " + g.querySelector("text.state").textContent)`)
	require.Equal(t, []any{"93 more tasks / 93 succeeded", "93 more tasks / 93 succeeded", fmt.Sprintf("93 more tasks / %d running …", 81+deadDrawn),
		"93 more tasks / 93 available", "93 more tasks / 93 blocked"}, more, "what fits in a box")
	require.Equal(t, fmt.Sprintf("93 more tasks, not drawn: %d running · %d dead", 81+deadDrawn, 12-deadDrawn),
		br.script(`return document.querySelectorAll("#graph g.more title")[2].textContent`), "the 12 dead of layer 2: drawn or counted")
	for _, n := range nodes {
		var layer int
		_, err := fmt.Sscanf(n.Name, "L%d-", &layer)
		require.NoError(t, err)
		require.Equal(t, nodes[0].Y+float64(layer)*88, n.Y, "%s in layer %d", n.Name, layer)
	}
	br.screenshot("workflow-dag")
}

// TestWorkflowDrawingOfHostileNames: the hostile workflow's names, ids
// and states are drawn as text (as Label shows them: controls as their
// pictures, bytes that are not UTF-8 as U+FFFD), nothing in them runs or
// becomes markup, and every box, whatever its id, leads to its job.
func TestWorkflowDrawingOfHostileNames(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Refresh: -1})
	b.enqueueHostileWorkflow(t)
	br := startBrowser(t)
	br.open(b.srv.URL + "/workflows/" + url.PathEscape(hostileWorkflow))
	got := map[string]string{}
	for _, n := range drawnNodes(br) {
		got[n.Href] = n.Name + " | " + n.State
	}
	require.Equal(t, map[string]string{
		"/jobs/orders%2F42": "step orders/42 | available", "/jobs/@AgcAAAB0YXNrIzMA": "step task#3 | blocked", "/jobs/@AgUAAAAxMDAlAA": "step 100% | blocked",
		"/jobs/@AgQAAABhIGIA": "step a b | cancelled", "/jobs/VICTIM%2Fdelete": "step VICTIM/dele… | cancelled", "/jobs/@AgoAAABpbnZvaWNlPzcA": "step invoice?7 | blocked",
		"/jobs/@BwEAAAAAAAAAAAAAAA": `<script>window.p… | dead" onmouseove…`, "/jobs/@EAcAAAA": "name\uFFFD␛[2K | blocked",
	}, got)
	require.Nil(t, br.script(`return window.pwned === undefined ? null : window.pwned`), "a script in a name never runs")
	require.Equal(t, float64(0), br.script(`return document.querySelectorAll("#graph script, #graph i, #graph b, [onmouseover]").length`))
	require.Contains(t, br.script(`return document.querySelector('#graph a.node[href="/jobs/@BwEAAAAAAAAAAAAAAA"] title').textContent`),
		"<script>window.pwned = 1</script>\n{\"$oid\":\"010000000000000000000000\"}\ndead\" onmouseover=\"window.pwned=2", "the tooltip holds the whole name, id and state")
	br.click(`#graph a.node[href="/jobs/@BwEAAAAAAAAAAAAAAA"]`)
	require.Equal(t, `{"$oid":"010000000000000000000000"}`, br.script(`return document.querySelector("h1 .mono").textContent`))
}
