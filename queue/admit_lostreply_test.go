package queue_test

import (
	"context"
	"testing"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestAdmitLostReplySettlesByLookup: an admitted insert to a bounded queue
// whose reply is lost is looked up by id: found, it is inserted by this
// call (or Existed when an earlier enqueue of its id made it); not found, it
// is not inserted, with an error that says so.
func TestAdmitLostReplySettlesByLookup(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 5, ""))
	opts := queue.InsertOpts{Queue: "q", ID: "a"}

	res, err := b.q.Enqueue(loseReplies(b.ctx, nil, 1), "k", nil, opts)
	require.NoError(t, err, "the job is in the collection: the enqueue succeeded")
	require.NoError(t, res.Err)
	require.False(t, res.Existed, "inserted by this call")
	require.Equal(t, []string{"a"}, idsInDB(t, b))

	// The job is deleted before the lost reply: the lookup does not find it.
	opts.ID = "b"
	gone := func(int) {
		_, err := store.Of(b.q).Collection().DeleteOne(context.Background(), bson.D{{Key: "_id", Value: "b"}})
		require.NoError(t, err)
	}
	res, err = b.q.Enqueue(loseReplies(b.ctx, gone, 1), "k", nil, opts)
	require.Error(t, err)
	require.ErrorIs(t, res.Err, queue.ErrNotInserted)
	require.Equal(t, "b", res.ID)
	require.Equal(t, []string{"a"}, idsInDB(t, b))
}
