package devdb

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TestFindReachingItsLimitClosesItsCursor: a find whose first batch holds
// its limit's documents is answered with no cursor left open, as MongoDB
// answers it, so the client sends no getMore (or killCursors) after it
// (docket's claims read candidates with a limit: one more command each, a
// third of a burn-down's commands). A first batch short of the
// limit still leaves the cursor open, and its getMore stops at the limit.
func TestFindReachingItsLimitClosesItsCursor(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	coll := connect(t, startServer(t).URI()).Database("findlimit").Collection("docs")
	var docs []any
	for i := range 10 {
		docs = append(docs, bson.D{{Key: "_id", Value: i}, {Key: "state", Value: "available"}})
	}
	_, err := coll.InsertMany(ctx, docs)
	require.NoError(t, err)

	read := func(opts *options.FindOptionsBuilder) (firstCursor int64, ids []int32) {
		cur, err := coll.Find(ctx, bson.D{{Key: "state", Value: "available"}}, opts.SetSort(bson.D{{Key: "_id", Value: 1}}))
		require.NoError(t, err)
		defer cur.Close(ctx)
		firstCursor = cur.ID()
		for cur.Next(ctx) {
			ids = append(ids, cur.Current.Lookup("_id").Int32())
		}
		require.NoError(t, cur.Err())
		return firstCursor, ids
	}

	id, got := read(options.Find().SetLimit(4))
	require.Zero(t, id, "the first batch held the limit's 4 documents: no cursor is left open")
	require.Equal(t, []int32{0, 1, 2, 3}, got)

	id, got = read(options.Find().SetLimit(4).SetBatchSize(4))
	require.Zero(t, id)
	require.Equal(t, []int32{0, 1, 2, 3}, got)

	id, got = read(options.Find().SetLimit(4).SetBatchSize(3))
	require.NotZero(t, id, "a first batch short of the limit leaves the cursor open")
	require.Equal(t, []int32{0, 1, 2, 3}, got)

	id, got = read(options.Find().SetLimit(20))
	require.Zero(t, id, "fewer documents than the limit: the first batch is the last")
	require.Len(t, got, 10)
}
