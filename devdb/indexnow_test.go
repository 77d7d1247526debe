package devdb

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestIndexesFollowCreateIndexesAtOnce checks that devdb's own indexes of
// a collection (its lookup by a field, the covering index of a compound
// index; its _id's is FerretDB's) exist when the client gets
// createIndexes' reply: built
// on the empty table, not a second later on what the client wrote
// meanwhile.
func TestIndexesFollowCreateIndexesAtOnce(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	s := startServer(t)
	coll := connect(t, s.URI()).Database("atonce").Collection("jobs")
	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "state", Value: 1}, {Key: "runAt", Value: 1}}})
	require.NoError(t, err)

	defs := indexDefinitions(t, filepath.Join(s.Dir(), "atonce.sqlite"))
	for _, suffix := range []string{fieldLookupInfix + "state", coveringInfix + "state,runAt"} {
		require.Contains(t, defs, suffix, "devdb's index %s, right after createIndexes", suffix)
	}
}
