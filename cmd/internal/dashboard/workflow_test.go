package dashboard_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/docketq/docket/cmd/internal/dashboard"
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
	require.Equal(t, []any{"state blocked", "blocked 4", "state available", "available 1", "state cancelled", "cancelled 2", "state other", `dead" onmouseover="window.pwned=2 1`},
		br.script(`return Array.from(document.querySelectorAll("#states .state")).flatMap(s => [s.className, s.textContent + " " + s.nextElementSibling.textContent])`),
		"counted by state, a state another application wrote as text")
	require.Equal(t, float64(0), br.script(`return document.querySelectorAll("#pager").length`), "one page holds them all")
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

// TestWorkflowPagesInABrowser: a workflow of 1,100 tasks (1,070 each
// waiting on the same 30 parents) is shown 500 tasks a page, numbered
// across pages, with links to the next and previous pages, each page
// saying which tasks it shows and counting them all by state; a row lists
// ten of the parents a task waits on and counts the others, so a page
// stays small; a page past the end says so; a page that is not a number
// is refused. Saves the screenshot "workflow-pages".
func TestWorkflowPagesInABrowser(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Refresh: -1})
	var parents bson.A
	var docs []any
	for i := range 1100 {
		d := bson.D{{Key: "_id", Value: fmt.Sprintf("p-%03d", i)}, {Key: "kind", Value: "k"}, {Key: "state", Value: "available"},
			{Key: "createdAt", Value: time.Unix(int64(i), 0)}, {Key: "workflow", Value: "big"}}
		if i >= 30 {
			d[0].Value = fmt.Sprintf("d-%04d", i)
			d[2].Value = "blocked"
			d = append(d, bson.E{Key: "after", Value: parents}, bson.E{Key: "waitingOn", Value: parents}, bson.E{Key: "workflowTask", Value: fmt.Sprintf("step %d", i)})
		} else {
			parents = append(parents, d[0].Value)
		}
		docs = append(docs, d)
	}
	coll := store.Of(b.q).Collection()
	for len(docs) > 0 {
		n := min(len(docs), 500)
		_, err := coll.InsertMany(b.ctx, docs[:n])
		require.NoError(t, err)
		docs = docs[n:]
	}
	code, body := b.get(t, "/workflows/big")
	require.Equal(t, http.StatusOK, code, body)
	require.Less(t, len(body), 500_000, "a page of 500 tasks that each wait on 30 parents")

	br := startBrowser(t)
	br.open(b.srv.URL + "/workflows/big")
	require.Equal(t, "1,100 tasks, parents before their dependents.", br.text("#summary"))
	require.Equal(t, "blocked 1,070 · available 30", br.text("#states"))
	numbers := func() []any {
		return br.script(`return Array.from(document.querySelectorAll("#tasks tr[data-token] td.num:first-child")).map(td => td.textContent)`).([]any)
	}
	page := func(first, last int, pager string) {
		t.Helper()
		require.Equal(t, pager, br.text("#pager"))
		n := numbers()
		require.Len(t, n, last-first+1)
		require.Equal(t, []any{fmt.Sprint(first), fmt.Sprint(last)}, []any{n[0], n[len(n)-1]})
	}
	page(1, 500, "Tasks 1 to 500 of 1,100 on this page. Next page →")
	require.Equal(t, "p-000", br.text("#tasks tr[data-token] a.id"))
	br.click("#next")
	page(501, 1000, "Tasks 501 to 1,000 of 1,100 on this page. ← Previous page Next page →")
	require.Equal(t, "/workflows/big?page=2", br.script(`return window.location.pathname + window.location.search`))
	require.Equal(t, "d-0500 step 500", br.script(`var r = document.querySelector("#tasks tr[data-token]"); return r.querySelector("a.id").textContent + " " + r.querySelector("td.name").textContent`))
	waiting := br.text("#tasks tr[data-token] td.waiting")
	require.Equal(t, "p-000, p-001, p-002, p-003, p-004, p-005, p-006, p-007, p-008, p-009 and 20 more", waiting)
	br.screenshot("workflow-pages")
	br.click("#next")
	page(1001, 1100, "Tasks 1,001 to 1,100 of 1,100 on this page. ← Previous page")
	br.click("#prev")
	page(501, 1000, "Tasks 501 to 1,000 of 1,100 on this page. ← Previous page Next page →")

	br.open(b.srv.URL + "/workflows/big?page=9")
	require.Equal(t, "No tasks on this page: there are 1,100. ← Previous page", br.text("#pager"))
	br.click("#prev")
	page(1001, 1100, "Tasks 1,001 to 1,100 of 1,100 on this page. ← Previous page")
	for _, q := range []string{"?page=0", "?page=x", "?page=-1", "?page=99999999999"} {
		code, _ := b.get(t, "/workflows/big"+q)
		require.Equal(t, http.StatusBadRequest, code, q)
	}
}
