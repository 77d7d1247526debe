package worker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
)

// startOn starts a worker like start does, on q, with afterClaim (when not
// nil) run between each claim's reply and the launch of its jobs.
func (b *bundle) startOn(t *testing.T, q *queue.Client, cfg worker.Config, afterClaim func([]*jobs.Job)) *worker.Worker {
	t.Helper()
	cfg.Logger = b.log
	if cfg.Lease == 0 {
		cfg.Lease = 2 * time.Second
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 100 * time.Millisecond
	}
	cfg.PollMin, cfg.PollMax = 5*time.Millisecond, 50*time.Millisecond
	w, err := worker.New(q, b.reg, cfg)
	require.NoError(t, err)
	if afterClaim != nil {
		worker.SetAfterClaim(w, afterClaim)
	}
	w.Start(context.Background())
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	return w
}

// tokens records the lease tokens a handler ran with.
type tokens struct {
	mu   sync.Mutex
	seen []string
}

func (tk *tokens) add(s string) { tk.mu.Lock(); tk.seen = append(tk.seen, s); tk.mu.Unlock() }
func (tk *tokens) all() []string {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	return append([]string(nil), tk.seen...)
}

// TestLostClaimReplyIsGivenBackUncounted: issue 15 #4. The server applies
// a claim and its reply is lost: the worker, which made the claim's token,
// finds the job by it and gives it back without counting the attempt, so a
// job with maxAttempts 1 still runs once and succeeds instead of waiting
// for the reaper and ending dead after an attempt that never ran.
func TestLostClaimReplyIsGivenBackUncounted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		batch int
		jobs  int
		drop  func(string, []byte) bool
	}{
		{"claim", 1, 3, isClaim},
		// Jobs runnable for a while: a backlog, which the adaptive worker
		// claims in batches after two single claims.
		{"batch stamp", 4, 8, isBatchStamp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			var ran tokens
			b.handle(t, "k", func(_ context.Context, j *jobs.Job) error {
				ran.add(j.LeaseToken)
				return nil
			}, jobs.KindOptions{})
			ids := make([]string, tc.jobs)
			for i := range ids {
				ids[i] = b.enqueue(t, "k", nil, queue.InsertOpts{MaxAttempts: 1, RunAt: time.Now().Add(-time.Second)})
			}
			q, lossy := b.lossyQueue(t, tc.drop)
			w := b.startOn(t, q, worker.Config{Concurrency: 4, ClaimBatch: tc.batch}, nil)
			for _, id := range ids {
				j := b.waitState(t, id, jobs.StateSucceeded, jobs.StateDead)
				require.Equal(t, jobs.StateSucceeded, j.State)
				require.Equal(t, 1, j.Attempt, "the lost claim's attempt is not counted")
				require.Empty(t, j.Errors)
			}
			require.EqualValues(t, 1, lossy.dropped.Load(), "one reply was lost")
			require.Len(t, ran.all(), len(ids), "each job ran once")
			require.GreaterOrEqual(t, w.Stats().ReleasedUnstarted, int64(1))
			require.GreaterOrEqual(t, b.logs.FilterMessageSnippet("gave back the jobs of a claim that returned an error").Len(), 1)
		})
	}
}

// TestClaimAnsweredPastItsLeaseDoesNotStart: issue 15 #5. A claim whose
// jobs arrive with less than two heartbeat intervals of lease left (here
// the process stalls between the claim's reply and the launch until the
// lease has expired) does not start the handler: the job is given back,
// its attempt not counted, and runs later on a fresh claim.
func TestClaimAnsweredPastItsLeaseDoesNotStart(t *testing.T) {
	b := setup(t)
	var ran tokens
	b.handle(t, "k", func(_ context.Context, j *jobs.Job) error {
		ran.add(j.LeaseToken)
		return nil
	}, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{MaxAttempts: 1})
	var stalled atomic.Value
	w := b.startOn(t, b.q, worker.Config{Lease: time.Second, HeartbeatInterval: 100 * time.Millisecond},
		func(claimed []*jobs.Job) {
			if len(claimed) == 0 || stalled.Load() != nil {
				return
			}
			stalled.Store(claimed[0].LeaseToken)
			for time.Now().Before(*claimed[0].LeaseExpiresAt) { // the process stalls past the lease
				time.Sleep(10 * time.Millisecond)
			}
		})
	j := b.waitState(t, id, jobs.StateSucceeded, jobs.StateDead)
	require.Equal(t, jobs.StateSucceeded, j.State)
	require.Equal(t, 1, j.Attempt)
	require.Empty(t, j.Errors)
	require.NotNil(t, stalled.Load())
	require.NotContains(t, ran.all(), stalled.Load(), "the handler started on the stalled claim")
	require.Len(t, ran.all(), 1)
	require.EqualValues(t, 1, w.Stats().ReleasedUnstarted)
	require.Equal(t, 1, b.logs.FilterMessageSnippet("too little lease left to start it; gave it back").Len())
}

