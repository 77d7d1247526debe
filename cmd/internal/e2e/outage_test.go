package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ownDevDB starts a devdb of the test's own, which it can stop and restart,
// and returns it with a database on it and a queue client.
func ownDevDB(t *testing.T) (*testdb.DevDB, *mongo.Database, *queue.Client) {
	t.Helper()
	testdb.SkipOnRealMongo(t, "stops and restarts a devdb of its own")
	d := testdb.StartDevDB(t, "")
	client, err := mongo.Connect(options.Client().ApplyURI(d.URI()).SetServerSelectionTimeout(30 * time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	db := client.Database("outage")
	return d, db, newQueue(t, db)
}

// countLines counts the lines of out that contain s.
func countLines(out, s string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// logDuring returns the JSON log lines of out stamped (ts) from from to
// to.
func logDuring(t *testing.T, out string, from, to time.Time) string {
	t.Helper()
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		var line struct {
			TS time.Time `json:"ts"`
		}
		if json.Unmarshal([]byte(l), &line) == nil && !line.TS.Before(from) && !line.TS.After(to) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// TestWorkerRidesOutDatabaseOutage: devdb stops while jobs run. The worker
// keeps their results, retries the fenced completion until the lease would
// expire, logs one line per backoff step rather than a flood, never exits,
// and once devdb is back (within the lease) both jobs end succeeded at
// attempt 1 and the worker claims new jobs again.
func TestWorkerRidesOutDatabaseOutage(t *testing.T) {
	t.Parallel()
	d, db, q := ownDevDB(t)
	ctx := context.Background()
	// short finishes during the outage; long runs across it, heartbeating.
	short := enqueue(t, q, "record", bson.M{"sleepMs": 2500}, queue.InsertOpts{Priority: 1})
	long := enqueue(t, q, "record", bson.M{"sleepMs": 9000}, queue.InsertOpts{})

	w := startProc(t, workerBinary(t), db, "W", []string{"DOCKET_MONGO_URI=" + d.URI(), "DOCKET_MONGO_TIMEOUT=1s"},
		"--lease", "20s", "--heartbeat-interval", "500ms", "--poll-max", "200ms", "--log-format", "json")
	for _, id := range []string{short.ID, long.ID} {
		waitJob(t, q, id, time.Minute, "running", inState(jobs.StateRunning))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := db.Collection("executions").CountDocuments(ctx, bson.M{})
		assert.NoError(c, err)
		assert.EqualValues(c, 2, n, "the handlers never started")
	}, time.Minute, 20*time.Millisecond)

	d.Stop()
	down := time.Now()
	w.waitLog("recording the job's outcome failed; retrying", 30*time.Second)
	time.Sleep(time.Until(down.Add(6 * time.Second)))
	d.Restart()
	up := time.Now()

	for _, id := range []string{short.ID, long.ID} {
		j := waitJob(t, q, id, time.Minute, "succeeded", inState(jobs.StateSucceeded))
		require.Equal(t, 1, j.Attempt, "job %s ran again: its result was lost", id)
		require.Empty(t, j.Errors)
	}
	after := enqueue(t, q, "record", bson.M{}, queue.InsertOpts{})
	waitJob(t, q, after.ID, time.Minute, "succeeded after the outage", inState(jobs.StateSucceeded))
	select {
	case <-w.done:
		t.Fatalf("the worker exited during the outage:\n%s", w.out.String())
	default:
	}

	out := w.out.String()
	// One line per backoff step: the claim loop's backoff doubles from
	// 100 ms to 5 s, the completion's from 100 ms to 2 s; 6 s of outage
	// is a handful of steps each, not a line per heartbeat or per poll.
	// Counted over the outage (a failure reply devdb's --faults injects
	// before or after it logs lines of its own).
	during := logDuring(t, out, down.Add(-time.Second), up.Add(2*time.Second))
	require.LessOrEqual(t, countLines(during, "claim failed; retrying"), 8, out)
	require.LessOrEqual(t, countLines(during, "recording the job's outcome failed; retrying"), 8, out)
	require.LessOrEqual(t, countLines(during, "heartbeat failed"), 2, "more than one line per job: a line per failed heartbeat is a flood:\n%s", out)
	require.Contains(t, out, "heartbeat renewed the lease again")
	require.Contains(t, out, "claiming again: the database is reachable")
	w.signal(syscall.SIGTERM)
	require.Equal(t, 0, w.wait(30*time.Second))
}

// TestEnqueueWithStoppedServer: with the server stopped, enqueue exits 1
// with a message naming the server and the timeout, within the timeout
// (10 s by default).
func TestEnqueueWithStoppedServer(t *testing.T) {
	testdb.SkipOnRealMongo(t, "stops a devdb of its own")
	t.Parallel()
	d := testdb.StartDevDB(t, "")
	d.Stop()
	for _, tc := range []struct {
		name    string
		env     []string
		timeout time.Duration
	}{
		{"default timeout", nil, 10 * time.Second},
		{"--mongo-timeout", []string{"DOCKET_MONGO_TIMEOUT=1500ms"}, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, stderr, code := run(t, enqueueBinary(t), nil, append([]string{"DOCKET_MONGO_URI=" + d.URI()}, tc.env...), "",
				"add-friend", "--user-a", "u1", "--user-b", "u2")
			elapsed := time.Since(start)
			require.Equal(t, 1, code, stderr)
			require.Contains(t, stderr, "did not answer within "+tc.timeout.String())
			require.Contains(t, stderr, strings.TrimPrefix(d.URI(), "mongodb://"))
			require.Less(t, elapsed, tc.timeout+5*time.Second, "enqueue took %s", elapsed)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			require.Len(t, lines, 2, "two clear lines, what was not inserted and why: %q", stderr)
			require.Contains(t, lines[0], "not inserted; rerun with --id")
		})
	}
}
