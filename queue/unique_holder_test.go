package queue_test

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

// A unique key held by a job another application wrote, with an _id that
// is not a string: the Duplicate's JobID is that id, of its type, and
// cancelling by it reaches the holder, never the string-id job "abc" or
// no job at all. Its args, of another type, are not this insert's.
func TestDuplicateOfAForeignHolderCarriesItsID(t *testing.T) {
	b := setup(t)
	insertAvailable(t, b, "abc", "")
	for i, id := range []any{nil, bson.Binary{Data: []byte("abc")}, int32(7)} {
		key := fmt.Sprintf("key%d", i)
		_, err := store.Of(b.q).Collection().InsertOne(b.ctx, bson.D{{Key: "_id", Value: id}, {Key: "kind", Value: "k"},
			{Key: "queue", Value: "default"}, {Key: "state", Value: "available"}, {Key: "runAt", Value: time.Now().Add(time.Hour)},
			{Key: "uniqueKey", Value: key}, {Key: "args", Value: "not a document"}})
		require.NoError(t, err)

		res, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{UniqueKey: key})
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		require.True(t, res.ArgsDropped, "the holder's args are not this insert's")
		want := typedID(t, id)
		require.True(t, res.JobID().Equal(want), "%s: got %s", want, res.JobID())
		require.Equal(t, want.String(), res.ID)

		out, err := b.q.CancelJobID(b.ctx, res.JobID())
		require.NoError(t, err, want.String())
		require.Equal(t, queue.Cancelled, out)
		list, _, err := b.q.List(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{want}}, "", 1)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, jobs.StateCancelled, list[0].State)
	}
	for _, id := range []string{"abc", ""} {
		require.Equal(t, jobs.StateAvailable, b.get(t, id).State, "the string-id job %q is left alone", id)
	}
}