// TestClaimReplyLaterThanTheLeaseDoesNotStart: issue 15 #5. The server
// applies a claim and its reply comes later than the lease (held here until
// the driver gives up): the claim is bounded by the lease (lease − 2 ×
// heartbeat, not a fixed 10 s), so the worker gives up on it in time, finds
// the job by the claim's token and gives it back uncounted; the handler
// never runs on that claim, and the job runs once, attempt 1.
func TestClaimReplyLaterThanTheLeaseDoesNotStart(t *testing.T) {
	b := setup(t)
	var ran tokens
	b.handle(t, "k", func(_ context.Context, j *jobs.Job) error {
		ran.add(j.LeaseToken)
		return nil
	}, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{MaxAttempts: 1})
	q, lossy := b.lossyQueueWith(t, &lossyDialer{drop: isClaim, hold: true})
	start := time.Now()
	w := b.startOn(t, q, worker.Config{Lease: time.Second, HeartbeatInterval: 100 * time.Millisecond}, nil)
	j := b.waitState(t, id, jobs.StateSucceeded, jobs.StateDead)
	require.Equal(t, jobs.StateSucceeded, j.State)
	require.Equal(t, 1, j.Attempt)
	require.Empty(t, j.Errors)
	require.EqualValues(t, 1, lossy.dropped.Load())
	require.Len(t, ran.all(), 1)
	require.EqualValues(t, 1, w.Stats().ReleasedUnstarted)
	require.Less(t, time.Since(start), 5*time.Second, "the claim waited past its lease")
}

// TestLostCompletionReplyIsReportedDone: issue 15 #7. The server applies a
// completion and its reply is lost; the retry's fence no longer matches,
// and reading the job back shows this attempt's own outcome: the job is
// logged finished, not "lease was lost".
func TestLostCompletionReplyIsReportedDone(t *testing.T) {
	b := setup(t)
	b.handle(t, "k", func(context.Context, *jobs.Job) error { return nil }, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{})
	q, lossy := b.lossyQueue(t, isCompletion)
	b.startOn(t, q, worker.Config{}, nil)
	j := b.waitState(t, id, jobs.StateSucceeded)
	require.Equal(t, 1, j.Attempt)
	require.Eventually(t, func() bool {
		return b.logs.FilterMessageSnippet("job finished").Len() > 0
	}, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, b.logs.FilterMessageSnippet("job finished").Len(), "%v", b.logs.FilterMessageSnippet("job finished").All())
	require.EqualValues(t, 1, lossy.dropped.Load())
	require.Equal(t, "succeeded", b.logs.FilterMessage("job finished").All()[0].ContextMap()["outcome"])
	require.Zero(t, b.logs.FilterMessageSnippet("lease was lost").Len())
	require.Equal(t, 1, b.logs.FilterMessageSnippet("recording the job's outcome failed; retrying").Len())
}

