package dashboard_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/docketq/docket/internal/dashboard"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// hostileWorkflow is a workflow's id with path, query and fragment
// characters, markup and a control character.
const hostileWorkflow = "wf/1?x=1#y <b>é\x01"

// enqueueHostileWorkflow enqueues, through Enqueue with After, a workflow
// whose ids hold / # % ? and spaces: orders/42 → task#3 → 100%; a b after
// orders/42, cancelled, which cancels VICTIM/delete after it; invoice?7
// after orders/42 and 100%, run anyway; and two tasks another application
// wrote, without createdAt: an ObjectId waiting for task#3 with a script
// for a name, markup for a kind and a state that tries to add an
// attribute, and _id 7 with bytes that are not UTF-8 and an escape
// sequence in its name. The workflow fields are written directly, as the
// builder will; orders/42 gets a result holding markup.
func (b *bundle) enqueueHostileWorkflow(t *testing.T) {
	t.Helper()
	for _, j := range []struct {
		id    string
		after []string
	}{{"orders/42", nil}, {"task#3", []string{"orders/42"}}, {"100%", []string{"task#3"}}, {"a b", []string{"orders/42"}},
		{"VICTIM/delete", []string{"a b"}}, {"invoice?7", []string{"orders/42", "100%"}}, {"solo-parent", nil}, {"solo-child", []string{"solo-parent"}}} {
		_, err := b.q.Enqueue(b.ctx, "etl", bson.M{}, queue.InsertOpts{ID: j.id, After: j.after, AfterRunAnyway: j.id == "invoice?7"})
		require.NoError(t, err, j.id)
	}
	_, err := b.q.CancelJobID(b.ctx, queue.StringJobID("a b"))
	require.NoError(t, err)
	coll := store.Of(b.q).Collection()
	_, err = coll.InsertMany(b.ctx, []any{
		bson.D{{Key: "_id", Value: bson.ObjectID{1}}, {Key: "kind", Value: "<i>k</i>"}, {Key: "state", Value: `dead" onmouseover="window.pwned=2`},
			{Key: "after", Value: bson.A{"task#3"}}, {Key: "workflow", Value: hostileWorkflow}, {Key: "workflowTask", Value: "<script>window.pwned = 1</script>"}},
		bson.D{{Key: "_id", Value: int32(7)}, {Key: "kind", Value: "k"}, {Key: "state", Value: "blocked"}, {Key: "after", Value: "not an array"},
			{Key: "waitingOn", Value: bson.A{"100%", int32(9)}}, {Key: "workflow", Value: hostileWorkflow}, {Key: "workflowTask", Value: "name\xff\x1b[2K"}},
	})
	require.NoError(t, err)
	for _, id := range []string{"orders/42", "task#3", "100%", "a b", "VICTIM/delete", "invoice?7"} {
		_, err := coll.UpdateByID(b.ctx, id, bson.M{"$set": bson.M{"workflow": hostileWorkflow, "workflowTask": "step " + id}})
		require.NoError(t, err)
	}
	_, err = coll.UpdateByID(b.ctx, "orders/42", bson.M{"$set": bson.M{"result": bson.M{"rows": 7, "html": `<b id="bold">not bold</b>`}}})
	require.NoError(t, err)
}

