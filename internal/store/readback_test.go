package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

// finishingWrite is one of the fenced writes that end an attempt, as a
// worker makes it.
type finishingWrite struct {
	name        string
	op          string     // the write's name for WithLostFinishReply
	maxAttempts int        // more than one, so that a take-over re-queues the job
	want        jobs.State // where the first, applied try leaves the job
	write       func(ctx context.Context, c *store.Store, j *jobs.Job) error
}

var finishingWrites = []finishingWrite{
	{"complete", "complete", 3, jobs.StateSucceeded, func(ctx context.Context, c *store.Store, j *jobs.Job) error {
		return store.Of(c).Complete(ctx, store.LeaseOf(j))
	}},
	{"fail to retry", "fail", 3, jobs.StateAvailable, func(ctx context.Context, c *store.Store, j *jobs.Job) error {
		_, err := store.Of(c).Fail(ctx, store.LeaseOf(j), j, errors.New("boom"))
		return err
	}},
	{"fail to dead", "fail", 3, jobs.StateDead, func(ctx context.Context, c *store.Store, j *jobs.Job) error {
		_, err := store.Of(c).Fail(ctx, store.LeaseOf(j), j, jobs.Permanent(errors.New("bad args")))
		return err
	}},
	{"cancelled", "cancel", 3, jobs.StateCancelled, func(ctx context.Context, c *store.Store, j *jobs.Job) error {
		return store.Of(c).Cancelled(ctx, store.LeaseOf(j), j, "cancelled while running")
	}},
	{"release", "release", 3, jobs.StateAvailable, func(ctx context.Context, c *store.Store, j *jobs.Job) error {
		return store.Of(c).Release(ctx, store.LeaseOf(j))
	}},
}

// requireOutcomeUnknown checks that err says the write's outcome is not
// known and is not a lost lease, which a worker would log as "lease was
// lost" for a write that may have been applied.
func requireOutcomeUnknown(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.NotErrorIs(t, err, jobs.ErrLeaseLost)
	require.ErrorIs(t, err, queue.ErrOutcomeUnknown)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the read-back's own failure is kept")
}

// TestFailedReadBackAfterLostFinishReplyIsUnknown: the chaos run's case. A
// finishing write is applied and its reply lost; the retry's fence matches
// nothing, and reading the job back runs out of time. The retry reports the
// outcome unknown, not the lease lost; a later retry whose read-back works
// finds the attempt's own outcome and reports it written.
func TestFailedReadBackAfterLostFinishReplyIsUnknown(t *testing.T) {
	for _, tc := range finishingWrites {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			res, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{MaxAttempts: tc.maxAttempts})
			require.NoError(t, err)
			j := b.claim(t, claimAll)
			lost := store.WithLostFinishReply(store.Of(b.q), tc.op, 1, errReset)
			require.ErrorIs(t, tc.write(b.ctx, lost, j), errReset)
			require.Equal(t, tc.want, b.get(t, res.ID).State, "the server applied the first try")

			requireOutcomeUnknown(t, tc.write(b.ctx, store.WithReadBackTimeout(store.Of(b.q), 0), j))
			require.Equal(t, tc.want, b.get(t, res.ID).State, "the failed retry wrote nothing")

			require.NoError(t, tc.write(b.ctx, store.Of(b.q), j), "a retry that reads back finds the attempt's own outcome")
		})
	}
}

// TestFailedReadBackAfterRealLossIsUnknown: when the lease was really
// taken and the read-back fails, nothing tells the loss from an earlier try
// applied: the outcome is reported unknown too, and a retry whose read-back
// works reports the loss.
func TestFailedReadBackAfterRealLossIsUnknown(t *testing.T) {
	for _, tc := range finishingWrites {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			res, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{MaxAttempts: tc.maxAttempts})
			require.NoError(t, err)
			old := b.claim(t, claimAll)
			b.takeOver(t, old)

			requireOutcomeUnknown(t, tc.write(b.ctx, store.WithReadBackTimeout(store.Of(b.q), 0), old))
			require.Equal(t, jobs.StateRunning, b.get(t, res.ID).State, "the new holder's attempt is untouched")

			require.ErrorIs(t, tc.write(b.ctx, store.Of(b.q), old), jobs.ErrLeaseLost)
		})
	}
}

// TestFailedHeartbeatReadBackIsUnknown: a batched renewal that did not
// match every lease reads them back; when that read fails, which leases
// were renewed is not known, and the error says so (ErrOutcomeUnknown),
// not that a lease was lost.
func TestFailedHeartbeatReadBackIsUnknown(t *testing.T) {
	b := setup(t)
	enqueueN(t, b, 2)
	victim := b.claim(t, claimAll)
	kept := b.claim(t, claimAll)
	b.takeOver(t, victim)

	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	leases := []store.Lease{store.LeaseOf(victim), store.LeaseOf(kept)}
	_, err := store.HeartbeatManyWithStall(ctx, store.Of(b.q), leases, time.Hour, func(step string) {
		if step == "read" {
			cancel() // the read back fails
		}
	})
	require.ErrorIs(t, err, queue.ErrOutcomeUnknown)
	require.ErrorIs(t, err, context.Canceled, "the read's own failure is kept")
	require.NotErrorIs(t, err, jobs.ErrLeaseLost)

	got, err := store.HeartbeatManyWithStall(b.ctx, store.Of(b.q), leases, time.Hour, nil)
	require.NoError(t, err, "a retry whose read works says what happened to each lease")
	require.ErrorIs(t, got[store.LeaseOf(victim)].Err, jobs.ErrLeaseLost)
	require.NoError(t, got[store.LeaseOf(kept)].Err)
}
