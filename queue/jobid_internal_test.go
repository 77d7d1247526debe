package queue

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestAfterIDFilters: the page after an id asks for greater values of its
// bracket of types and every later bracket (MongoDB's $gt compares within
// a bracket only); NaN, below every number, is followed by every number.
func TestAfterIDFilters(t *testing.T) {
	id := func(v any) JobID {
		typ, b, err := bson.MarshalValue(v)
		require.NoError(t, err)
		return JobID{bson.RawValue{Type: typ, Value: b}}
	}
	f := afterID(id(int32(7)), false)
	or := f[0].Value.(bson.A)
	require.Equal(t, "$gt", or[0].(bson.D)[0].Value.(bson.D)[0].Key)
	later := or[1].(bson.D)[0].Value.(bson.D)[0].Value.(bson.A)
	require.Equal(t, bson.A{"string", "symbol", "object", "array", "binData", "objectId", "bool", "date", "timestamp", "regex",
		"dbPointer", "javascript", "javascriptWithScope", "maxKey"}, later)
	later = afterID(id(int32(7)), true)[0].Value.(bson.A)[1].(bson.D)[0].Value.(bson.D)[0].Value.(bson.A)
	require.Equal(t, bson.A{"string", "object", "array", "binData", "objectId", "bool", "date", "timestamp", "regex"}, later)

	nan := afterID(id(math.NaN()), false)[0].Value.(bson.A)[0].(bson.D)[0].Value.(bson.D)[0]
	require.Equal(t, bson.E{Key: "$gte", Value: math.Inf(-1)}, nan)

	require.Equal(t, bson.D{{Key: "$or", Value: bson.A{bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: bson.A{"dbPointer", "javascript", "javascriptWithScope", "maxKey"}}}}}}}},
		afterID(JobID{bson.RawValue{Type: bson.TypeRegex}}, false), "no $gt on a type that cannot compare; later types a server lacks are left out")
	require.Equal(t, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{}}}}}, afterID(JobID{bson.RawValue{Type: bson.TypeMaxKey}}, false))
}
