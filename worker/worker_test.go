package worker_test

import (
	"context"
	"errors"
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
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

type bundle struct {
	ctx  context.Context
	q    *queue.Client
	reg  *jobs.Registry
	logs *observer.ObservedLogs
	log  *zap.Logger
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(context.Background()))
	core, logs := observer.New(zap.DebugLevel)
	log := zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))
	return &bundle{ctx: context.Background(), q: q, reg: jobs.NewRegistry(), logs: logs, log: log}
}

func (b *bundle) handle(t *testing.T, kind string, fn jobs.HandlerFunc, opts jobs.KindOptions) {
	t.Helper()
	require.NoError(t, b.reg.Add(kind, fn, opts))
}

// start starts a worker of cfg on b's queue, with fast polls and, unless
// cfg sets them, a 2 s lease renewed every 100 ms; it stops at cleanup.
func (b *bundle) start(t *testing.T, cfg worker.Config) *worker.Worker {
	t.Helper()
	return b.startOn(t, b.q, cfg, nil)
}

func (b *bundle) enqueue(t *testing.T, kind string, args any, opts queue.InsertOpts) string {
	t.Helper()
	res, err := b.q.Enqueue(b.ctx, kind, args, opts)
	require.NoError(t, err)
	return res.ID
}

// waitState polls until the job reaches one of states.
func (b *bundle) waitState(t *testing.T, id string, states ...jobs.State) *jobs.Job {
	t.Helper()
	var j *jobs.Job
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		j, err = b.q.Get(b.ctx, id)
		require.NoError(c, err)
		assert.Contains(c, states, j.State)
	}, 20*time.Second, 20*time.Millisecond, "job %s never reached %v", id, states)
	return j
}

// runOnceEach runs 200 jobs on two workers of cfg and checks that each
// ran once, on its first attempt; it returns how many jobs there were.
func (b *bundle) runOnceEach(t *testing.T, cfg worker.Config) int {
	t.Helper()
	var mu sync.Mutex
	runs := map[string]int{}
	b.handle(t, "k", func(_ context.Context, j *jobs.Job) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		return nil
	}, jobs.KindOptions{})
	ins := make([]queue.Insert, 200)
	for i := range ins {
		ins[i] = queue.Insert{Kind: "k"}
	}
	res, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	b.start(t, cfg)
	b.start(t, cfg)
	for _, r := range res {
		j := b.waitState(t, r.ID, jobs.StateSucceeded)
		require.Equal(t, 1, j.Attempt)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, len(res))
	for id, n := range runs {
		require.Equal(t, 1, n, "job %s ran %d times", id, n)
	}
	return len(res)
}

func TestRunsJobsOnceEach(t *testing.T) {
	b := setup(t)
	n := b.runOnceEach(t, worker.Config{Concurrency: 8})
	// Every job's start and end are logged with its id, kind and attempt.
	started := b.logs.FilterMessage("job started").Len()
	require.Equal(t, n, started)
	// A job is succeeded in the database before its worker logs it.
	require.Eventually(t, func() bool { return b.logs.FilterMessage("job finished").Len() == n }, 10*time.Second, 10*time.Millisecond)
	fin := b.logs.FilterMessage("job finished").All()
	require.Len(t, fin, n)
	ctx := fin[0].ContextMap()
	for _, k := range []string{"job_id", "kind", "attempt", "queue", "duration", "worker"} {
		require.Contains(t, ctx, k)
	}
}

func TestRetryThenDead(t *testing.T) {
	b := setup(t)
	var calls atomic.Int32
	b.handle(t, "k", func(context.Context, *jobs.Job) error {
		calls.Add(1)
		return errors.New("always fails")
	}, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{MaxAttempts: 3})
	b.start(t, worker.Config{})
	j := b.waitState(t, id, jobs.StateDead)
	require.Equal(t, 3, j.Attempt)
	require.Len(t, j.Errors, 3)
	for i, e := range j.Errors {
		require.Equal(t, i+1, e.Attempt)
		require.Equal(t, "always fails", e.Message)
	}
	require.EqualValues(t, 3, calls.Load())
}

func TestRetryThenSucceed(t *testing.T) {
	b := setup(t)
	b.handle(t, "k", func(_ context.Context, j *jobs.Job) error {
		if j.Attempt < 3 {
			return errors.New("transient")
		}
		return nil
	}, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{})
	b.start(t, worker.Config{})
	j := b.waitState(t, id, jobs.StateSucceeded)
	require.Equal(t, 3, j.Attempt)
	require.Len(t, j.Errors, 2)
}

