package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestFourWorkerProcessesRunEachJobOnce: four worker processes; with
// nothing crashing, every job runs exactly once: 300 jobs each with single
// claims, with batch claims of at most 4, and with the default (adaptive
// claims). 300, not more: every claim scans devdb's collection, so the
// cost grows with the square of the jobs (1,000 took 8 minutes of a loaded
// make test), and 300 still gives every process many contested claims.
//
// Not parallel: it loads the shared server more than any other test, and
// runs alone before the parallel tests start.
func TestFourWorkerProcessesRunEachJobOnce(t *testing.T) {
	t.Run("single claims", func(t *testing.T) { fourWorkersRunEachJobOnce(t, 300, "--claim-batch", "1") })
	t.Run("batch claims", func(t *testing.T) { fourWorkersRunEachJobOnce(t, 300, "--claim-batch", "4") })
	t.Run("default", func(t *testing.T) { fourWorkersRunEachJobOnce(t, 300) })
}

func fourWorkersRunEachJobOnce(t *testing.T, n int, flags ...string) {
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	ins := make([]queue.Insert, n)
	for i := range ins {
		ins[i] = queue.Insert{Kind: "record", Args: bson.M{"i": i}}
	}
	enqueueMany(t, q, ins)

	var procs []*proc
	for i := range 4 {
		// Default leases: the server is slow enough with 1,000 jobs that
		// aggressive heartbeats would only add load.
		args := append([]string{"--concurrency", "4"}, flags...)
		procs = append(procs, startWorker(t, db, "worker"+string(rune('A'+i)), args...))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		done, err := store.Of(q).Collection().CountDocuments(context.Background(), bson.M{"state": "succeeded"})
		assert.NoError(c, err)
		assert.Equal(c, int64(n), done, "jobs succeeded")
	}, 8*time.Minute, 500*time.Millisecond, "not every job succeeded")

	for _, p := range procs {
		p.signal(syscall.SIGTERM)
	}
	owners := map[string]bool{}
	for _, p := range procs {
		require.Equal(t, 0, p.wait(time.Minute), "%s exit status", p.name)
	}
	execs := executions(t, db)
	require.Equal(t, n, len(execs), "jobs that ran")
	for id, e := range execs {
		require.Len(t, e, 1, "job %s ran %d times", id, len(e))
		owners[e[0]["owner"].(string)] = true
	}
	require.Greater(t, len(owners), 1, "the load was not shared between processes")
	bad := count(t, store.Of(q).Collection(), bson.M{"$or": bson.A{
		bson.M{"state": bson.M{"$ne": "succeeded"}}, bson.M{"attempt": bson.M{"$ne": 1}},
	}})
	require.Zero(t, bad)
}

// TestKilledWorkersJobIsReapedAndSucceeds: SIGKILL a worker mid-job; the
// reaper of another worker re-queues the job, which then succeeds there.
func TestKilledWorkersJobIsReapedAndSucceeds(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	res := enqueue(t, q, "record", bson.M{"sleepMs": 60000, "sleepAttempts": 1}, queue.InsertOpts{})

	a := startWorker(t, db, "A", fastWorker...)
	aID := a.workerID()
	waitJob(t, q, res.ID, time.Minute, "running on A", func(j *jobs.Job) bool { return j.State == jobs.StateRunning && j.Owner == aID })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		execs, err := readExecutions(db)
		assert.NoError(c, err)
		assert.Len(c, execs[res.ID], 1, "A never started the handler")
	}, time.Minute, 20*time.Millisecond)
	a.signal(syscall.SIGKILL)
	a.wait(10 * time.Second)

	b := startWorker(t, db, "B", fastWorker...)
	bID := b.workerID()
	j := waitJob(t, q, res.ID, time.Minute, "succeeded", inState(jobs.StateSucceeded))
	require.Equal(t, bID, j.Owner)
	require.Equal(t, 2, j.Attempt)
	require.Len(t, j.Errors, 1)
	require.Contains(t, j.Errors[0].Message, "lease expired")
	require.Equal(t, aID, j.Errors[0].Owner)
	execs := executions(t, db)[res.ID]
	require.Len(t, execs, 2)
	b.waitLog("reaped expired lease", 5*time.Second)
}

