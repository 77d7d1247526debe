package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/internal/testdb/slowproxy"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// slowBundle is a queue on a fresh database, and a client of it through a
// proxy that holds every reply for delay.
type slowBundle struct {
	ctx   context.Context
	db    *mongo.Database
	fast  *queue.Client
	slow  *queue.Client
	reg   *jobs.Registry
	log   *zap.Logger
	state func(id string) *jobs.Job
}

func newSlowBundle(t *testing.T, delay time.Duration) *slowBundle {
	t.Helper()
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	fast, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, fast.EnsureIndexes(ctx))
	proxy := slowproxy.Start(t, testdb.ProxyTarget(t), slowproxy.Config{Delay: delay})
	mc, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + proxy.Addr() + "/?directConnection=true"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = mc.Disconnect(context.Background()) })
	slow, err := queue.New(mc.Database(db.Name()), queue.Config{})
	require.NoError(t, err)
	b := &slowBundle{ctx: ctx, db: db, fast: fast, slow: slow, reg: jobs.NewRegistry(), log: zaptest.NewLogger(t)}
	b.state = func(id string) *jobs.Job {
		j, err := fast.Get(ctx, id)
		require.NoError(t, err)
		return j
	}
	return b
}

func (b *slowBundle) enqueue(t *testing.T, kind string, n int, runAt time.Time) []string {
	t.Helper()
	ins := make([]queue.Insert, n)
	for i := range ins {
		ins[i] = queue.Insert{Kind: kind, Opts: queue.InsertOpts{RunAt: runAt}}
	}
	res, err := b.fast.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	ids := make([]string, n)
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

// claimSizes is an Observer that remembers the largest claim.
type claimSizes struct {
	worker.NopObserver
	largest atomic.Int64
}

func (c *claimSizes) Claimed(_ time.Duration, n int, _ error) {
	for {
		l := c.largest.Load()
		if int64(n) <= l || c.largest.CompareAndSwap(l, int64(n)) {
			return
		}
	}
}

// When claims are slow and jobs fast, the worker claims ahead of its free
// slots, and every job still runs once. Before claims ahead, a claim took
// at most Concurrency jobs.
func TestClaimsAheadWhenClaimsAreSlow(t *testing.T) {
	b := newSlowBundle(t, 100*time.Millisecond)
	var mu sync.Mutex
	runs := map[string]int{}
	require.NoError(t, b.reg.Add("fast", jobs.HandlerFunc(func(_ context.Context, j *jobs.Job) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		return nil
	}), jobs.KindOptions{}))
	ids := b.enqueue(t, "fast", 300, time.Now().Add(-time.Second))
	var sizes claimSizes
	w, err := worker.New(b.slow, b.reg, worker.Config{Concurrency: 2, Logger: b.log, Observer: &sizes})
	require.NoError(t, err)
	w.Start(context.Background())
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) == len(ids)
	}, 2*time.Minute, 50*time.Millisecond)
	require.NoError(t, w.Stop(context.Background()))
	require.Greater(t, sizes.largest.Load(), int64(2), "no claim took more jobs than the worker's slots")
	for _, id := range ids {
		j := b.state(id)
		require.Equal(t, jobs.StateSucceeded, j.State, "job %s", id)
		require.Equal(t, 1, j.Attempt, "job %s", id)
		require.Equal(t, 1, runs[id], "job %s", id)
	}
}

