package worker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// settleStall makes the first settle of w's dependents wait until resume
// is closed or its context ends; stalled is closed once it waits.
type settleStall struct {
	once    sync.Once
	stalled chan struct{}
	resume  chan struct{}
	over    atomic.Bool // the stalled settle went on
}

func (b *bundle) stallFirstSettle(t *testing.T, cfg worker.Config) (*worker.Worker, *settleStall) {
	t.Helper()
	s := &settleStall{stalled: make(chan struct{}), resume: make(chan struct{})}
	cfg.Logger, cfg.Lease, cfg.HeartbeatInterval = b.log, 2*time.Second, 100*time.Millisecond
	cfg.PollMin, cfg.PollMax = 5*time.Millisecond, 50*time.Millisecond
	// A process limit: a job's one dependent is then settled, not taken
	// by its worker as it is released (runNext).
	cfg.ProcessLimits = map[string]int{queue.KindLimit("step"): 100}
	w, err := worker.New(b.q, b.reg, cfg)
	require.NoError(t, err)
	worker.SetOnSettle(w, func(ctx context.Context, _ []string) {
		first := false
		s.once.Do(func() { first = true })
		if !first {
			return
		}
		close(s.stalled)
		defer s.over.Store(true)
		select {
		case <-s.resume:
		case <-ctx.Done():
		}
	})
	w.Start(context.Background())
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	return w, s
}

// pair enqueues the job parent and the job kid to run after it, in one
// call: parent is claimed knowing it has a dependent.
func (b *bundle) pair(t *testing.T, parent, kid string) (string, string) {
	t.Helper()
	_, err := b.q.EnqueueMany(b.ctx, []queue.Insert{
		{Kind: "step", Opts: queue.InsertOpts{ID: parent}},
		{Kind: "step", Opts: queue.InsertOpts{ID: kid, After: []string{parent}}},
	})
	require.NoError(t, err)
	return parent, kid
}

// A finished job does not wait for the settle of its dependents: while
// that settle stalls, the job and the jobs with dependents finished after
// it leave the worker, their slots free; once it resumes, the dependents
// run.
func TestWorkflowSettleHoldsNoSlot(t *testing.T) {
	b := setup(t)
	f := b.flow(t)
	p1, k1 := b.pair(t, "p1", "k1")
	p2, k2 := b.pair(t, "p2", "k2")
	w, s := b.stallFirstSettle(t, worker.Config{Concurrency: 2})
	b.waitState(t, p1, jobs.StateSucceeded)
	b.waitState(t, p2, jobs.StateSucceeded)
	<-s.stalled
	require.Eventually(t, func() bool { return w.Running() == 0 }, 20*time.Second, 10*time.Millisecond,
		"finished jobs still held while a settle stalls")
	require.False(t, s.over.Load(), "the jobs were held until the stalled settle ended")
	close(s.resume)
	b.waitState(t, k1, jobs.StateSucceeded)
	b.waitState(t, k2, jobs.StateSucceeded)
	f.check(t, p1, k1, p2, k2)
}

// A worker that stops while a settle stalls ends it and returns; the
// finished job is left due, and the leader's pass releases its dependent.
func TestWorkflowSettleStoppedLeftToTheLeader(t *testing.T) {
	b := setup(t)
	f := b.flow(t)
	p1, k1 := b.pair(t, "p1", "k1")
	w, s := b.stallFirstSettle(t, worker.Config{Concurrency: 1})
	<-s.stalled
	require.NoError(t, w.StopAndCancel(context.Background()))
	require.True(t, s.over.Load(), "the stop ended the stalled settle")
	b.waitState(t, p1, jobs.StateSucceeded)
	b.waitState(t, k1, jobs.StateBlocked)
	_, err := b.q.SettleDependents(b.ctx, time.Minute, 100)
	require.NoError(t, err)
	b.waitState(t, k1, jobs.StateAvailable)
	f.check(t, p1)
}

// Down a chain, each task is claimed by the worker that ran the one
// before, as its completion's settle releases it (runNext): the chain
// costs the dispatcher a claim or two, and a few empty claims (one a
// second, when the news of the drained backlog runs out). Before, each
// task cost a claim and an empty one.
func TestWorkflowChainRunsOnItsParentsWorker(t *testing.T) {
	b := setup(t)
	b.handle(t, "link", func(context.Context, *jobs.Job) error { return nil }, jobs.KindOptions{})
	const n = 40
	b.chain(t, n)
	var empty, claims atomic.Int64
	w, err := worker.New(b.q, b.reg, worker.Config{Concurrency: 4, Logger: b.log, Lease: 5 * time.Second,
		HeartbeatInterval: time.Second, PollMin: time.Minute, PollMax: time.Minute})
	require.NoError(t, err)
	worker.SetAfterClaim(w, func(claimed []*jobs.Job) {
		if len(claimed) == 0 {
			empty.Add(1)
		}
		claims.Add(1)
	})
	w.Start(context.Background())
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	b.waitState(t, fmt.Sprint("c", n-1), jobs.StateSucceeded)
	require.Less(t, empty.Load(), int64(n/4), "empty claims down a chain of %d", n)
	require.Less(t, claims.Load(), int64(n/4), "claims down a chain of %d", n)
	// The flags are cleared 32 at a time, the first within 100 ms.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for i := range n - 1 {
			j, err := b.q.Get(b.ctx, fmt.Sprint("c", i))
			require.NoError(c, err)
			assert.True(c, j.Dependents, "c%d settled", i)
		}
	}, 10*time.Second, 20*time.Millisecond)
}