// TestStalledWorkerCannotWriteAfterLosingLease: a worker stopped (SIGSTOP)
// past its lease loses the job to another; resumed, it must change nothing.
func TestStalledWorkerCannotWriteAfterLosingLease(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	res := enqueue(t, q, "record", bson.M{"sleepMs": 1500, "sleepAttempts": 1, "ignoreCancel": true}, queue.InsertOpts{})

	a := startWorker(t, db, "A", fastWorker...)
	aID := a.workerID()
	waitJob(t, q, res.ID, time.Minute, "running on A", func(j *jobs.Job) bool { return j.State == jobs.StateRunning && j.Owner == aID })
	// Stopped only once its handler runs: a stall between the claim and the
	// start is another path (the job is not started on a lease about to
	// lapse; TestClaimAnsweredPastItsLeaseDoesNotStart).
	a.waitLog(`"job started"`, time.Minute)
	a.signal(syscall.SIGSTOP)

	b := startWorker(t, db, "B", fastWorker...)
	bID := b.workerID()
	done := waitJob(t, q, res.ID, time.Minute, "succeeded on B", inState(jobs.StateSucceeded))
	require.Equal(t, bID, done.Owner)
	require.Equal(t, 2, done.Attempt)

	a.signal(syscall.SIGCONT)
	// Resumed, A finds its lease lost at its next heartbeat (or, if that
	// times out, at its fenced write); either way it writes nothing.
	a.waitLog("lease was lost", 30*time.Second)
	var after *jobs.Job
	must(t, "read the job", func() (err error) { after, err = q.Get(context.Background(), res.ID); return err })
	require.Equal(t, done, after, "the stalled worker changed the job after losing its lease")
	require.NotContains(t, a.out.String(), `"job finished"`)
}

// TestSIGTERMReleasesLeases: a worker told to stop waits for its jobs up to
// its shutdown timeout, then cancels them and gives them back at once; a
// second signal stops it at once.
func TestSIGTERMReleasesLeases(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []string
		signals int
	}{
		{"timeout", []string{"--shutdown-timeout", "300ms", "--lease", "30s", "--heartbeat-interval", "1s"}, 1},
		{"second signal", []string{"--shutdown-timeout", "5m", "--lease", "30s", "--heartbeat-interval", "1s"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.NewDB(t)
			q := newQueue(t, db)
			polite := enqueue(t, q, "record", bson.M{"sleepMs": 600000}, queue.InsertOpts{Priority: 1})
			stubborn := enqueue(t, q, "record", bson.M{"sleepMs": 600000, "ignoreCancel": true}, queue.InsertOpts{})
			w := startWorker(t, db, "W", append(append([]string{}, fastWorker...), tc.args...)...)
			for _, id := range []string{polite.ID, stubborn.ID} {
				waitJob(t, q, id, time.Minute, "running", inState(jobs.StateRunning))
			}
			start := time.Now()
			w.signal(syscall.SIGTERM)
			if tc.signals == 2 {
				w.waitLog("signal again to stop at once", 10*time.Second)
				w.signal(syscall.SIGTERM)
			}
			require.Equal(t, 0, w.wait(30*time.Second))
			require.Less(t, time.Since(start), 20*time.Second)
			for _, id := range []string{polite.ID, stubborn.ID} {
				var j *jobs.Job
				must(t, "read job "+id, func() (err error) { j, err = q.Get(context.Background(), id); return err })
				require.Equal(t, jobs.StateAvailable, j.State, "job %s", id)
				require.Empty(t, j.LeaseToken)
				require.Equal(t, 0, j.Attempt)
				require.WithinDuration(t, time.Now(), j.RunAt, 30*time.Second)
			}
		})
	}
}