type strictArgs struct {
	User string `bson:"user"`
}

func (strictArgs) Kind() string { return "strict" }
func (a strictArgs) Validate() error {
	if a.User == "" {
		return jobs.InvalidArgs("user", "must not be empty")
	}
	return nil
}

func TestPermanentErrorGoesDeadAtOnce(t *testing.T) {
	b := setup(t)
	var calls atomic.Int32
	require.NoError(t, jobs.Register(b.reg, func(context.Context, *jobs.Job, strictArgs) error {
		calls.Add(1)
		return nil
	}, jobs.KindOptions{}))
	bad := b.enqueue(t, "strict", bson.M{"user": ""}, queue.InsertOpts{})
	wrongType := b.enqueue(t, "strict", bson.M{"user": 42}, queue.InsertOpts{})
	good := b.enqueue(t, "strict", bson.M{"user": "u1"}, queue.InsertOpts{})
	b.start(t, worker.Config{})
	j := b.waitState(t, bad, jobs.StateDead)
	require.Equal(t, 1, j.Attempt)
	require.Contains(t, j.Errors[0].Message, "invalid args: user: must not be empty")
	j = b.waitState(t, wrongType, jobs.StateDead)
	require.Equal(t, 1, j.Attempt)
	require.Contains(t, j.Errors[0].Message, "invalid args")
	b.waitState(t, good, jobs.StateSucceeded)
	require.EqualValues(t, 1, calls.Load(), "the handler ran for invalid args")
}

func TestPanicIsRecordedAndRetried(t *testing.T) {
	b := setup(t)
	b.handle(t, "k", func(_ context.Context, j *jobs.Job) error {
		if j.Attempt == 1 {
			panic("boom")
		}
		return nil
	}, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{})
	b.start(t, worker.Config{})
	j := b.waitState(t, id, jobs.StateSucceeded)
	require.Equal(t, 2, j.Attempt)
	require.Equal(t, "panic: boom", j.Errors[0].Message)
	p := b.logs.FilterMessage("handler panicked").All()
	require.Len(t, p, 1)
	require.Contains(t, p[0].ContextMap()["stack"], "worker_test.go")
}

func TestTimeoutPerKind(t *testing.T) {
	b := setup(t)
	b.handle(t, "slow", func(ctx context.Context, j *jobs.Job) error {
		<-ctx.Done()
		return ctx.Err()
	}, jobs.KindOptions{Timeout: 100 * time.Millisecond})
	id := b.enqueue(t, "slow", nil, queue.InsertOpts{MaxAttempts: 1})
	b.start(t, worker.Config{})
	j := b.waitState(t, id, jobs.StateDead)
	require.Contains(t, j.Errors[0].Message, "timed out after 100ms")
}

func TestCancelRunningJob(t *testing.T) {
	b := setup(t)
	started := make(chan struct{})
	b.handle(t, "k", func(ctx context.Context, j *jobs.Job) error {
		close(started)
		<-ctx.Done()
		require.ErrorIs(t, context.Cause(ctx), jobs.ErrCancelled)
		return ctx.Err()
	}, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{})
	b.start(t, worker.Config{})
	<-started
	out, err := b.q.Cancel(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, queue.CancelRequested, out)
	j := b.waitState(t, id, jobs.StateCancelled)
	require.Equal(t, 1, j.Attempt)
	require.NotNil(t, j.FinishedAt)
	require.Contains(t, j.Errors[0].Message, "cancelled while running")
}

func TestCancelAvailableJobNeverRuns(t *testing.T) {
	b := setup(t)
	var calls atomic.Int32
	b.handle(t, "k", func(context.Context, *jobs.Job) error { calls.Add(1); return nil }, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{Delay: 300 * time.Millisecond})
	out, err := b.q.Cancel(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, queue.Cancelled, out)
	marker := b.enqueue(t, "k", nil, queue.InsertOpts{Delay: 400 * time.Millisecond})
	b.start(t, worker.Config{})
	b.waitState(t, marker, jobs.StateSucceeded)
	require.EqualValues(t, 1, calls.Load())
	require.Equal(t, jobs.StateCancelled, b.waitState(t, id, jobs.StateCancelled).State)
}

