package devdb

import (
	"context"
	"runtime/pprof"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestResourceTrackerKeepsNoProfile checks that devdb's FerretDB tracks its
// iterators and transactions without a pprof profile (which took a stack
// trace for each, a tenth of the server's time: _overlay/resource.go):
// after inserts, finds and a multi-document update, no "FerretDB/…"
// profile exists.
func TestResourceTrackerKeepsNoProfile(t *testing.T) {
	ctx := context.Background()
	s := startServer(t)
	coll := connect(t, s.URI()).Database("rt").Collection("docs")
	docs := make([]any, 50)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: i}, {Key: "state", Value: "available"}}
	}
	_, err := coll.InsertMany(ctx, docs)
	require.NoError(t, err)
	res, err := coll.UpdateMany(ctx, bson.D{{Key: "state", Value: "available"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "running"}}}})
	require.NoError(t, err)
	require.EqualValues(t, 50, res.ModifiedCount)
	n, err := coll.CountDocuments(ctx, bson.D{{Key: "state", Value: "running"}})
	require.NoError(t, err)
	require.EqualValues(t, 50, n)

	for _, p := range pprof.Profiles() {
		require.False(t, strings.HasPrefix(p.Name(), "FerretDB/"), "profile %s (%d objects): FerretDB's resource tracker takes a stack trace per object", p.Name(), p.Count())
	}
}
