package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// succeed claims and completes n jobs.
func (b bundle) succeed(t *testing.T, n int) {
	t.Helper()
	for range n {
		j := b.claim(t, claimAll)
		require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(j)))
	}
}

// finishedLongAgo dates the finish of the jobs ids 48 h back, past a
// retention of 24 h.
func (b bundle) finishedLongAgo(t *testing.T, ids ...string) {
	t.Helper()
	r, err := store.Of(b.q).Collection().UpdateMany(b.ctx,
		bson.M{"_id": bson.M{"$in": ids}, "state": jobs.StateSucceeded},
		bson.M{"$set": bson.M{"finishedAt": time.Now().Add(-48 * time.Hour)}})
	require.NoError(t, err)
	require.EqualValues(t, len(ids), r.ModifiedCount)
}

// A job retried and run to success again between retention's read and its
// delete (an operator's retry while the leader stalled) is not deleted
// moments after it finished; the jobs still eligible are.
func TestCleanSparesAJobRetriedAndFinishedMeanwhile(t *testing.T) {
	b := setup(t)
	ids := enqueueN(t, b, 2)
	b.succeed(t, 2)
	b.finishedLongAgo(t, ids...)

	calls := 0
	cq := store.WithCleanHook(store.Of(b.q), func() {
		calls++
		out, err := b.q.Retry(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(ids[0])}})
		require.NoError(t, err)
		require.Len(t, out, 1)
		require.NoError(t, out[0].Err)
		j := b.claim(t, claimAll)
		require.Equal(t, ids[0], j.ID)
		require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(j)))
	})
	n, err := store.Of(cq).Clean(b.ctx, jobs.StateSucceeded, 24*time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, 1, calls)
	require.Equal(t, 1, n)

	again := b.get(t, ids[0])
	require.Equal(t, jobs.StateSucceeded, again.State)
	require.NotNil(t, again.FinishedAt)
	require.WithinDuration(t, time.Now(), *again.FinishedAt, time.Hour)
	_, err = b.q.Get(b.ctx, ids[1])
	require.ErrorIs(t, err, queue.ErrNotFound)
}

// A job retried between the read and the delete and not finished yet is
// left alone too (its state no longer matches), and a later pass deletes
// nothing that finished within the retention.
func TestCleanSparesAJobRetriedMeanwhile(t *testing.T) {
	b := setup(t)
	ids := enqueueN(t, b, 1)
	b.succeed(t, 1)
	b.finishedLongAgo(t, ids...)

	cq := store.WithCleanHook(store.Of(b.q), func() {
		out, err := b.q.Retry(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(ids[0])}})
		require.NoError(t, err)
		require.NoError(t, out[0].Err)
	})
	n, err := store.Of(cq).Clean(b.ctx, jobs.StateSucceeded, 24*time.Hour, 100)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, jobs.StateAvailable, b.get(t, ids[0]).State)
}

// Jobs still eligible when the delete runs are deleted as before, batch
// by batch, whatever the type of their ids; those finished within the
// retention are kept.
func TestCleanDeletesTheJobsStillEligible(t *testing.T) {
	b := setup(t)
	ids := enqueueN(t, b, 5)
	b.succeed(t, 5)
	b.finishedLongAgo(t, ids[:4]...)
	_, err := store.Of(b.q).Collection().InsertOne(b.ctx, bson.D{
		{Key: "_id", Value: 42}, {Key: "state", Value: "succeeded"}, {Key: "finishedAt", Value: time.Now().Add(-48 * time.Hour)},
	})
	require.NoError(t, err)

	calls := 0
	cq := store.WithCleanHook(store.Of(b.q), func() { calls++ })
	total := 0
	for {
		n, err := store.Of(cq).Clean(b.ctx, jobs.StateSucceeded, 24*time.Hour, 2)
		require.NoError(t, err)
		total += n
		if n < 2 {
			break
		}
	}
	require.Equal(t, 5, total)
	require.Equal(t, 3, calls) // batches of 2, 2 and 1
	left, err := store.Of(b.q).Collection().CountDocuments(b.ctx, bson.M{})
	require.NoError(t, err)
	require.EqualValues(t, 1, left)
	require.Equal(t, jobs.StateSucceeded, b.get(t, ids[4]).State)
}

// Retention keeps a finished job whose key holds for a period until the
// period ends: deleting it would let a second job with the key in.
func TestCleanKeepsAJobUntilItsPeriodEnds(t *testing.T) {
	b := setup(t)
	ids := make([]string, 2)
	for i, o := range []queue.InsertOpts{{UniqueKey: "p", UniqueFor: 7 * 24 * time.Hour}, {}} {
		r, err := b.q.Enqueue(b.ctx, "k", bson.M{"i": i}, o)
		require.NoError(t, err)
		ids[i] = r.ID
	}
	b.succeed(t, 2)
	b.finishedLongAgo(t, ids...)

	n, err := store.Of(b.q).Clean(b.ctx, jobs.StateSucceeded, 24*time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the job without a period")
	b.get(t, ids[0])
	dup, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{UniqueKey: "p", UniqueFor: 7 * 24 * time.Hour})
	require.NoError(t, err)
	require.Equal(t, ids[0], dup.ID, fmt.Sprintf("%+v", dup))

	// Once its period is over, it goes.
	_, err = b.db.Collection(b.q.CollectionName()).UpdateByID(b.ctx, ids[0], bson.M{"$set": bson.M{"uniqueUntil": time.Now().Add(-time.Minute)}})
	require.NoError(t, err)
	n, err = store.Of(b.q).Clean(b.ctx, jobs.StateSucceeded, 24*time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}