// stubborn registers kind "stuck": a handler that ignores its context on
// its first attempt until the test ends, and succeeds on later ones. It
// returns a channel that receives each first attempt's start.
func (b *bundle) stubborn(t *testing.T, timeout time.Duration) <-chan struct{} {
	t.Helper()
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	b.handle(t, "stuck", func(_ context.Context, j *jobs.Job) error {
		if j.Attempt > 1 {
			return nil
		}
		started <- struct{}{}
		<-release // ignores its context
		return errors.New("returned at last")
	}, jobs.KindOptions{Timeout: timeout})
	// Runs before the worker's stop (cleanups run last first): the stuck
	// goroutine returns, and its result is discarded, before the test ends.
	t.Cleanup(func() {
		close(release)
		require.Eventually(t, func() bool {
			return b.logs.FilterMessageSnippet("given up on as stuck has returned").Len() == 1
		}, 5*time.Second, 10*time.Millisecond)
	})
	return started
}

// TestStuckHandlerPastTimeoutIsGivenUp: issue 15 #10. A handler that
// ignores its context past its kind's timeout plus StuckGrace no longer
// holds its job nor its slot: the lease stops being renewed, the attempt
// fails with a clear error, the stuck handler is logged and counted, and
// the job's retry runs on the same one-slot worker while the first
// handler still hangs.
func TestStuckHandlerPastTimeoutIsGivenUp(t *testing.T) {
	b := setup(t)
	started := b.stubborn(t, 100*time.Millisecond)
	id := b.enqueue(t, "stuck", nil, queue.InsertOpts{MaxAttempts: 3})
	w := b.start(t, worker.Config{Concurrency: 1, StuckGrace: 200 * time.Millisecond})
	<-started
	j := b.waitState(t, id, jobs.StateSucceeded)
	require.Equal(t, 2, j.Attempt)
	require.Len(t, j.Errors, 1)
	require.Equal(t, 1, j.Errors[0].Attempt)
	require.Equal(t, "handler did not return within timeout+grace (100ms + 200ms)", j.Errors[0].Message)
	require.EqualValues(t, 1, w.Stats().StuckHandlers)
	logs := b.logs.FilterMessageSnippet("stuck handler").FilterLevelExact(zapcore.ErrorLevel).All()
	require.Len(t, logs, 1)
	ctx := logs[0].ContextMap()
	require.Equal(t, id, ctx["job_id"])
	require.Equal(t, "stuck", ctx["kind"])
	require.Equal(t, "timeout", ctx["reason"])
	require.GreaterOrEqual(t, ctx["running_for"], 300*time.Millisecond)
}

// TestStuckHandlerAfterCancelIsCancelled: a cancel request takes effect
// though the handler ignores its context.
func TestStuckHandlerAfterCancelIsCancelled(t *testing.T) {
	b := setup(t)
	started := b.stubborn(t, time.Hour)
	id := b.enqueue(t, "stuck", nil, queue.InsertOpts{})
	w := b.start(t, worker.Config{StuckGrace: 200 * time.Millisecond})
	<-started
	out, err := b.q.Cancel(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, queue.CancelRequested, out)
	j := b.waitState(t, id, jobs.StateCancelled)
	require.Equal(t, 1, j.Attempt)
	require.Len(t, j.Errors, 1)
	require.Contains(t, j.Errors[0].Message, "did not return within 200ms of the cancel request")
	require.EqualValues(t, 1, w.Stats().StuckHandlers)
	require.Equal(t, "cancel requested",
		b.logs.FilterMessageSnippet("stuck handler").All()[0].ContextMap()["reason"])
}

