package queue_test

import (
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// insertAvailable inserts an available job with each of ids, as another
// application would.
func insertAvailable(t *testing.T, b bundle, ids ...any) {
	t.Helper()
	for _, id := range ids {
		_, err := store.Of(b.q).Collection().InsertOne(b.ctx, bson.D{{Key: "_id", Value: id}, {Key: "kind", Value: "k"},
			{Key: "queue", Value: "default"}, {Key: "state", Value: "available"}, {Key: "runAt", Value: time.Now().Add(time.Hour)},
			{Key: "attempt", Value: 0}, {Key: "maxAttempts", Value: 3}, {Key: "args", Value: bson.D{}}})
		require.NoError(t, err)
	}
}

// typedID is the JobID of v, of v's BSON type.
func typedID(t *testing.T, v any) queue.JobID {
	t.Helper()
	doc, err := bson.Marshal(bson.D{{Key: "_id", Value: v}})
	require.NoError(t, err)
	return queue.JobIDOf(doc)
}

// A job read by an id of another numeric type is labelled with its stored
// id, and carries it: acting on the job's own JobID reaches it, never the
// job whose string id is its display form.
func TestGetJobIDCarriesTheStoredID(t *testing.T) {
	b := setup(t)
	display := `{"$numberInt":"7"}`
	insertAvailable(t, b, int32(7), display)

	job, err := b.q.GetJobID(b.ctx, typedID(t, int64(7)))
	require.NoError(t, err)
	require.Equal(t, display, job.ID, "the stored int32, not the int64 asked for")
	id := queue.JobIDOfJob(job)
	require.True(t, id.Equal(typedID(t, int32(7))), id.String())

	out, err := b.q.CancelJobID(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, queue.Cancelled, out)
	require.Equal(t, jobs.StateAvailable, b.get(t, display).State, "the string-id job is left alone")
	job, err = b.q.GetJobID(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, jobs.StateCancelled, job.State)

	str := b.get(t, display)
	require.True(t, queue.JobIDOfJob(str).Equal(queue.StringJobID(display)), "a string id is its own JobID")
}

// The zero JobID names no job: reading or cancelling it is not found, and
// a zero entry among a filter's JobIDs neither fails the action nor
// widens it.
func TestZeroJobIDNamesNoJob(t *testing.T) {
	b := setup(t)
	insertAvailable(t, b, "a", "b")

	_, err := b.q.GetJobID(b.ctx, queue.JobID{})
	require.ErrorIs(t, err, queue.ErrNotFound)
	_, err = b.q.CancelJobID(b.ctx, queue.JobID{})
	require.ErrorIs(t, err, queue.ErrNotFound)

	res, err := b.q.Retry(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{{}, queue.StringJobID("a")}})
	require.NoError(t, err)
	require.Len(t, res, 2)
	for _, r := range res {
		if r.JobID.IsZero() {
			require.ErrorIs(t, r.Err, queue.ErrNotFound)
		} else {
			require.NoError(t, r.Err)
		}
	}

	res, err = b.q.Delete(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{{}}}, true)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.ErrorIs(t, res[0].Err, queue.ErrNotFound)
	all, _, err := b.q.List(b.ctx, queue.JobFilter{}, "", 10)
	require.NoError(t, err)
	require.Len(t, all, 2, "a filter of zero ids deletes nothing")
}