// A stop gives back the jobs claimed ahead that have not started, their
// attempt not counted, and ends: no job is left running, none ran twice.
// (A worker that went on claiming after a stop gave each claim back and
// claimed again, and never stopped.)
func TestStopGivesBackJobsClaimedAhead(t *testing.T) {
	b := newSlowBundle(t, 50*time.Millisecond)
	var mu sync.Mutex
	runs := map[string]int{}
	require.NoError(t, b.reg.Add("short", jobs.HandlerFunc(func(_ context.Context, j *jobs.Job) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		return nil
	}), jobs.KindOptions{}))
	ids := b.enqueue(t, "short", 400, time.Now().Add(-time.Second))
	w, err := worker.New(b.slow, b.reg, worker.Config{Concurrency: 2, Logger: b.log})
	require.NoError(t, err)
	w.Start(context.Background())
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	require.Eventually(t, func() bool { return w.Waiting() > 0 }, time.Minute, 5*time.Millisecond, "the worker never claimed ahead")

	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not stop")
	}
	require.Zero(t, w.Waiting())
	require.Positive(t, w.Stats().ReleasedUnstarted, "no job claimed ahead was given back")
	running, err := b.db.Collection(b.fast.CollectionName()).CountDocuments(b.ctx, bson.D{{Key: "state", Value: jobs.StateRunning}})
	require.NoError(t, err)
	require.Zero(t, running, "jobs left running after the stop")
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		j := b.state(id)
		switch j.State {
		case jobs.StateSucceeded:
			require.Equal(t, 1, j.Attempt, "job %s", id)
			require.Equal(t, 1, runs[id], "job %s", id)
		case jobs.StateAvailable:
			require.Zero(t, j.Attempt, "job %s given back with its attempt counted", id)
			require.Zero(t, runs[id], "job %s given back after it ran", id)
		default:
			t.Fatalf("job %s is %s", id, j.State)
		}
	}
}

// A job claimed ahead whose cancel is requested while it waits for a slot
// ends cancelled without running.
func TestCancelOfAJobClaimedAheadEndsItUnstarted(t *testing.T) {
	b := newSlowBundle(t, 100*time.Millisecond)
	require.NoError(t, b.reg.Add("fast", jobs.HandlerFunc(func(context.Context, *jobs.Job) error { return nil }), jobs.KindOptions{}))
	gate := make(chan struct{})
	var mu sync.Mutex
	ran := map[string]bool{}
	require.NoError(t, b.reg.Add("gated", jobs.HandlerFunc(func(ctx context.Context, j *jobs.Job) error {
		mu.Lock()
		ran[j.ID] = true
		mu.Unlock()
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return nil
	}), jobs.KindOptions{}))
	// Fast jobs first: the worker learns its handlers are quick. The gated
	// jobs come once every fast one has run, so that the job claimed ahead
	// is a gated one. Claim order alone does not promise it: the worker
	// claims from candidates read ahead, and one missed there (taken by a
	// hand-off meanwhile, or given back) can be claimed after a later job.
	fast := b.enqueue(t, "fast", 20, time.Now().Add(-time.Minute))
	w, err := worker.New(b.slow, b.reg, worker.Config{
		Concurrency: 1, Lease: 3 * time.Second, HeartbeatInterval: time.Second, Logger: b.log,
	})
	require.NoError(t, err)
	w.Start(context.Background())
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	require.Eventually(t, func() bool {
		for _, id := range fast {
			if b.state(id).State != jobs.StateSucceeded {
				return false
			}
		}
		return true
	}, time.Minute, 20*time.Millisecond, "the fast jobs did not all run")
	gated := b.enqueue(t, "gated", 4, time.Now().Add(-time.Second))
	require.Eventually(t, func() bool { return w.Waiting() >= 1 }, time.Minute, 5*time.Millisecond, "no gated job was claimed ahead")

	// One gated job runs and holds the only slot; cancel one that waits.
	// Only once a gated job holds the slot (it holds it until the gate
	// opens): before, the one picked could start between the pick and the
	// cancel.
	var waiting string
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(ran) == 0 {
			return false
		}
		for _, id := range gated {
			if !ran[id] && b.state(id).State == jobs.StateRunning {
				waiting = id
				return true
			}
		}
		return false
	}, time.Minute, 10*time.Millisecond)
	_, err = b.fast.Cancel(b.ctx, waiting)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return b.state(waiting).State == jobs.StateCancelled }, 30*time.Second, 20*time.Millisecond)
	close(gate)
	mu.Lock()
	require.False(t, ran[waiting], "the cancelled job ran")
	mu.Unlock()
	for _, id := range gated {
		if id != waiting {
			require.Eventually(t, func() bool { return b.state(id).State == jobs.StateSucceeded }, time.Minute, 20*time.Millisecond)
		}
	}
}