func TestLostLeaseCancelsHandlerAndWritesNothing(t *testing.T) {
	b := setup(t)
	started := make(chan struct{})
	cause := make(chan error, 1)
	b.handle(t, "k", func(ctx context.Context, j *jobs.Job) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil // claims success: must not be recorded
	}, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{})
	b.start(t, worker.Config{})
	<-started
	// Another holder takes the job, as after a reap and a new claim.
	_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": id}, bson.M{"$set": bson.M{"leaseToken": "someone-else", "owner": "w2"}})
	require.NoError(t, err)
	select {
	case c := <-cause:
		require.ErrorIs(t, c, jobs.ErrLeaseLost)
		// One sentinel: the cause is the queue's error too.
		require.ErrorIs(t, c, jobs.ErrLeaseLost)
	case <-time.After(10 * time.Second):
		t.Fatal("handler was not cancelled after its lease was lost")
	}
	require.Eventually(t, func() bool {
		return b.logs.FilterMessage("job ended after its lease was lost; writing nothing").Len() == 1
	}, 5*time.Second, 10*time.Millisecond)
	j, err := b.q.Get(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, jobs.StateRunning, j.State)
	require.Equal(t, "someone-else", j.LeaseToken)
	require.Equal(t, "w2", j.Owner)
}

func TestGracefulStopWaitsForRunningJobs(t *testing.T) {
	b := setup(t)
	started := make(chan struct{})
	b.handle(t, "k", func(ctx context.Context, j *jobs.Job) error {
		close(started)
		time.Sleep(300 * time.Millisecond)
		return nil
	}, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{})
	w := b.start(t, worker.Config{ShutdownTimeout: 10 * time.Second})
	<-started
	later := b.enqueue(t, "k", nil, queue.InsertOpts{})
	require.NoError(t, w.Stop(b.ctx))
	j, err := b.q.Get(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, jobs.StateSucceeded, j.State)
	j, err = b.q.Get(b.ctx, later)
	require.NoError(t, err)
	require.Equal(t, jobs.StateAvailable, j.State, "a stopping worker must not claim")
}

// TestStopPastTimeoutReleasesOnlyReturnedHandlers: issue 10 scenario 10.
// After Stop's timeout, a handler that honours its context gives its job
// back; one that ignores it keeps its lease (no longer renewed), so in a
// process that goes on after Stop no other worker starts the job while the
// first handler still runs.
func TestStopPastTimeoutReleasesOnlyReturnedHandlers(t *testing.T) {
	b := setup(t)
	started := make(chan struct{}, 2)
	release := make(chan struct{})
	var inStubborn, stubbornRuns atomic.Int32
	b.handle(t, "polite", func(ctx context.Context, j *jobs.Job) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, jobs.KindOptions{})
	b.handle(t, "stubborn", func(ctx context.Context, j *jobs.Job) error {
		if inStubborn.Add(1) > 1 {
			t.Errorf("job %s started while its first attempt still runs", j.ID)
		}
		defer inStubborn.Add(-1)
		stubbornRuns.Add(1)
		started <- struct{}{}
		<-release // ignores its context
		return nil
	}, jobs.KindOptions{})
	ran := make(chan string, 1)
	b.handle(t, "marker", func(ctx context.Context, j *jobs.Job) error {
		ran <- j.ID
		return nil
	}, jobs.KindOptions{})
	polite := b.enqueue(t, "polite", nil, queue.InsertOpts{})
	stubborn := b.enqueue(t, "stubborn", nil, queue.InsertOpts{Priority: 10})
	w1 := b.start(t, worker.Config{ID: "w1", Concurrency: 2, ShutdownTimeout: 200 * time.Millisecond})
	<-started
	<-started
	require.NoError(t, w1.Stop(b.ctx))

	j, err := b.q.Get(b.ctx, polite)
	require.NoError(t, err)
	require.Equal(t, jobs.StateAvailable, j.State, "the polite handler returned: its job is given back")
	require.Equal(t, 0, j.Attempt)
	require.Empty(t, j.LeaseToken)
	j, err = b.q.Get(b.ctx, stubborn)
	require.NoError(t, err)
	require.Equal(t, jobs.StateRunning, j.State, "the stubborn handler still runs: its job stays leased")
	require.Equal(t, "w1", j.Owner)
	require.NotEmpty(t, j.LeaseToken)
	require.Equal(t, 1, b.logs.FilterMessageSnippet("ignored cancellation and is still running").Len())

	// The process goes on: a second worker claims while the first handler
	// runs. One job at a time, best first, it takes the marker, then the
	// polite job, but never the stubborn job, though that one comes first.
	marker := b.enqueue(t, "marker", nil, queue.InsertOpts{Priority: 5})
	b.start(t, worker.Config{ID: "w2", Concurrency: 1})
	require.Equal(t, marker, <-ran)
	b.waitState(t, polite, jobs.StateRunning)
	j, err = b.q.Get(b.ctx, stubborn)
	require.NoError(t, err)
	require.Equal(t, "w1", j.Owner)
	require.Equal(t, int32(1), stubbornRuns.Load())

	// When the first handler returns, its outcome is recorded under its own
	// lease, which still holds: the job ran once.
	close(release)
	j = b.waitState(t, stubborn, jobs.StateSucceeded)
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, "w1", j.Owner)
	require.Equal(t, int32(1), stubbornRuns.Load())
}

