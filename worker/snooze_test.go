package worker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// outcomes records the outcome of each ended attempt.
type outcomes struct {
	worker.NopObserver
	mu  sync.Mutex
	got []worker.Outcome
	job []*jobs.Job
}

func (o *outcomes) Finished(j *jobs.Job, out worker.Outcome, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got, o.job = append(o.got, out), append(o.job, j)
}

func (o *outcomes) list() []worker.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]worker.Outcome(nil), o.got...)
}

// TestSnoozeRunsAgainWithoutCountingTheAttempt: a handler that snoozes
// runs again after the snooze, its attempts not counted (a job of one
// attempt snoozes three times and still succeeds) and nothing recorded in
// its errors; the observer sees each snooze.
func TestSnoozeRunsAgainWithoutCountingTheAttempt(t *testing.T) {
	b := setup(t)
	var runs atomic.Int32
	var mu sync.Mutex
	var last time.Time
	var gaps []time.Duration
	b.handle(t, "k", func(_ context.Context, j *jobs.Job) error {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if !last.IsZero() {
			gaps = append(gaps, now.Sub(last))
		}
		last = now
		if runs.Add(1) <= 3 {
			require.Equal(t, 1, j.Attempt, "a snoozed attempt is not counted")
			return jobs.Snooze(150 * time.Millisecond)
		}
		return nil
	}, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{MaxAttempts: 1})
	obs := &outcomes{}
	b.start(t, worker.Config{Observer: obs})
	j := b.waitState(t, id, jobs.StateSucceeded)
	require.EqualValues(t, 4, runs.Load())
	require.Equal(t, 1, j.Attempt)
	require.Empty(t, j.Errors, "a snooze is not an error")
	mu.Lock()
	defer mu.Unlock()
	for _, g := range gaps {
		require.GreaterOrEqual(t, g, 150*time.Millisecond, "ran again before its snooze ended")
	}
	require.Eventually(t, func() bool { return len(obs.list()) == 4 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, []worker.Outcome{worker.OutcomeSnoozed, worker.OutcomeSnoozed, worker.OutcomeSnoozed, worker.OutcomeSucceeded}, obs.list())
	require.Equal(t, jobs.StateAvailable, obs.job[0].State)
	require.Equal(t, 0, obs.job[0].Attempt, "the event's job has its attempt given back")
}

// TestCancelFromTheHandlerEndsTheJob: a handler returning jobs.Cancel ends
// its job cancelled at once, attempts left or not, with the reason in its
// errors; the observer reports it cancelled.
func TestCancelFromTheHandlerEndsTheJob(t *testing.T) {
	b := setup(t)
	var runs atomic.Int32
	b.handle(t, "k", func(context.Context, *jobs.Job) error {
		runs.Add(1)
		return jobs.Cancel(errors.New("the customer closed the account"))
	}, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{MaxAttempts: 5})
	obs := &outcomes{}
	b.start(t, worker.Config{Observer: obs})
	j := b.waitState(t, id, jobs.StateCancelled)
	require.EqualValues(t, 1, runs.Load())
	require.Equal(t, 1, j.Attempt)
	require.Len(t, j.Errors, 1)
	require.Equal(t, "cancelled by its handler: the customer closed the account", j.Errors[0].Message)
	require.NotNil(t, j.FinishedAt)
	require.Eventually(t, func() bool { return len(obs.list()) == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, worker.OutcomeCancelled, obs.list()[0])
	require.Equal(t, "cancelled by its handler: the customer closed the account", obs.job[0].Errors[0].Message)
}

// TestSnoozeAfterTheLeaseWasLostWritesNothing: a handler whose lease was
// taken (by the reaper and another worker) snoozes; the snooze's write is
// fenced on the lease and changes nothing of the new holder's job.
func TestSnoozeAfterTheLeaseWasLostWritesNothing(t *testing.T) {
	b := setup(t)
	coll := store.Of(b.q).Collection()
	b.handle(t, "k", func(ctx context.Context, j *jobs.Job) error {
		// Another holder takes the job, before any heartbeat could tell.
		_, err := coll.UpdateOne(ctx, bson.M{"_id": j.ID}, bson.M{"$set": bson.M{"leaseToken": "someone-else", "owner": "w2"}})
		require.NoError(t, err)
		return jobs.Snooze(time.Hour)
	}, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{})
	obs := &outcomes{}
	b.start(t, worker.Config{Observer: obs, Lease: 30 * time.Second, HeartbeatInterval: 10 * time.Second})
	require.Eventually(t, func() bool { return len(obs.list()) == 1 }, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, worker.OutcomeLeaseLost, obs.list()[0])
	j, err := b.q.Get(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, jobs.StateRunning, j.State)
	require.Equal(t, "someone-else", j.LeaseToken)
	require.Equal(t, 1, j.Attempt)
	require.Empty(t, j.Errors)
}

// TestSnoozeOfAJobWhoseCancelWasRequestedCancelsIt: a cancel requested
// while the handler ran wins over its snooze.
func TestSnoozeOfAJobWhoseCancelWasRequestedCancelsIt(t *testing.T) {
	b := setup(t)
	requested := make(chan struct{})
	b.handle(t, "k", func(ctx context.Context, j *jobs.Job) error {
		<-requested
		return jobs.Snooze(time.Hour) // before the heartbeat tells it
	}, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{})
	obs := &outcomes{}
	b.start(t, worker.Config{Observer: obs, Lease: 30 * time.Second, HeartbeatInterval: 10 * time.Second})
	b.waitState(t, id, jobs.StateRunning)
	out, err := b.q.Cancel(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, queue.CancelRequested, out)
	close(requested)
	j := b.waitState(t, id, jobs.StateCancelled)
	require.Len(t, j.Errors, 1)
	require.Contains(t, j.Errors[0].Message, "instead of being snoozed")
	require.Eventually(t, func() bool { return len(obs.list()) == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, worker.OutcomeCancelled, obs.list()[0])
}
