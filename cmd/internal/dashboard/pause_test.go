package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
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

// TestDashboardPauseInABrowser: pausing a queue from the overview (a
// confirmed POST) stops a running worker claiming from it, resuming it from
// the overview makes the worker run its jobs; the workers page lists the
// processes alive and not one that stopped beating, with their process
// limits, a name holding markup shown as text. Screenshots: overview with
// a paused queue, the confirmation, the workers page.
func TestDashboardPauseInABrowser(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Refresh: 1})
	br := startBrowser(t)
	ctx := b.ctx

	// bulk's jobs wait (due in an hour) until the queue is paused.
	var bulk []string
	for range 4 {
		res, err := b.q.Enqueue(ctx, "mail", bson.M{}, queue.InsertOpts{Queue: "bulk", Priority: 5, Delay: time.Hour})
		require.NoError(t, err)
		bulk = append(bulk, res.ID)
	}
	reg := jobs.NewRegistry()
	require.NoError(t, reg.Add("mail", jobs.HandlerFunc(func(context.Context, *jobs.Job) error { return nil }), jobs.KindOptions{}))
	w, err := worker.New(b.q, reg, worker.Config{Queues: []string{"bulk", "reports"}, Concurrency: 4, PollMax: 50 * time.Millisecond, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	w.Start(ctx)
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	host, _ := os.Hostname()
	require.NoError(t, b.q.Beat(ctx, queue.WorkerInfo{ID: w.ID(), Host: host, PID: int64(os.Getpid()), Version: "test",
		Queues: []string{"bulk", "reports"}, Concurrency: 4, StartedAt: time.Now(), BeatEvery: time.Minute,
		ProcessLimits: map[string]int{"queue:reports": 3, "kind:mail": 2, `kind:<b id="limitbold">x</b>`: 1}}))
	_, err = b.db.Collection(queue.DefaultWorkersCollection).InsertOne(ctx, bson.M{"_id": "gone-1-dead", "host": "old", "pid": 1,
		"lastSeen": time.Now().Add(-time.Minute), "beatEveryMs": 1000, "queues": bson.A{"bulk"}, "concurrency": 2})
	require.NoError(t, err)

	br.open(b.srv.URL + "/")
	require.Equal(t, "1", br.text("#alive"), "one worker alive; the one that stopped beating is not counted")
	br.click(`#queues a.pause[data-queue="bulk"]`)
	br.find("#confirm")
	require.Contains(t, br.text("main"), "Every worker stops claiming from this queue")
	br.screenshot("confirm-pause")
	br.click("#confirm")
	require.Equal(t, "Queue bulk paused.", br.text("#result"))
	paused := time.Now()
	states, err := b.q.QueueStates(ctx)
	require.NoError(t, err)
	require.Len(t, states, 1)
	require.Equal(t, "dashboard", states[0].PausedBy)

	// From PauseRefresh after the pause, bulk's jobs are due and come first
	// in claim order (priority 5), beside one of reports (priority 0): the
	// worker takes reports' and leaves bulk's.
	due := paused.Add(queue.PauseRefresh)
	_, err = store.Of(b.q).Collection().UpdateMany(ctx, bson.M{"queue": "bulk"}, bson.M{"$set": bson.M{"runAt": due}})
	require.NoError(t, err)
	rep, err := b.q.Enqueue(ctx, "mail", bson.M{}, queue.InsertOpts{Queue: "reports", RunAt: due})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		j, err := b.q.Get(ctx, rep.ID)
		require.NoError(c, err)
		assert.Equal(c, jobs.StateSucceeded, j.State)
	}, 20*time.Second, 20*time.Millisecond)
	for _, id := range bulk {
		j, err := b.q.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobs.StateAvailable, j.State, "a paused queue's job is not claimed")
	}

	br.open(b.srv.URL + "/")
	require.Contains(t, br.text("#paused"), "bulk")
	require.Contains(t, br.text("#paused"), "dashboard")
	br.find(`#queues a.resume[data-queue="bulk"]`)
	br.screenshot("overview-paused")

	br.open(b.srv.URL + "/workers")
	table := br.text("#workers")
	require.Contains(t, table, w.ID())
	require.NotContains(t, table, "gone-1-dead", "a process that stopped beating is not listed")
	require.Regexp(t, `bulk, reports\s+4\s+0\s+kind:<b id="limitbold">x</b>=1, kind:mail=2, queue:reports=3\s`, table)
	require.Equal(t, float64(0), br.script(`return document.querySelectorAll("#limitbold").length`), "a limit's name is text, not markup")
	br.screenshot("workers")

	br.open(b.srv.URL + "/")
	br.click(`#paused a.resume`)
	br.click("#confirm")
	require.Equal(t, "Queue bulk resumed.", br.text("#result"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := store.Of(b.q).Collection().CountDocuments(ctx, bson.M{"queue": "bulk", "state": "succeeded"})
		require.NoError(c, err)
		assert.EqualValues(c, len(bulk), n)
	}, 20*time.Second, 20*time.Millisecond, "the worker runs bulk's jobs once it is resumed")
}

// TestDashboardQueueActionsNeedTheToken: a pause from elsewhere changes
// nothing; pausing twice reports that nothing changed.
func TestDashboardQueueActionsNeedTheToken(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Refresh: -1})
	status, body := b.post(t, "/queues/pause", url.Values{"queue": {"mail"}}, "")
	require.Equal(t, http.StatusForbidden, status, body)
	status, body = b.post(t, "/queues/pause", url.Values{"queue": {"mail"}, "csrf": {b.token(t)}}, "http://evil.example")
	require.Equal(t, http.StatusForbidden, status, body)
	states, err := b.q.QueueStates(b.ctx)
	require.NoError(t, err)
	require.Empty(t, states)

	_, page := b.get(t, "/queues/pause?queue="+url.QueryEscape("a/b <x>"))
	require.Contains(t, page, `value="a/b &lt;x&gt;"`, "the queue name is escaped")
	for i, want := range []string{"Queue a/b &lt;x&gt; paused.", "Queue a/b &lt;x&gt; was already paused; nothing changed."} {
		status, body := b.post(t, "/queues/pause", url.Values{"queue": {"a/b <x>"}, "csrf": {b.token(t)}}, "")
		require.Equal(t, http.StatusOK, status, body)
		require.Contains(t, body, want, "pause %d", i)
	}
	_, page = b.get(t, "/")
	require.Contains(t, page, `href="/queues/resume?queue=a%2fb%20%3cx%3e"`, "the queue name is escaped in the link")
	status, body = b.post(t, "/queues/pause", url.Values{"queue": {""}, "csrf": {b.token(t)}}, "")
	require.Equal(t, http.StatusBadRequest, status, body)
	status, _ = b.get(t, "/queues/melt?queue=x")
	require.Equal(t, http.StatusNotFound, status)
}
