package devdb

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TestStoredValuesReadBackAsWritten writes documents holding every BSON
// type devdb stores, nested in documents and arrays, with strings that need
// escapes or are not ASCII, and numbers at their types' edges, then reads
// them back by find, by a sorted find and by findAndModify: each must come
// back as written. devdb's FerretDB decodes what it reads with a decoder of
// its own (_overlay/sjson_fast.go), which this guards end to end.
func TestStoredValuesReadBackAsWritten(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	coll := connect(t, startServer(t).URI()).Database("readback").Collection("docs")
	strs := []string{"", "available", `quote"d`, `back\slash`, "tab\tnew\nline", "é日本", "\x01", "\u2028", "$s", "{\"a\":1}"}
	var docs []any
	for i, s := range strs {
		inner := bson.D{{Key: "s", Value: s}, {Key: "n", Value: int32(-i)}, {Key: "e", Value: bson.D{}}, {Key: "a", Value: bson.A{}}}
		d := bson.D{
			{Key: "_id", Value: i}, {Key: "state", Value: "available"}, {Key: "s", Value: s},
			{Key: "i32", Value: []int32{0, math.MaxInt32, math.MinInt32, -1}[i%4]},
			{Key: "i64", Value: []int64{0, math.MaxInt64, math.MinInt64, 1 << 53}[i%4]},
			{Key: "f", Value: []float64{0, 5e-324, math.MaxFloat64, -1.5e-300, 1e21}[i%5]}, // -0.0 reads back 0.0, FerretDB's own
			{Key: "t", Value: bson.NewDateTimeFromTime(time.UnixMilli(int64(i) * -86_400_000_123).UTC())},
			{Key: "ts", Value: bson.Timestamp{T: math.MaxUint32, I: uint32(i)}},
			{Key: "oid", Value: bson.ObjectID{byte(i), 0xff, 0x7f}}, {Key: "b", Value: i%2 == 0}, {Key: "null", Value: nil},
			{Key: "bin", Value: bson.Binary{Subtype: byte(i % 5), Data: []byte(s)}},
			{Key: "re", Value: bson.Regex{Pattern: s, Options: "i"}},
			{Key: "doc", Value: inner}, {Key: "arr", Value: bson.A{inner, s, int64(i), nil}},
		}
		if i%2 == 0 { // a key that is not ASCII: the whole document takes FerretDB's own decoder
			d = append(d, bson.E{Key: "é k", Value: s})
		}
		docs = append(docs, d)
	}
	_, err := coll.InsertMany(ctx, docs)
	require.NoError(t, err)

	cur, err := coll.Find(ctx, bson.D{{Key: "state", Value: "available"}})
	require.NoError(t, err)
	var got []bson.D
	require.NoError(t, cur.All(ctx, &got))
	requireSameDocs(t, docs, got)

	cur, err = coll.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "s", Value: 1}, {Key: "_id", Value: 1}}).SetLimit(100))
	require.NoError(t, err)
	got = nil
	require.NoError(t, cur.All(ctx, &got))
	require.Len(t, got, len(docs))
	requireSameDocs(t, docs, got)

	for i, d := range docs {
		var one bson.D
		err := coll.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: i}}, bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "running"}}}}).Decode(&one)
		require.NoError(t, err)
		requireSameDocs(t, []any{d}, []bson.D{one})
	}
}

// requireSameDocs checks that got holds the documents of want, by _id,
// byte for byte as BSON.
func requireSameDocs(t *testing.T, want []any, got []bson.D) {
	t.Helper()
	require.Len(t, got, len(want))
	byID := map[int32][]byte{}
	for _, d := range got {
		raw, err := bson.Marshal(d)
		require.NoError(t, err)
		byID[bson.Raw(raw).Lookup("_id").Int32()] = raw
	}
	for _, d := range want {
		raw, err := bson.Marshal(d)
		require.NoError(t, err)
		id := bson.Raw(raw).Lookup("_id").Int32()
		require.Equal(t, bson.Raw(raw).String(), bson.Raw(byID[id]).String(), "document %d", id)
	}
}
