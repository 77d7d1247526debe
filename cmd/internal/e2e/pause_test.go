package e2e

import (
	"context"
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

// TestPauseQueue: `docketctl pause a` stops a real worker process claiming
// from queue a within one poll, while the job it was running finishes and
// queue b is still served; stats and list show the pause; `resume` makes
// the worker run a's jobs again. Bad input exits 2.
func TestPauseQueue(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	ctx := context.Background()
	bin := ctlBinary(t)
	op := &operator{t: t, bin: bin, db: db}
	ctl := op.run

	// a's jobs come first in claim order (higher priority, runnable now).
	ins := make([]queue.Insert, 20)
	for i := range ins {
		ins[i] = queue.Insert{Kind: "record", Args: bson.M{"sleepMs": 150}, Opts: queue.InsertOpts{Queue: "a", Priority: 5}}
	}
	enqueueMany(t, q, ins)
	w := startWorker(t, db, "worker", append(fastWorker, "--queues", "a,b", "--concurrency", "1")...)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := db.Collection("executions").CountDocuments(ctx, bson.M{})
		assert.NoError(c, err)
		assert.GreaterOrEqual(c, n, int64(2), "the worker runs a's jobs")
	}, time.Minute, 20*time.Millisecond)

	out, stderr, code := ctl("pause", "--by", "ops", "a")
	require.Equal(t, 0, code, stderr)
	if !op.resent { // else the first run paused it, its reply lost
		require.Contains(t, out, "a\tpaused")
	}
	paused := time.Now()
	out, _, code = ctl("pause", "a")
	require.Equal(t, 0, code)
	require.Contains(t, out, "a\talready paused; nothing changed")

	// b's job becomes runnable once every cache read before the pause has
	// expired: the claim that takes it, had a not been paused, would have
	// taken one of a's (higher priority, older runAt) instead.
	bJob := enqueue(t, q, "record", bson.M{}, queue.InsertOpts{Queue: "b", RunAt: paused.Add(queue.PauseRefresh)})
	waitJob(t, q, bJob.ID, time.Minute, "succeeded", inState(jobs.StateSucceeded))
	count := func(f bson.M) int64 {
		t.Helper()
		return count(t, store.Of(q).Collection(), f)
	}
	left := count(bson.M{"queue": "a", "state": "available"})
	require.Positive(t, left, "a's jobs wait while it is paused")
	require.Zero(t, count(bson.M{"queue": "a", "state": "running"}), "the job running at the pause finished")
	require.Equal(t, 20-left, count(bson.M{"queue": "a", "state": "succeeded"}), "every job of a that started finished")

	out, stderr, code = ctl("stats")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `queue a: PAUSED since \S+ by ops`, out)
	out, stderr, code = ctl("list", "--queue", "a", "--state", "available", "--limit", "1")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "a (paused)")

	out, stderr, code = ctl("resume", "a", "b")
	require.Equal(t, 0, code, stderr)
	if !op.resent {
		require.Contains(t, out, "a\tresumed")
	}
	require.Contains(t, out, "b\tnot paused; nothing changed")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := store.Of(q).Collection().CountDocuments(ctx, bson.M{"queue": "a", "state": "succeeded"})
		assert.NoError(c, err)
		assert.EqualValues(c, 20, n, "a's jobs run again after resume")
	}, time.Minute, 50*time.Millisecond)
	out, _, code = ctl("stats")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "PAUSED")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pause"}, "give the names of the queues"},
		{[]string{"resume"}, "give the names of the queues"},
		{[]string{"pause", "ok", ""}, `queue name ""`},
		{[]string{"pause", " padded"}, `queue name " padded"`},
		{[]string{"pause", "a", "--by", "ops"}, `"--by" looks like a flag`},
		{[]string{"workers", "extra"}, `unexpected argument "extra"`},
		{[]string{"workers", "--ttl", "-1s"}, "--ttl"},
	} {
		_, stderr, code := ctl(tc.args...)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want, "%v", tc.args)
	}
	var states []queue.QueueState
	must(t, "read the queue states", func() (err error) { states, err = q.QueueStates(ctx); return err })
	require.Empty(t, states, "a refused pause wrote nothing")
	w.signal(syscall.SIGTERM)
	require.Equal(t, 0, w.wait(time.Minute))
}