// TestWorkflowPageInABrowser drives the workflow page in headless
// Chromium: a job of a workflow links to it; its tasks are listed parents
// first, states coloured by class (a state another application wrote
// names no class of its own), each id linking to its job, what a blocked
// task waits for, why one was cancelled, a result's size linking to the
// result on its job's page; hostile names, ids and bytes are shown as
// text, never run. A job with parents but no workflow links to its graph;
// a job with neither links nowhere. Saves the screenshot "workflow".
func TestWorkflowPageInABrowser(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Refresh: -1})
	b.enqueueHostileWorkflow(t)
	br := startBrowser(t)

	br.open(b.srv.URL + "/jobs/" + url.PathEscape(queue.StringJobID("task#3").Token()))
	require.Equal(t, "blocked", br.text("#state"))
	br.click("#workflow")
	require.Equal(t, hostileWorkflow, br.script(`return document.querySelector("#workflow").textContent`))
	require.Equal(t, "8 tasks, parents before their dependents.", br.text("#summary"))
	rows := br.script(`return Array.from(document.querySelectorAll("#tasks tr[data-token]")).map(r => [
		r.querySelector("td.name").textContent, r.querySelector("a.id").textContent, r.querySelector(".state").className,
		r.querySelector(".state").textContent, r.querySelector("td.waiting").textContent, r.querySelector("td.result").textContent,
		r.querySelector("td.cancelled").textContent])`).([]any)
	want := [][]any{
		{"step orders/42", "orders/42", "state available", "available", "", "0.0 KB", ""},
		{"step task#3", "task#3", "state blocked", "blocked", "orders/42", "", ""},
		{"step 100%", "100%", "state blocked", "blocked", "task#3", "", ""},
		{"step a b", "a b", "state cancelled", "cancelled", "", "", ""},
		{"step VICTIM/delete", "VICTIM/delete", "state cancelled", "cancelled", "", "", "cancelled: parent a b ended cancelled"},
		{"step invoice?7", "invoice?7", "state blocked", "blocked", "orders/42, 100% (runs anyway)", "", ""},
		{"<script>window.pwned = 1</script>", `{"$oid":"010000000000000000000000"}`, "state other", `dead" onmouseover="window.pwned=2`, "", "", ""},
		{"name\uFFFD\x1b[2K", `{"$numberInt":"7"}`, "state blocked", "blocked", `100%, {"$numberInt":"9"}`, "", ""},
	}
	require.Len(t, rows, len(want))
	for i, w := range want {
		got := rows[i].([]any)
		if i == 0 {
			w[5] = got[5] // the result's size, checked below
		}
		require.Equal(t, w, got, "row %d", i)
	}
	require.Regexp(t, `^\d+ B$`, rows[0].([]any)[5])
	require.Equal(t, "/jobs/@EAkAAAA", br.script(`return document.querySelector("#tasks tr:last-child td.waiting a:last-child").getAttribute("href")`),
		"a parent of another type links to its job, by its token")
	require.Nil(t, br.script(`return window.pwned === undefined ? null : window.pwned`), "a script in a name never runs")
	require.Equal(t, float64(0), br.script(`return document.querySelectorAll("#tasks script, #tasks i, #tasks b, [onmouseover]").length`))
	br.screenshot("workflow")

	// Every id links to its own job, whatever its characters or type.
	for _, id := range []string{"100%", "invoice?7", `{"$oid":"010000000000000000000000"}`} {
		require.Equal(t, true, br.script(`var a = Array.from(document.querySelectorAll("#tasks a.id")).find(a => a.textContent === arguments[0]);
			if (!a) { return false; } a.click(); return true`, id), id)
		require.Equal(t, id, br.script(`return document.querySelector("h1 .mono").textContent`), "the page of %q", id)
		br.click("#workflow")
	}
	// A result's size leads to the result, shown as text.
	br.click("#tasks td.result a")
	require.Equal(t, "orders/42", br.script(`return document.querySelector("h1 .mono").textContent`))
	require.Equal(t, "#result", br.script(`return window.location.hash`))
	require.Contains(t, br.text("#result-json"), `<b id=\"bold\">not bold</b>`)
	require.Equal(t, float64(0), br.script(`return document.querySelectorAll("#bold").length`))

	// Without a workflow: the job's graph; without relatives: no link.
	br.open(b.srv.URL + "/jobs/solo-child")
	require.Equal(t, "Its parents and dependents", br.text("#workflow"))
	br.click("#workflow")
	require.Equal(t, "solo-child", br.text("h1 #job"))
	require.Equal(t, []any{"solo-parent", "solo-child"}, br.script(`return Array.from(document.querySelectorAll("#tasks a.id")).map(a => a.textContent)`))
	br.open(b.srv.URL + "/jobs/solo-parent")
	require.Equal(t, "Its parents and dependents", br.text("#workflow"), "a parent links to its dependents")
	br.open(b.srv.URL + "/jobs/" + b.ids["dead"])
	br.find("#state")
	require.Equal(t, float64(0), br.script(`return document.querySelectorAll("#workflow").length`))

	for path, status := range map[string]int{"/workflows/nope": http.StatusNotFound, "/workflows/@!!": http.StatusNotFound} {
		code, _ := b.get(t, path)
		require.Equal(t, status, code, path)
	}
}
