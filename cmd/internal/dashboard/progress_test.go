package dashboard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/cmd/internal/dashboard"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap/zaptest"
)

// TestProgressInABrowser drives the job and workflow pages in headless
// Chromium: a job a worker runs, whose handler reported its progress,
// shows a bar at its percentage with its message as text; the workflow's
// table shows each task's progress, those another application wrote (a
// script in the message, a string for a document, a fraction out of
// range, bytes that are not UTF-8, a megabyte of message) escaped,
// bounded, "?" when the fraction is unknown. Screenshots of both pages
// are saved.
func TestProgressInABrowser(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Refresh: -1})
	const wf = "nightly-copy"
	res, err := b.q.Enqueue(b.ctx, "copy", bson.M{}, queue.InsertOpts{Queue: "copies"})
	require.NoError(t, err)
	coll := store.Of(b.q).Collection()
	_, err = coll.UpdateByID(b.ctx, res.ID, bson.M{"$set": bson.M{"workflow": wf, "workflowTask": "copy the files"}})
	require.NoError(t, err)
	huge := strings.Repeat("m", 1<<20)
	_, err = coll.InsertMany(b.ctx, []any{
		bson.M{"_id": "foreign-script", "kind": "k", "state": "running", "workflow": wf, "workflowTask": "script",
			"progress": bson.M{"fraction": 0.7, "message": `<script>window.pwned = 3</script><b id="bold3">x</b>`}},
		bson.M{"_id": "foreign-string", "kind": "k", "state": "running", "workflow": wf, "workflowTask": "string",
			"progress": `<img src=x onerror="window.pwned = 4">`},
		bson.M{"_id": "foreign-range", "kind": "k", "state": "dead", "workflow": wf, "workflowTask": "range",
			"progress": bson.M{"fraction": 12, "message": "bad\xff\x1b[2K bytes"}},
		bson.M{"_id": "foreign-huge", "kind": "k", "state": "running", "workflow": wf, "workflowTask": "huge",
			"progress": bson.M{"fraction": 0.05, "message": huge}},
	})
	require.NoError(t, err)

	release := make(chan struct{})
	reg := jobs.NewRegistry()
	require.NoError(t, reg.Add("copy", jobs.HandlerFunc(func(ctx context.Context, _ *jobs.Job) error {
		if err := jobs.Progress(ctx, 0.42, `copying <b id="bold2">files</b>: 420 of 1,000`); err != nil {
			return err
		}
		<-release
		return nil
	}), jobs.KindOptions{}))
	w, err := worker.New(b.q, reg, worker.Config{Queues: []string{"copies"}, Lease: 3 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
		PollMax: 50 * time.Millisecond, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	w.Start(b.ctx)
	t.Cleanup(func() { close(release); _ = w.Stop(context.Background()) })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		j, err := b.q.Get(b.ctx, res.ID)
		require.NoError(c, err)
		assert.NotNil(c, j.Progress)
	}, 20*time.Second, 20*time.Millisecond, "the renewal never wrote the progress")

	br := startBrowser(t)
	br.open(b.srv.URL + "/jobs/" + res.ID)
	require.Equal(t, "running", br.text("#state"))
	p := br.text("#progress")
	require.Contains(t, p, `42% copying <b id="bold2">files</b>: 420 of 1,000`)
	require.Contains(t, p, "reported ")
	require.Equal(t, float64(42), br.script(`return document.querySelector("#progress progress").value`))
	require.Equal(t, float64(0), br.script(`return document.querySelectorAll("#bold2").length`), "the message is text, not markup")
	br.screenshot("job-progress")

	br.open(b.srv.URL + "/workflows/" + wf)
	cell := func(task string) string {
		return br.text(`#tasks tr[data-token="` + queue.StringJobID(task).Token() + `"] td.progress-cell`)
	}
	require.Contains(t, cell(res.ID), "42% copying")
	require.Contains(t, cell("foreign-script"), `70% <script>window.pwned = 3</script>`)
	require.Equal(t, "?", strings.TrimSpace(cell("foreign-string")))
	require.Contains(t, cell("foreign-range"), "? bad\uFFFD")
	require.Contains(t, cell("foreign-huge"), "5% mmm")
	require.Nil(t, br.script(`return window.pwned === undefined ? null : window.pwned`), "a script in a progress message ran")
	require.Equal(t, float64(0), br.script(`return document.querySelectorAll("#bold3, img").length`))
	require.Less(t, br.script(`return document.documentElement.outerHTML.length`), float64(64<<10), "a huge message is bounded")
	br.screenshot("workflow-progress")
}
