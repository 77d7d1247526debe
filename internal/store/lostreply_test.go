package store_test

import (
	"errors"
	"testing"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

var errReset = errors.New("connection reset by peer")

// withToken is claimAll with the lease token the caller chose.
func withToken(token string) store.ClaimParams {
	p := claimAll
	p.Token = token
	return p
}

// requireReleasedUncounted checks that job id is available again as if the
// lost claim had never been made: attempt 0, no error, no lease.
func requireReleasedUncounted(t *testing.T, b bundle, id string) {
	t.Helper()
	j := b.get(t, id)
	require.Equal(t, jobs.StateAvailable, j.State)
	require.Zero(t, j.Attempt, "an attempt whose handler never started is not counted")
	require.Empty(t, j.Errors)
	require.Empty(t, j.LeaseToken)
	require.Nil(t, j.LeaseExpiresAt)
}

// TestReleaseClaimAfterLostClaimReply: issue 15 #4. A claim the server
// applied but whose reply was lost leaves the job running under a token
// only the claimer knows; ReleaseClaim gives it back uncounted, so a job
// with maxAttempts 1 still runs, and succeeds, instead of being reaped dead.
func TestReleaseClaimAfterLostClaimReply(t *testing.T) {
	b := setup(t)
	res, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	lost := store.WithLostClaimReply(store.Of(b.q), 1, errReset)

	got, err := store.Of(lost).Claim(b.ctx, withToken("claim-1"))
	require.ErrorIs(t, err, errReset)
	require.Nil(t, got)
	j := b.get(t, res.ID)
	require.Equal(t, jobs.StateRunning, j.State, "the server applied the claim")
	require.Equal(t, "claim-1", j.LeaseToken, "with the token the caller chose")
	require.Equal(t, 1, j.Attempt)

	n, err := store.Of(b.q).ReleaseClaim(b.ctx, "claim-1")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	requireReleasedUncounted(t, b, res.ID)
	n, err = store.Of(b.q).ReleaseClaim(b.ctx, "claim-1")
	require.NoError(t, err)
	require.Zero(t, n, "a second release finds nothing")

	again := b.claim(t, claimAll)
	require.Equal(t, res.ID, again.ID)
	require.Equal(t, 1, again.Attempt)
	require.NotEqual(t, "claim-1", again.LeaseToken)
	require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(again)))
	require.Equal(t, jobs.StateSucceeded, b.get(t, res.ID).State)

	_, err = store.Of(b.q).ReleaseClaim(b.ctx, "")
	require.ErrorContains(t, err, "empty token")
}

// TestReleaseClaimLeavesOtherLeasesAlone: only the jobs still running
// under the lost claim's token are released.
func TestReleaseClaimLeavesOtherLeasesAlone(t *testing.T) {
	b := setup(t)
	ids := enqueueN(t, b, 2)
	mine := b.claim(t, withToken("claim-1"))
	require.Equal(t, ids[0], mine.ID)
	other := b.claim(t, claimAsW2)
	require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(mine)))

	n, err := store.Of(b.q).ReleaseClaim(b.ctx, "claim-1")
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, jobs.StateSucceeded, b.get(t, mine.ID).State)
	j := b.get(t, other.ID)
	require.Equal(t, jobs.StateRunning, j.State)
	require.Equal(t, other.LeaseToken, j.LeaseToken)
}

// TestReleaseClaimAfterFailedBatchReadBack: a batch claim that lost a race
// for part of its block reads back which jobs it stamped; when that read
// fails, it returns no job, and ReleaseClaim gives back those it stamped,
// uncounted, leaving the job another worker took alone.
func TestReleaseClaimAfterFailedBatchReadBack(t *testing.T) {
	b := setup(t)
	ids := enqueueN(t, b, 3)
	var taken *jobs.Job
	c := store.WithRaceBeforeStamp(store.Of(b.q), func() { taken = b.claim(t, claimAsW2) })
	c = store.WithFailedReadBack(store.Of(c), errReset)

	got, err := store.Of(c).ClaimBatch(b.ctx, withToken("batch-1"), 3)
	require.ErrorIs(t, err, errReset)
	require.Empty(t, got)
	n, err := store.Of(b.q).ReleaseClaim(b.ctx, "batch-1")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for _, id := range ids {
		if id == taken.ID {
			j := b.get(t, id)
			require.Equal(t, jobs.StateRunning, j.State)
			require.Equal(t, taken.LeaseToken, j.LeaseToken)
			continue
		}
		requireReleasedUncounted(t, b, id)
	}
}

// TestReleaseClaimAfterLostBatchStampReply: a batch stamp applied with its
// reply lost is given back whole.
func TestReleaseClaimAfterLostBatchStampReply(t *testing.T) {
	b := setup(t)
	ids := enqueueN(t, b, 3)
	got, err := store.Of(store.WithLostStampReply(store.Of(b.q), errReset)).ClaimBatch(b.ctx, withToken("batch-1"), 3)
	require.ErrorIs(t, err, errReset)
	require.Empty(t, got)
	n, err := store.Of(b.q).ReleaseClaim(b.ctx, "batch-1")
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for _, id := range ids {
		requireReleasedUncounted(t, b, id)
	}
}

