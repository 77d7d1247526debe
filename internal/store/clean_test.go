package queue_test

import (
	"testing"
	"time"

	"github.com/docketq/docket/internal/jobstore"
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
		require.NoError(t, jobstore.Of(b.q).Complete(b.ctx, queue.LeaseOf(j)))
	}
}

// finishedLongAgo dates the finish of the jobs ids 48 h back, past a
// retention of 24 h.
func (b bundle) finishedLongAgo(t *testing.T, ids ...string) {
	t.Helper()
	r, err := jobstore.Of(b.q).Collection().UpdateMany(b.ctx,
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
	cq := queue.WithCleanHook(b.q, func() {
		calls++
		out, err := b.q.Retry(b.ctx, queue.JobFilter{IDs: ids[:1]})
		require.NoError(t, err)
		require.Len(t, out, 1)
		require.NoError(t, out[0].Err)
		j := b.claim(t, claimAll)
		require.Equal(t, ids[0], j.ID)
		require.NoError(t, jobstore.Of(b.q).Complete(b.ctx, queue.LeaseOf(j)))
	})
	n, err := jobstore.Of(cq).Clean(b.ctx, jobs.StateSucceeded, 24*time.Hour, 100)
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

	cq := queue.WithCleanHook(b.q, func() {
		out, err := b.q.Retry(b.ctx, queue.JobFilter{IDs: ids})
		require.NoError(t, err)
		require.NoError(t, out[0].Err)
	})
	n, err := jobstore.Of(cq).Clean(b.ctx, jobs.StateSucceeded, 24*time.Hour, 100)
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
	_, err := jobstore.Of(b.q).Collection().InsertOne(b.ctx, bson.D{
		{Key: "_id", Value: 42}, {Key: "state", Value: "succeeded"}, {Key: "finishedAt", Value: time.Now().Add(-48 * time.Hour)},
	})
	require.NoError(t, err)

	calls := 0
	cq := queue.WithCleanHook(b.q, func() { calls++ })
	total := 0
	for {
		n, err := jobstore.Of(cq).Clean(b.ctx, jobs.StateSucceeded, 24*time.Hour, 2)
		require.NoError(t, err)
		total += n
		if n < 2 {
			break
		}
	}
	require.Equal(t, 5, total)
	require.Equal(t, 3, calls) // batches of 2, 2 and 1
	left, err := jobstore.Of(b.q).Collection().CountDocuments(b.ctx, bson.M{})
	require.NoError(t, err)
	require.EqualValues(t, 1, left)
	require.Equal(t, jobs.StateSucceeded, b.get(t, ids[4]).State)
}
