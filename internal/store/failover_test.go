package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestLostBatchStampReplyIsReapedThenRun: updateMany is not a retryable
// write. A batch claim whose stamp the server applied but whose reply was
// lost (a failover mid-write) leaves jobs running under a token no worker
// knows; nothing renews them, so the reaper re-queues them after lease and
// grace, and they run.
func TestLostBatchStampReplyIsReapedThenRun(t *testing.T) {
	b := setup(t)
	ids := enqueueN(t, b, 3)
	lost := store.WithLostStampReply(store.Of(b.q), errors.New("connection reset by peer"))
	got, err := store.Of(lost).ClaimBatch(b.ctx, claimAll, 3)
	require.Error(t, err)
	require.Empty(t, got)
	for _, id := range ids {
		j := b.get(t, id)
		require.Equal(t, jobs.StateRunning, j.State, "the stamp was applied")
		require.NotEmpty(t, j.LeaseToken)
	}
	r, err := store.Of(b.q).Reap(b.ctx, time.Second, 100)
	require.NoError(t, err)
	require.Zero(t, r.Requeued, "not before the lease and the grace have passed")

	_, err = store.Of(b.q).Collection().UpdateMany(b.ctx, bson.M{}, bson.M{"$set": bson.M{"leaseExpiresAt": time.Now().Add(-time.Minute)}})
	require.NoError(t, err)
	r, err = store.Of(b.q).Reap(b.ctx, time.Second, 100)
	require.NoError(t, err)
	require.Equal(t, store.ReapResult{Requeued: 3}, r)

	claimed, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 3)
	require.NoError(t, err)
	require.ElementsMatch(t, ids, func() []string {
		var out []string
		for _, j := range claimed {
			require.Equal(t, 2, j.Attempt)
			out = append(out, j.ID)
		}
		return out
	}())
	ls := make([]store.Lease, len(claimed))
	for i, j := range claimed {
		ls[i] = store.LeaseOf(j)
	}
	lostLeases, err := store.Of(b.q).CompleteMany(b.ctx, ls)
	require.NoError(t, err)
	require.Empty(t, lostLeases)
	for _, id := range ids {
		require.Equal(t, jobs.StateSucceeded, b.get(t, id).State)
	}
}

// TestCompleteManyTwiceHasOneOutcome: CompleteMany retried after an error
// (its updateMany may have been applied, in part or in full, before the
// reply was lost) reports what one call would have: each fence matches at
// most once, and a job already completed with its lease is not lost.
func TestCompleteManyTwiceHasOneOutcome(t *testing.T) {
	b := setup(t)
	enqueueN(t, b, 3)
	claimed, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 3)
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	// The third job's lease was lost: the reaper took it and another
	// worker holds it now.
	stolen := b.takeOver(t, claimed[2])
	ls := []store.Lease{store.LeaseOf(claimed[0]), store.LeaseOf(claimed[1]), store.LeaseOf(claimed[2])}

	// A partly applied first try: only the first job was written.
	first, err := store.Of(b.q).CompleteMany(b.ctx, ls[:1])
	require.NoError(t, err)
	require.Empty(t, first)
	for range 2 {
		lost, err := store.Of(b.q).CompleteMany(b.ctx, ls)
		require.NoError(t, err)
		require.Equal(t, []store.Lease{ls[2]}, lost)
	}
	require.Equal(t, jobs.StateSucceeded, b.get(t, claimed[0].ID).State)
	require.Equal(t, jobs.StateSucceeded, b.get(t, claimed[1].ID).State)
	j := b.get(t, stolen.ID)
	require.Equal(t, jobs.StateRunning, j.State)
	require.Equal(t, stolen.LeaseToken, j.LeaseToken)
}
