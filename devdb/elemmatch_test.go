package devdb

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// An $elemMatch of operators only tests each element of the array on its
// own, as MongoDB's does: FerretDB v1 applied the operators to the array
// as a whole, so that {$elemMatch: {$nin: [a, b]}} matched only arrays
// holding neither (MongoDB: those holding anything else), and it refused
// $not and $ne inside ($ne still is). docket's settle asks for the dependents that wait
// for no job but the ones it settles: {$not: {$elemMatch: {$not: {$in:
// parents}}}}. An $elemMatch on the fields of documents is FerretDB's as
// before.
func TestElemMatchTestsEachElement(t *testing.T) {
	s := startServer(t)
	mc := connect(t, s.URI())
	ctx := context.Background()
	coll := mc.Database("em").Collection("t")
	_, err := coll.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "ab"}, {Key: "w", Value: bson.A{"a", "b"}}},
		bson.D{{Key: "_id", Value: "ac"}, {Key: "w", Value: bson.A{"a", "c"}}},
		bson.D{{Key: "_id", Value: "b"}, {Key: "w", Value: bson.A{"b"}}},
		bson.D{{Key: "_id", Value: "empty"}, {Key: "w", Value: bson.A{}}},
		bson.D{{Key: "_id", Value: "missing"}},
		bson.D{{Key: "_id", Value: "scalar"}, {Key: "w", Value: "a"}},
		bson.D{{Key: "_id", Value: "nums"}, {Key: "w", Value: bson.A{1, 9}}},
		bson.D{{Key: "_id", Value: "docs"}, {Key: "w", Value: bson.A{bson.D{{Key: "x", Value: 1}}, bson.D{{Key: "x", Value: 5}}}}},
	})
	require.NoError(t, err)
	ab := bson.A{"a", "b"}
	for _, c := range []struct {
		filter bson.D
		want   []string
	}{
		{bson.D{{Key: "w", Value: bson.D{{Key: "$elemMatch", Value: bson.D{{Key: "$nin", Value: ab}}}}}}, []string{"ac", "docs", "nums"}},
		{bson.D{{Key: "w", Value: bson.D{{Key: "$elemMatch", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$in", Value: ab}}}}}}}}, []string{"ac", "docs", "nums"}},
		// Every element among a and b: the settle's release.
		{bson.D{{Key: "w", Value: bson.D{{Key: "$type", Value: "array"}, {Key: "$not", Value: bson.D{{Key: "$elemMatch", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$in", Value: ab}}}}}}}}}}, []string{"ab", "b", "empty"}},
		// One element satisfies both, not the array as a whole.
		{bson.D{{Key: "w", Value: bson.D{{Key: "$elemMatch", Value: bson.D{{Key: "$gt", Value: 2}, {Key: "$lt", Value: 8}}}}}}, nil},
		{bson.D{{Key: "w", Value: bson.D{{Key: "$elemMatch", Value: bson.D{{Key: "$gt", Value: 2}, {Key: "$lt", Value: 10}}}}}}, []string{"nums"}},
	} {
		cur, err := coll.Find(ctx, c.filter)
		require.NoError(t, err, "%v", c.filter)
		var got []string
		for cur.Next(ctx) {
			got = append(got, fmt.Sprint(cur.Current.Lookup("_id").StringValue()))
		}
		require.NoError(t, cur.Err())
		slices.Sort(got)
		require.Equal(t, c.want, got, "%v", c.filter)
	}
	err = coll.FindOne(ctx, bson.D{{Key: "w", Value: bson.D{{Key: "$elemMatch", Value: bson.D{{Key: "$ne", Value: "a"}}}}}}).Err()
	var ce mongo.CommandError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, int32(238), ce.Code, "$ne inside $elemMatch is refused as FerretDB refuses it")
}