// TestWorkersRegistry: `docketctl workers` lists the worker processes
// alive, with what each runs; a process stopped cleanly leaves the list at
// once, one killed (SIGKILL) once it has missed its beats.
func TestWorkersRegistry(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	ctx := context.Background()
	bin := ctlBinary(t)
	op := &operator{t: t, bin: bin, db: db}

	enqueue(t, q, "record", bson.M{"sleepMs": 60_000}, queue.InsertOpts{Queue: "slow"})
	w1 := startWorker(t, db, "w1", append(fastWorker, "--queues", "slow", "--concurrency", "3")...)
	w2 := startWorker(t, db, "w2", append(fastWorker, "--queues", "default,other")...)
	id1, id2 := w1.workerID(), w2.workerID()

	listed := func(args ...string) map[string]string {
		t.Helper()
		out, stderr, code := op.run(append([]string{"workers"}, args...)...)
		require.Equal(t, 0, code, stderr)
		return workerRows(out)
	}
	// Polled in another goroutine: one run, no retry, its failure a
	// failed tick.
	listedOnce := func(c *assert.CollectT) map[string]string {
		out, stderr, code := run(t, bin, db, nil, "", "workers")
		assert.Equal(c, 0, code, stderr)
		return workerRows(out)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		// w1 runs the slow job (one whose lease an election took is
		// reaped and runs again: polled until the rows show it).
		rows := listedOnce(c)
		assert.Len(c, rows, 2)
		assert.Regexp(c, `^`+id1+`\s+\S+\s+`+strings.Split(id1, "-")[len(strings.Split(id1, "-"))-2]+`\s+\S+\s+slow\s+3\s+1\s`, rows[id1])
		assert.Regexp(c, `\sdefault,other\s+10\s+0\s`, rows[id2])
	}, time.Minute, 100*time.Millisecond)

	var infos []queue.WorkerInfo
	must(t, "read the workers", func() (err error) { infos, err = q.Workers(ctx, 0, false); return err })
	require.Len(t, infos, 2)
	for _, w := range infos {
		require.NotEmpty(t, w.Version, w.ID)
		require.Positive(t, w.PID)
		require.Equal(t, []string{"noop", "record"}, filterKinds(w.Kinds, "noop", "record"))
	}

	// A clean stop deletes the entry.
	w2.signal(syscall.SIGTERM)
	require.Equal(t, 0, w2.wait(time.Minute))
	rows := listed("--all")
	require.NotContains(t, rows, id2, "a process that stopped cleanly is gone at once")

	// A killed process stops beating: it drops out of the list once it has
	// missed its beats (3 × 300 ms here), and --all still shows it.
	w1.signal(syscall.SIGKILL)
	w1.wait(time.Minute)
	killed := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NotContains(c, listedOnce(c), id1)
	}, time.Minute, 100*time.Millisecond)
	require.Less(t, time.Since(killed), 20*time.Second)
	all := listed("--all")
	require.Contains(t, all[id1], "(stopped beating)")
}

// workerRows maps each worker id that `docketctl workers` printed to its
// row.
func workerRows(out string) map[string]string {
	rows := map[string]string{}
	for _, line := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(line); len(f) > 0 {
			rows[f[0]] = line
		}
	}
	return rows
}

func filterKinds(kinds []string, want ...string) []string {
	var out []string
	for _, k := range kinds {
		for _, w := range want {
			if k == w {
				out = append(out, k)
			}
		}
	}
	return out
}
