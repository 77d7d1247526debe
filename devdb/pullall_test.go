package devdb

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// $pullAll removes every instance of each value, keeps the others in their
// order, whatever their types, and reports a document it left unchanged as
// not modified: devdb's one-pass pull of strings (a settle's pull of its
// parents from a dependent's list) and FerretDB's own for other values.
func TestPullAllAsMongoDB(t *testing.T) {
	s := startServer(t)
	mc := connect(t, s.URI())
	ctx := context.Background()
	coll := mc.Database("pa").Collection("t")
	list := bson.A{"a", "b", 1, "a", bson.D{{Key: "x", Value: "a"}}, "1", "c", 2.0, "b"}
	for _, c := range []struct {
		pull     bson.A
		want     bson.A
		modified int64
	}{
		{bson.A{"a", "b"}, bson.A{1, bson.D{{Key: "x", Value: "a"}}, "1", "c", 2.0}, 1},
		{bson.A{"z"}, list, 0},
		{bson.A{}, list, 0},
		{bson.A{1, "c"}, bson.A{"a", "b", "a", bson.D{{Key: "x", Value: "a"}}, "1", 2.0, "b"}, 1},
		{bson.A{2}, bson.A{"a", "b", 1, "a", bson.D{{Key: "x", Value: "a"}}, "1", "c", "b"}, 1},
	} {
		_, err := coll.DeleteMany(ctx, bson.D{})
		require.NoError(t, err)
		_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "w", Value: list}})
		require.NoError(t, err)
		res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$pullAll", Value: bson.D{{Key: "w", Value: c.pull}}}})
		require.NoError(t, err)
		require.Equal(t, c.modified, res.ModifiedCount, "pull %v", c.pull)
		var got struct{ W bson.A }
		require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: 1}}).Decode(&got))
		want, err := bson.Marshal(bson.D{{Key: "w", Value: c.want}})
		require.NoError(t, err)
		have, err := bson.Marshal(bson.D{{Key: "w", Value: got.W}})
		require.NoError(t, err)
		require.Equal(t, bson.Raw(want).String(), bson.Raw(have).String(), "pull %v", c.pull)
	}
}