// Under a concurrency limit a chain's tasks are not taken by runNext (a
// claim under a limit takes a run slot): they are released by settles and
// claimed, and the chain runs to its end.
func TestWorkflowChainUnderALimitRunsBySettles(t *testing.T) {
	b := setup(t)
	b.handle(t, "link", func(context.Context, *jobs.Job) error { return nil }, jobs.KindOptions{})
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("link"), 1, ""))
	const n = 10
	b.chain(t, n)
	var claims atomic.Int64
	w, err := worker.New(b.q, b.reg, worker.Config{Concurrency: 4, Logger: b.log, Lease: 5 * time.Second,
		HeartbeatInterval: time.Second, PollMin: 10 * time.Millisecond, PollMax: 100 * time.Millisecond})
	require.NoError(t, err)
	worker.SetAfterClaim(w, func(claimed []*jobs.Job) { claims.Add(int64(len(claimed))) })
	w.Start(context.Background())
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	b.waitState(t, fmt.Sprint("c", n-1), jobs.StateSucceeded)
	require.Equal(t, int64(n), claims.Load(), "every task claimed by the dispatcher")
}

// A job enqueued while a chain runs on a worker whose claims take just
// each released task is claimed once the news of the drained backlog runs
// out (drainedFor), not at the next poll a minute later: it succeeds
// before the chain, 2.5 s long, ends.
func TestJobEnqueuedBesideAChainIsClaimed(t *testing.T) {
	b := setup(t)
	b.handle(t, "link", func(ctx context.Context, _ *jobs.Job) error {
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}, jobs.KindOptions{})
	b.handle(t, "plain", func(context.Context, *jobs.Job) error { return nil }, jobs.KindOptions{})
	const n = 50
	b.chain(t, n)
	w, err := worker.New(b.q, b.reg, worker.Config{Concurrency: 4, ClaimBatch: 1, Logger: b.log, Lease: 5 * time.Second,
		HeartbeatInterval: time.Second, PollMin: time.Minute, PollMax: time.Minute})
	require.NoError(t, err)
	w.Start(context.Background())
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	b.waitState(t, "c3", jobs.StateSucceeded)
	_, err = b.q.Enqueue(b.ctx, "plain", nil, queue.InsertOpts{ID: "plain"})
	require.NoError(t, err)
	b.waitState(t, "plain", jobs.StateSucceeded)
	last, err := b.q.Get(b.ctx, fmt.Sprint("c", n-1))
	require.NoError(t, err)
	require.Equal(t, jobs.StateBlocked, last.State, "the chain's last task waits still when the job enqueued beside it has run")
}

// A settle of parents that share their dependent (a fan-in's sink, which
// each settle rewrites) is followed by a wait of six times its own
// time, in which more parents finish, before the next settle: the sink is
// rewritten a few times less often. (A lower bound on the wait, not a
// speed: each settle is made to take at least 20 ms.)
func TestWorkflowFanInSettlesGather(t *testing.T) {
	b := setup(t)
	b.handle(t, "link", func(context.Context, *jobs.Job) error { return nil }, jobs.KindOptions{})
	const n = 60
	b.fanIn(t, n)
	type settle struct {
		at  time.Time
		ids int
	}
	var mu sync.Mutex
	var settles []settle
	w, err := worker.New(b.q, b.reg, worker.Config{Concurrency: 8, Logger: b.log, Lease: 5 * time.Second,
		HeartbeatInterval: time.Second, PollMin: 5 * time.Millisecond, PollMax: 50 * time.Millisecond})
	require.NoError(t, err)
	const took = 20 * time.Millisecond
	worker.SetOnSettle(w, func(_ context.Context, ids []string) {
		mu.Lock()
		settles = append(settles, settle{at: time.Now(), ids: len(ids)})
		mu.Unlock()
		time.Sleep(took)
	})
	w.Start(context.Background())
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	b.waitState(t, "sink", jobs.StateSucceeded)
	mu.Lock()
	defer mu.Unlock()
	paced := 0
	for i := 1; i < len(settles); i++ {
		if settles[i-1].ids < 4 { // a settle of few parents does not share
			continue
		}
		paced++
		require.GreaterOrEqual(t, settles[i].at.Sub(settles[i-1].at), 4*took,
			"settle %d of %d parents, then the next (of %d)", i-1, settles[i-1].ids, len(settles))
	}
	require.Positive(t, paced, "settles of parents sharing the sink, followed by another: %v", settles)
}