func TestLeaseHeartbeatAndClaimTimeoutValidation(t *testing.T) {
	reg := jobs.NewRegistry()
	require.NoError(t, reg.Add("k", jobs.HandlerFunc(func(context.Context, *jobs.Job) error { return nil }), jobs.KindOptions{}))
	for _, tc := range []struct {
		cfg  worker.Config
		want string
	}{
		{worker.Config{Lease: 2 * time.Second, HeartbeatInterval: time.Second},
			"worker.heartbeatInterval: 1s must be at most a third of worker.lease (2s / 3 = 666.666666ms)"},
		{worker.Config{Lease: 30 * time.Second, HeartbeatInterval: 10001 * time.Millisecond}, "worker.heartbeatInterval: 10.001s"},
		{worker.Config{StuckGrace: -time.Second}, "worker.stuckGrace: -1s must not be negative"},
	} {
		_, err := worker.New(&queue.Client{}, reg, tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
	_, err := worker.New(&queue.Client{}, reg, worker.Config{Lease: 3 * time.Second, HeartbeatInterval: time.Second})
	require.NoError(t, err, "a third exactly is allowed")

	for _, tc := range []struct {
		lease, heartbeat, claimTimeout, margin time.Duration
	}{
		{30 * time.Second, 10 * time.Second, 10 * time.Second, 20 * time.Second},
		{2 * time.Second, 500 * time.Millisecond, time.Second, time.Second},
		{time.Minute, time.Second, 10 * time.Second, 2 * time.Second},
	} {
		c := worker.Config{Lease: tc.lease, HeartbeatInterval: tc.heartbeat}.WithDefaults()
		require.NoError(t, c.Validate())
		require.Equal(t, tc.claimTimeout, c.ClaimTimeout(), "lease %s", tc.lease)
		require.Equal(t, tc.margin, c.StartMargin())
		require.GreaterOrEqual(t, c.Lease-c.ClaimTimeout(), c.StartMargin(), "a claim answered in time leaves the margin")
	}
}

// TestSlowClaimRenewsAtOnce: a job whose claim came back with enough lease
// to start but less than lease − heartbeatInterval has its lease renewed
// as soon as its handler starts, not a heartbeat interval later, so that a
// live lease keeps about lease − heartbeatInterval ahead of it.
func TestSlowClaimRenewsAtOnce(t *testing.T) {
	b := setup(t)
	renewed := make(chan time.Duration, 1)
	b.handle(t, "k", func(ctx context.Context, j *jobs.Job) error {
		start := time.Now()
		for time.Since(start) < 5*time.Second {
			cur, err := b.q.Get(ctx, j.ID)
			if err == nil && cur.HeartbeatAt != nil && cur.HeartbeatAt.After(*j.HeartbeatAt) {
				renewed <- time.Since(start)
				return nil
			}
			time.Sleep(10 * time.Millisecond)
		}
		renewed <- -1
		return nil
	}, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{})
	const lease, interval = 4 * time.Second, time.Second
	b.startOn(t, b.q, worker.Config{Lease: lease, HeartbeatInterval: interval}, func(claimed []*jobs.Job) {
		for _, j := range claimed { // a slow claim: 2.8 s of lease left, above the 2 s margin, below 3 s
			for time.Until(*j.LeaseExpiresAt) > lease-interval-200*time.Millisecond {
				time.Sleep(10 * time.Millisecond)
			}
		}
	})
	d := <-renewed
	require.Positive(t, d, "the lease was never renewed")
	require.Less(t, d, interval-200*time.Millisecond, "renewed a whole interval after the start, not at once")
	b.waitState(t, id, jobs.StateSucceeded)
}

// TestCompletionAppliedAtTheLeasesEndIsReportedDone: the first completion
// is applied but its reply is held until the driver gives up, which the
// lease bounds, so no time is left for a retry after a backoff. One last
// try at once finds its fence gone, reads the job back and reports it
// finished, rather than "could not be recorded" (a succeeded job the chaos
// run's check found logged as unrecorded).
func TestCompletionAppliedAtTheLeasesEndIsReportedDone(t *testing.T) {
	b := setup(t)
	b.handle(t, "k", func(context.Context, *jobs.Job) error { return nil }, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{})
	q, lossy := b.lossyQueueWith(t, &lossyDialer{drop: isCompletion, hold: true})
	b.startOn(t, q, worker.Config{Lease: 3 * time.Second, HeartbeatInterval: time.Second}, nil)
	j := b.waitState(t, id, jobs.StateSucceeded)
	require.Equal(t, 1, j.Attempt)
	require.Eventually(t, func() bool {
		return b.logs.FilterMessageSnippet("job finished").Len() > 0
	}, 20*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 1, lossy.dropped.Load())
	require.Zero(t, b.logs.FilterMessageSnippet("could not be recorded").Len(), "%v", b.logs.FilterMessageSnippet("job finished").All())
	require.Equal(t, "succeeded", b.logs.FilterMessage("job finished").All()[0].ContextMap()["outcome"])
}