// TestLostFinishReplyIsNotALostLease: issue 15 #7. A completion, failure
// or cancellation that the server applied but whose reply was lost is
// retried; the retry's fence no longer matches, and the job, read back,
// holds this attempt's outcome: the retry reports it written, not lost.
func TestLostFinishReplyIsNotALostLease(t *testing.T) {
	cause := errors.New("boom")
	for _, tc := range []struct {
		op          string
		maxAttempts int
		write       func(c *store.Store, b bundle, j *jobs.Job) (jobs.State, error)
		want        jobs.State
	}{
		{"complete", 0, func(c *store.Store, b bundle, j *jobs.Job) (jobs.State, error) {
			return jobs.StateSucceeded, store.Of(c).Complete(b.ctx, store.LeaseOf(j))
		}, jobs.StateSucceeded},
		{"complete", 0, func(c *store.Store, b bundle, j *jobs.Job) (jobs.State, error) {
			doc, err := store.Of(c).CompleteReading(b.ctx, store.LeaseOf(j))
			if err == nil && doc != nil {
				return jobs.State(doc.Lookup("state").StringValue()), nil
			}
			return jobs.StateSucceeded, err
		}, jobs.StateSucceeded},
		{"fail", 3, func(c *store.Store, b bundle, j *jobs.Job) (jobs.State, error) {
			f, err := store.Of(c).Fail(b.ctx, store.LeaseOf(j), j, cause)
			return f.State, err
		}, jobs.StateAvailable},
		{"fail", 1, func(c *store.Store, b bundle, j *jobs.Job) (jobs.State, error) {
			f, err := store.Of(c).Fail(b.ctx, store.LeaseOf(j), j, cause)
			return f.State, err
		}, jobs.StateDead},
		{"cancel", 0, func(c *store.Store, b bundle, j *jobs.Job) (jobs.State, error) {
			return jobs.StateCancelled, store.Of(c).Cancelled(b.ctx, store.LeaseOf(j), j, "cancelled while running")
		}, jobs.StateCancelled},
	} {
		t.Run(string(tc.want), func(t *testing.T) {
			b := setup(t)
			res, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{MaxAttempts: tc.maxAttempts})
			require.NoError(t, err)
			j := b.claim(t, claimAll)
			lost := store.WithLostFinishReply(store.Of(b.q), tc.op, 1, errReset)

			_, err = tc.write(lost, b, j)
			require.ErrorIs(t, err, errReset)
			require.NotErrorIs(t, err, jobs.ErrLeaseLost)
			require.Equal(t, tc.want, b.get(t, res.ID).State, "the server applied the first try")

			state, err := tc.write(lost, b, j)
			require.NoError(t, err, "the retry finds the attempt's own outcome in place")
			require.Equal(t, tc.want, state)
			got := b.get(t, res.ID)
			require.Equal(t, tc.want, got.State)
			if tc.op != "complete" {
				require.Len(t, got.Errors, 1, "written once")
			}
		})
	}
}

// TestLostFinishReplyStillReportsARealLoss: when the lease was really
// taken, the read-back does not mistake the new holder's state for this
// attempt's outcome.
func TestLostFinishReplyStillReportsARealLoss(t *testing.T) {
	b := setup(t)
	_, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	old := b.claim(t, claimAll)
	cur := b.takeOver(t, old)
	require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(cur)))

	require.ErrorIs(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(old)), jobs.ErrLeaseLost)
	doc, err := store.Of(b.q).CompleteReading(b.ctx, store.LeaseOf(old))
	require.ErrorIs(t, err, jobs.ErrLeaseLost)
	require.Nil(t, doc)
	_, err = store.Of(b.q).Fail(b.ctx, store.LeaseOf(old), old, errors.New("boom"))
	require.ErrorIs(t, err, jobs.ErrLeaseLost)
	require.ErrorIs(t, store.Of(b.q).Cancelled(b.ctx, store.LeaseOf(old), old, "stop"), jobs.ErrLeaseLost)
	require.ErrorIs(t, store.Of(b.q).Release(b.ctx, store.LeaseOf(old)), jobs.ErrLeaseLost)
	require.Equal(t, jobs.StateSucceeded, b.get(t, old.ID).State)
}

// TestLostReleaseReplyIsNotALostLease: issue 20, Also. A release that the
// server applied but whose reply was lost is retried (a worker's final
// write is); the retry's fence matches nothing, and the job, read back,
// says this lease released it: the retry reports it done, not a lost lease,
// also when another worker has claimed the job since, and when a cancel
// request turned the release into a cancel.
func TestLostReleaseReplyIsNotALostLease(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(b bundle, j *jobs.Job) // before the lost release
		after  func(b bundle, j *jobs.Job) // between it and the retry
		want   jobs.State
	}{
		{"available", nil, nil, jobs.StateAvailable},
		{"claimed again since", nil, func(b bundle, j *jobs.Job) {
			again := b.claim(t, claimAsW2)
			require.Equal(t, j.ID, again.ID)
		}, jobs.StateRunning},
		{"cancelled instead", func(b bundle, j *jobs.Job) {
			_, err := b.q.Cancel(b.ctx, j.ID)
			require.NoError(t, err)
		}, nil, jobs.StateCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			res, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
			require.NoError(t, err)
			j := b.claim(t, claimAll)
			if tc.before != nil {
				tc.before(b, j)
			}
			lost := store.WithLostFinishReply(store.Of(b.q), "release", 1, errReset)

			err = store.Of(lost).Release(b.ctx, store.LeaseOf(j))
			require.ErrorIs(t, err, errReset)
			require.NotErrorIs(t, err, jobs.ErrLeaseLost)
			require.NotErrorIs(t, err, queue.ErrOutcomeUnknown, "the write's own failure says nothing of the job")
			if tc.after != nil {
				tc.after(b, j)
			}

			require.NoError(t, store.Of(lost).Release(b.ctx, store.LeaseOf(j)),
				"the retry finds the job released by this lease")
			got := b.get(t, res.ID)
			require.Equal(t, tc.want, got.State)
			if tc.want == jobs.StateAvailable {
				require.Zero(t, got.Attempt, "released once: the attempt is not counted")
			}
		})
	}
}