// A claim that takes one job with dependents while the backlog looked
// drained does not claim again at once (its settle wakes the claim of a
// chain's next task), but that news is short-lived: jobs enqueued after an
// empty claim, each with a dependent, still fill every free slot, with
// polls a minute apart and no job ending to wake a claim. Before the news
// had an end, the worker ran one of them and waited for a poll.
func TestDrainedNewsDoesNotLeaveSlotsIdle(t *testing.T) {
	b := setup(t)
	gate := make(chan struct{})
	b.handle(t, "root", func(ctx context.Context, _ *jobs.Job) error {
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return nil
	}, jobs.KindOptions{})
	b.handle(t, "leaf", func(context.Context, *jobs.Job) error { return nil }, jobs.KindOptions{})
	var empty atomic.Int64
	w, err := worker.New(b.q, b.reg, worker.Config{Concurrency: 8, ClaimBatch: 1, Logger: b.log, Lease: 5 * time.Second,
		HeartbeatInterval: time.Second, PollMin: time.Minute, PollMax: time.Minute})
	require.NoError(t, err)
	worker.SetAfterClaim(w, func(claimed []*jobs.Job) {
		if len(claimed) == 0 {
			empty.Add(1)
		}
	})
	w.Start(context.Background())
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	require.Eventually(t, func() bool { return empty.Load() > 0 }, 10*time.Second, 5*time.Millisecond)

	var ins []queue.Insert
	for i := range 12 {
		root := fmt.Sprint("root", i)
		ins = append(ins, queue.Insert{Kind: "root", Opts: queue.InsertOpts{ID: root}},
			queue.Insert{Kind: "leaf", Opts: queue.InsertOpts{ID: fmt.Sprint("leaf", i), After: []string{root}}})
	}
	_, err = b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	worker.Wake(w)
	require.Eventually(t, func() bool { return w.Running() == 8 }, 10*time.Second, 5*time.Millisecond,
		"jobs running at once with 12 waiting and 8 slots")
	close(gate)
	b.waitState(t, "leaf11", jobs.StateSucceeded)
}

// A fan-in whose parents end one at a time tries to take its sink as it
// is released about once per worker, not once per parent: the sink waits
// for the others, and a worker that found so settles the next parents
// that list it as usual (the last one's settle releases it). (A parent
// whose completion is written while the first try is on its way tries
// too.)
func TestFanInTriesItsSinkOnce(t *testing.T) {
	b := setup(t)
	b.handle(t, "link", func(context.Context, *jobs.Job) error { return nil }, jobs.KindOptions{})
	const n = 10
	b.fanIn(t, n)
	var tries atomic.Int64
	client, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(&event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			if c, _ := e.Command.Lookup("comment").StringValueOK(); c == store.ClaimReleasedComment {
				tries.Add(1)
			}
		},
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	q, err := queue.New(client.Database(store.Of(b.q).Collection().Database().Name()), queue.Config{})
	require.NoError(t, err)
	w, err := worker.New(q, b.reg, worker.Config{Concurrency: 1, ClaimBatch: 1, Logger: b.log, Lease: 5 * time.Second,
		HeartbeatInterval: time.Second, PollMin: 5 * time.Millisecond, PollMax: 50 * time.Millisecond})
	require.NoError(t, err)
	w.Start(context.Background())
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	b.waitState(t, "sink", jobs.StateSucceeded)
	require.LessOrEqual(t, tries.Load(), int64(3), "tries to take the sink")
}

// chain enqueues a chain of n jobs of kind link, c0 to c(n-1), each after
// the one before.
func (b *bundle) chain(t *testing.T, n int) {
	t.Helper()
	ins := make([]queue.Insert, n)
	for i := range ins {
		ins[i] = queue.Insert{Kind: "link", Opts: queue.InsertOpts{ID: fmt.Sprint("c", i)}}
		if i > 0 {
			ins[i].Opts.After = []string{fmt.Sprint("c", i-1)}
		}
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
}

// fanIn enqueues n jobs of kind link, p0 to p(n-1), and sink after them
// all.
func (b *bundle) fanIn(t *testing.T, n int) {
	t.Helper()
	ins := make([]queue.Insert, 0, n+1)
	var parents []string
	for i := range n {
		parents = append(parents, fmt.Sprint("p", i))
		ins = append(ins, queue.Insert{Kind: "link", Opts: queue.InsertOpts{ID: parents[i]}})
	}
	ins = append(ins, queue.Insert{Kind: "link", Opts: queue.InsertOpts{ID: "sink", After: parents}})
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
}
