package devdb

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TestSortedFindsMatchFerretDBsOwnSort: devdb's FerretDB applies a find's
// sort on top-level fields in its SQLite backend when the find has a limit
// (querySorted in _overlay/sqlite_collection.go): it sorts the sort fields
// alone, then reads whole documents in that order until the limit. The
// documents it returns must be exactly the first ones of FerretDB's own
// sort of every match (a find without a limit, sorted in the handler), for
// sort fields of every type (numbers of three kinds, strings with escapes,
// null, missing, arrays, objects, ObjectIDs, booleans, dates), ascending
// and descending, with filters SQLite narrows and filters it cannot.
func TestSortedFindsMatchFerretDBsOwnSort(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	coll := connect(t, s.URI()).Database("sorted").Collection("jobs")

	rng := rand.New(rand.NewPCG(1, 2))
	day := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	values := []any{
		int32(0), int32(3), int32(-7), int64(3), int64(1) << 40, 2.5, -0.5, 3.0, math.MaxFloat64, -1e300,
		"", "a", "b", "B", "ä", `quo"te`, "back\\slash", "tab\there", "<&>", "日本",
		nil, bson.A{}, bson.A{int32(5), "x"}, bson.A{int32(1), int32(9)}, bson.A{bson.D{{Key: "y", Value: int32(2)}}},
		bson.D{{Key: "x", Value: int32(1)}}, bson.D{}, bson.D{{Key: "a", Value: "b"}, {Key: "c", Value: int32(2)}},
		bson.NewObjectIDFromTimestamp(day), bson.NewObjectIDFromTimestamp(day.Add(time.Hour)),
		true, false, bson.NewDateTimeFromTime(day), bson.NewDateTimeFromTime(day.Add(-time.Minute)),
	}
	const missing = "missing"
	pick := func() any {
		if rng.IntN(8) == 0 {
			return missing
		}
		return values[rng.IntN(len(values))]
	}
	states := []any{"available", "running", bson.A{"x", "available"}, int32(1), nil}
	var docs []any
	for i := range 400 {
		d := bson.D{}
		switch i % 3 {
		case 0:
			d = append(d, bson.E{Key: "_id", Value: fmt.Sprintf("id-%03d", i)})
		case 1:
			d = append(d, bson.E{Key: "_id", Value: int32(i)})
		default:
			d = append(d, bson.E{Key: "_id", Value: bson.NewObjectID()})
		}
		d = append(d, bson.E{Key: "state", Value: states[rng.IntN(len(states))]}, bson.E{Key: "n", Value: int32(rng.IntN(10))})
		for _, f := range []string{"p", "r"} {
			if v := pick(); v != missing {
				d = append(d, bson.E{Key: f, Value: v})
			}
		}
		d = append(d, bson.E{Key: "pad", Value: fmt.Sprintf("%0100d", i)})
		docs = append(docs, d)
	}
	_, err := coll.InsertMany(ctx, docs)
	require.NoError(t, err)

	ids := func(filter, sort bson.D, limit int64) []string {
		t.Helper()
		o := options.Find().SetSort(sort).SetProjection(bson.D{{Key: "_id", Value: 1}})
		if limit > 0 {
			o.SetLimit(limit)
		}
		cur, err := coll.Find(ctx, filter, o)
		require.NoError(t, err)
		var got []bson.Raw
		require.NoError(t, cur.All(ctx, &got))
		out := make([]string, len(got))
		for i, d := range got {
			out[i] = d.Lookup("_id").String()
		}
		return out
	}

	filters := []bson.D{
		{},
		{{Key: "state", Value: "available"}},
		{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"available", "running"}}}}},
		{{Key: "state", Value: "available"}, {Key: "n", Value: bson.D{{Key: "$gte", Value: 4}}}},
		{{Key: "n", Value: bson.D{{Key: "$lt", Value: 3}}}},
	}
	sorts := []bson.D{
		{{Key: "p", Value: 1}, {Key: "_id", Value: 1}},
		{{Key: "p", Value: -1}, {Key: "_id", Value: 1}},
		{{Key: "p", Value: -1}, {Key: "r", Value: 1}, {Key: "_id", Value: 1}},
		{{Key: "r", Value: 1}, {Key: "p", Value: -1}, {Key: "_id", Value: -1}},
		{{Key: "_id", Value: 1}},
		{{Key: "nope", Value: 1}, {Key: "_id", Value: -1}},
	}
	// A sort value other than 1 or -1 is refused alike, limit or not.
	code := func(limit int64) int32 {
		t.Helper()
		o := options.Find().SetSort(bson.D{{Key: "p", Value: 2}})
		if limit > 0 {
			o.SetLimit(limit)
		}
		cur, err := coll.Find(ctx, bson.D{}, o)
		if err == nil {
			err = cur.All(ctx, &[]bson.Raw{})
		}
		var se mongo.ServerError
		require.ErrorAs(t, err, &se, "limit %d", limit)
		var ce mongo.CommandError
		require.ErrorAs(t, err, &ce)
		return ce.Code
	}
	require.Equal(t, code(0), code(5), "the same error with a limit")

	for _, f := range filters {
		for _, so := range sorts {
			all := ids(f, so, 0)
			for _, limit := range []int64{1, 7, 64, 1000} {
				want := all[:min(int(limit), len(all))]
				require.Equal(t, want, ids(f, so, limit), "filter %v sort %v limit %d", f, so, limit)
			}
		}
	}
}