func TestWorkerConfigErrorsNameTheSetting(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	bin := workerBinary(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	unknown := write("unknown.yaml", "worker:\n  concurency: 3\n")
	negative := write("negative.yaml", "worker:\n  concurrency: -3\n")
	badYAML := write("bad.yaml", "worker: [\n")
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"flag not a number", nil, []string{"--concurrency", "many"}, `invalid value "many" for flag -concurrency`},
		{"env not a duration", []string{"DOCKET_LEASE=forever"}, nil, `DOCKET_LEASE (worker.lease): "forever": not a duration`},
		{"unknown yaml key", nil, []string{"--config", unknown}, "field concurency not found"},
		{"bad value in yaml", nil, []string{"--config", negative}, "worker.concurrency: -3 must be at least 1"},
		{"malformed yaml", []string{"DOCKET_CONFIG=" + badYAML}, nil, "bad.yaml"},
		{"missing file", nil, []string{"--config", filepath.Join(dir, "nope.yaml")}, "nope.yaml"},
		{"heartbeat not below lease", nil, []string{"--lease", "5s", "--heartbeat-interval", "5s"}, "worker.heartbeatInterval: 5s must be positive and shorter than worker.lease (5s)"},
		{"bad reap interval", nil, []string{"--reap-interval", "every so often"}, `invalid value "every so often" for flag -reap-interval`},
		{"bad uri", []string{"DOCKET_MONGO_URI=http://localhost"}, nil, `mongo.uri: "http://localhost" must start with mongodb://`},
		{"bad log format", nil, []string{"--log-format", "xml"}, `log.format: "xml"`},
		{"bad write concern", nil, []string{"--write-concern", "most"}, `queue.writeConcern: "most"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := run(t, bin, db, tc.env, "", tc.args...)
			require.Equal(t, 2, code, stderr)
			require.Contains(t, stderr, tc.want)
		})
	}
}

// TestPasswordNeverShown: the URI's password must not appear in logs,
// errors or --help, whatever goes wrong.
func TestPasswordNeverShown(t *testing.T) {
	t.Parallel()
	const pw = "s3cr%40tPW"
	uri := "DOCKET_MONGO_URI=mongodb://docket:" + pw + "@127.0.0.1:1/?authSource=admin"
	bin := workerBinary(t)
	check := func(what, out string) {
		t.Helper()
		require.NotContains(t, out, "s3cr")
		require.NotContains(t, out, "@tPW")
		require.NotEmpty(t, out, what)
	}
	stdout, stderr, code := run(t, bin, nil, []string{uri}, "", "--help")
	require.Equal(t, 0, code)
	check("worker --help", stdout+stderr)
	require.Contains(t, stderr, "xxxxx")

	w := startProc(t, bin, testdb.NewDB(t), "W", []string{uri, "DOCKET_MONGO_TIMEOUT=200ms"})
	w.waitLog("database not reachable; retrying", 30*time.Second)
	w.signal(syscall.SIGTERM)
	w.wait(30 * time.Second)
	check("worker logs", w.out.String())

	_, stderr, code = run(t, enqueueBinary(t), nil, []string{uri, "DOCKET_MONGO_TIMEOUT=500ms"}, "", "job", "--kind", "k")
	require.Equal(t, 1, code)
	check("enqueue error", stderr)
	require.Contains(t, stderr, "did not answer within 500ms")

	_, stderr, code = run(t, enqueueBinary(t), nil, []string{"DOCKET_MONGO_URI=mongodb://u:" + pw + "@127.0.0.1:port/"}, "", "job", "--kind", "k")
	require.Equal(t, 2, code)
	check("enqueue bad uri", stderr)
	require.True(t, strings.Contains(stderr, "mongo.uri"), stderr)
}
