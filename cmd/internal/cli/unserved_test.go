package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

// beat registers a live worker process serving kinds on queues.
func beat(t *testing.T, q *queue.Client, id string, queues, kinds []string) {
	t.Helper()
	require.NoError(t, q.Beat(context.Background(), queue.WorkerInfo{ID: id, Host: "h", PID: 1, Queues: queues, Kinds: kinds,
		Concurrency: 1, StartedAt: time.Now(), BeatEvery: time.Minute}))
}

// TestEnqueueWarnsOfKindsNoLiveWorkerServes: job, batch and workflow
// enqueue a kind no live worker serves (a typo) and exit 0, warning on
// stderr that it waits, with the kinds live workers serve; a kind served
// on another queue only names those queues; a served kind is no warning;
// with no worker alive they say that, once. Before, they said nothing.
func TestEnqueueWarnsOfKindsNoLiveWorkerServes(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)

	_, errs, code := runEnqueue(t, uri, db, "", "job", "--kind", "send_email")
	require.Zero(t, code, errs)
	require.Equal(t, "enqueue job: warning: no worker process is alive: 1 job waits until one that serves their kind starts\n", errs)

	beat(t, q, "w1", []string{"default"}, []string{"send_email", "noop"})
	beat(t, q, "w2", []string{"mail"}, []string{"send_email"})
	out, errs, code := runEnqueue(t, uri, db, "", "job", "--kind", "send_emial")
	require.Zero(t, code, errs)
	require.NotEmpty(t, strings.TrimSpace(out), "the id is printed")
	require.Equal(t, "enqueue job: warning: no live worker serves kind send_emial on queue default: 1 job waits until one does\n"+
		"enqueue job: warning: live workers serve kinds noop, send_email\n", errs)

	_, errs, code = runEnqueue(t, uri, db, "", "job", "--kind", "send_email", "--queue", "mail")
	require.Zero(t, code, errs)
	require.Empty(t, errs)

	lines := `{"kind": "noop"}
{"kind": "noop", "queue": "reports"}
{"kind": "typo"}
{"kind": "typo"}
`
	_, errs, code = runEnqueue(t, uri, db, lines, "batch")
	require.Zero(t, code, errs)
	require.Contains(t, errs, "enqueue batch: warning: no live worker serves kind noop on queue reports: 1 job waits until one does; live workers serve it on queue default\n")
	require.Contains(t, errs, "enqueue batch: warning: no live worker serves kind typo on queue default: 2 jobs wait until one does\n")
	require.Contains(t, errs, "enqueue batch: warning: live workers serve kinds noop, send_email\n")

	tasks := `{"name": "a", "kind": "noop"}
{"name": "b", "kind": "send_emial", "after": ["a"]}
`
	_, errs, code = runEnqueue(t, uri, db, tasks, "workflow", "--id", "wf")
	require.Zero(t, code, errs)
	require.Equal(t, "enqueue workflow: warning: no live worker serves kind send_emial on queue default: 1 job waits until one does\n"+
		"enqueue workflow: warning: live workers serve kinds noop, send_email\n", errs)
}

// TestStatsShowsJobsNoLiveWorkerServes: stats lists the waiting jobs whose
// kind no live worker serves on their queue, and --json carries them with
// the number of live workers; with no worker alive it says so once.
func TestStatsShowsJobsNoLiveWorkerServes(t *testing.T) {
	t.Parallel()
	db, q := statsFixture(t) // three available jobs of kind k on queue q
	out, errs, code := runCtl(t, testdb.URI(), db, "stats")
	require.Zero(t, code, errs)
	require.Contains(t, out, "no worker process is alive: 3 jobs wait until one that serves their kind starts\n")
	require.NotContains(t, out, "no live worker serves")

	beat(t, q, "w1", []string{"q"}, []string{"other"})
	out, errs, code = runCtl(t, testdb.URI(), db, "stats")
	require.Zero(t, code, errs)
	require.Contains(t, out, "no live worker serves kind k on queue q: 3 jobs wait until one does\nlive workers serve kind other\n")

	out, errs, code = runCtl(t, testdb.URI(), db, "stats", "--json")
	require.Zero(t, code, errs)
	var doc statsJSON
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	require.Equal(t, 1, doc.WorkersAlive)
	require.Equal(t, []unservedJSON{{Queue: "q", Kind: "k", Waiting: 3}}, doc.Unserved)

	beat(t, q, "w2", []string{"q"}, []string{"k"})
	out, errs, code = runCtl(t, testdb.URI(), db, "stats")
	require.Zero(t, code, errs)
	require.NotContains(t, out, "no live worker")
	require.NotContains(t, out, "no worker process")
}