// TestReleaseAbandonedGivesBackAtOnce: a process about to exit gives back
// the jobs of handlers that ignored the cancellation.
func TestReleaseAbandonedGivesBackAtOnce(t *testing.T) {
	b := setup(t)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	b.handle(t, "stubborn", func(ctx context.Context, j *jobs.Job) error {
		started <- struct{}{}
		<-release // ignores its context
		return nil
	}, jobs.KindOptions{})
	id := b.enqueue(t, "stubborn", nil, queue.InsertOpts{})
	w := b.start(t, worker.Config{ShutdownTimeout: 100 * time.Millisecond})
	<-started
	require.NoError(t, w.Stop(b.ctx))
	require.Equal(t, 1, w.ReleaseAbandoned(b.ctx))
	j, err := b.q.Get(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, jobs.StateAvailable, j.State)
	require.Equal(t, 0, j.Attempt)
	require.Empty(t, j.LeaseToken)
	close(release)
	require.Eventually(t, func() bool {
		return b.logs.FilterMessage("job ended after its lease was released at shutdown; writing nothing").Len() == 1
	}, 5*time.Second, 10*time.Millisecond)
}

func TestConfigValidation(t *testing.T) {
	q := &queue.Client{}
	reg := jobs.NewRegistry()
	_, err := worker.New(q, reg, worker.Config{})
	require.ErrorContains(t, err, "no kinds")
	require.NoError(t, reg.Add("k", jobs.HandlerFunc(func(context.Context, *jobs.Job) error { return nil }), jobs.KindOptions{}))
	for _, tc := range []struct {
		cfg  worker.Config
		want string
	}{
		{worker.Config{Concurrency: -1}, "worker.concurrency: -1"},
		{worker.Config{Lease: 10 * time.Second, HeartbeatInterval: 10 * time.Second}, "worker.heartbeatInterval: 10s"},
		{worker.Config{Lease: 100 * time.Millisecond}, "worker.lease: 100ms"},
		{worker.Config{Queues: []string{"a", ""}}, "worker.queues"},
		{worker.Config{PollMin: time.Second, PollMax: time.Millisecond}, "worker.pollMax: 1ms"},
	} {
		_, err := worker.New(q, reg, tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
	require.ErrorContains(t, reg.Add("k", jobs.HandlerFunc(func(context.Context, *jobs.Job) error { return nil }), jobs.KindOptions{}), "already registered")
}

func TestBatchModeRunsJobsOnceEach(t *testing.T) {
	b := setup(t)
	b.runOnceEach(t, worker.Config{Concurrency: 8, ClaimBatch: 8})
	require.Zero(t, b.logs.FilterMessageSnippet("lease was lost").Len())
}

func TestBatchModeStopReleasesEveryLeaseOfTheBatch(t *testing.T) {
	b := setup(t)
	started := make(chan struct{}, 4)
	b.handle(t, "k", func(ctx context.Context, _ *jobs.Job) error {
		started <- struct{}{}
		<-ctx.Done()
		return context.Cause(ctx)
	}, jobs.KindOptions{})
	ins := make([]queue.Insert, 4)
	for i := range ins {
		ins[i] = queue.Insert{Kind: "k"}
	}
	res, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	w := b.start(t, worker.Config{Concurrency: 4, ClaimBatch: 4})
	for range ins {
		<-started
	}
	require.NoError(t, w.StopAndCancel(b.ctx))
	for _, r := range res {
		j, err := b.q.Get(b.ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, jobs.StateAvailable, j.State)
		require.Zero(t, j.Attempt, "a released attempt is not counted")
	}
}

func TestClaimBatchValidation(t *testing.T) {
	reg := jobs.NewRegistry()
	require.NoError(t, reg.Add("k", jobs.HandlerFunc(func(context.Context, *jobs.Job) error { return nil }), jobs.KindOptions{}))
	_, err := worker.New(&queue.Client{}, reg, worker.Config{ClaimBatch: -1})
	require.ErrorContains(t, err, "worker.claimBatch: -1")
}
