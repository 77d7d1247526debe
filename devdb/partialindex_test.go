package devdb

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TestIndexesHoldOnlyWhatIsRead checks that the SQLite indexes behind a
// collection's indexes hold no entry SQLite never reads: a unique one only
// the documents that have its keys (it still refuses a second document with
// the same value, null included), a non-unique one none (FerretDB's queries
// name other expressions), devdb's own lookup index of a field only the
// documents that have it, which SQLite still takes for an equality. A
// unique index on one field, on the lookup expression, serves the lookups
// itself: devdb adds none beside it. Indexes still drop.
func TestIndexesHoldOnlyWhatIsRead(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	s := startServer(t)
	coll := connect(t, s.URI()).Database("partial").Collection("jobs")
	_, err := coll.Indexes().CreateMany(ctx, []mongo.IndexModel{
		{Keys: bson.D{{Key: "u", Value: 1}}, Options: options.Index().SetUnique(true).SetName("u")},
		{Keys: bson.D{{Key: "a", Value: 1}, {Key: "b", Value: -1}}, Options: options.Index().SetUnique(true).SetName("ab")},
		{Keys: bson.D{{Key: "state", Value: 1}, {Key: "n", Value: -1}}, Options: options.Index().SetName("claim")},
	})
	require.NoError(t, err)
	docs := []any{bson.D{{Key: "_id", Value: 0}, {Key: "u", Value: "x"}, {Key: "a", Value: 1}, {Key: "b", Value: 1}}}
	for i := 1; i < 50; i++ {
		docs = append(docs, bson.D{{Key: "_id", Value: i}, {Key: "state", Value: "available"}, {Key: "n", Value: i}})
	}
	_, err = coll.InsertMany(ctx, docs)
	require.NoError(t, err)

	for _, dup := range []bson.D{
		{{Key: "_id", Value: 100}, {Key: "u", Value: "x"}},
		{{Key: "_id", Value: 101}, {Key: "a", Value: 1}, {Key: "b", Value: 1}},
	} {
		_, err := coll.InsertOne(ctx, dup)
		require.True(t, mongo.IsDuplicateKeyError(err), "%v: %v", dup, err)
	}
	_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 102}, {Key: "u", Value: nil}})
	require.NoError(t, err)
	_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 103}, {Key: "u", Value: nil}})
	require.True(t, mongo.IsDuplicateKeyError(err), "a second null: %v", err)

	file := filepath.Join(s.Dir(), "partial.sqlite")
	plan := waitForPlan(t, file, "_u (", `SELECT * FROM %s WHERE _ferretdb_sjson->'$.u' = '"x"'`)
	require.Regexp(t, `USING INDEX \S+_u \(`, plan)
	want := map[string]string{
		"_u":              ` WHERE _ferretdb_sjson->'$.u' IS NOT NULL`,
		"_ab":             ` WHERE _ferretdb_sjson->'$.a' IS NOT NULL AND _ferretdb_sjson->'$.b' IS NOT NULL`,
		"_claim":          ` WHERE 0`,
		"__devdb_f_a":     ` WHERE _ferretdb_sjson->'$.a' IS NOT NULL`,
		"__devdb_f_state": ` WHERE _ferretdb_sjson->'$.state' IS NOT NULL`,
	}
	defs := indexDefinitions(t, file)
	for deadline := time.Now().Add(10 * time.Second); len(defs) < len(want)+2 && time.Now().Before(deadline); { // and _id's, the covering one
		time.Sleep(100 * time.Millisecond)
		defs = indexDefinitions(t, file)
	}
	for suffix, where := range want {
		require.True(t, strings.HasSuffix(defs[suffix], where), "index *%s: %s", suffix, defs[suffix])
	}
	require.NotContains(t, defs, "__devdb_f_u")

	n, err := coll.CountDocuments(ctx, bson.D{{Key: "u", Value: "x"}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	for _, name := range []string{"u", "claim"} {
		require.NoError(t, coll.Indexes().DropOne(ctx, name))
	}
	_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 104}, {Key: "u", Value: "x"}})
	require.NoError(t, err, "the unique index was dropped")
}

// indexDefinitions maps the name of each index of the one collection table
// in file, less the table's name, to its CREATE INDEX statement.
func indexDefinitions(t *testing.T, file string) map[string]string {
	t.Helper()
	db := openReadOnly(t, file)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, `SELECT name, tbl_name, coalesce(sql, '') FROM sqlite_master WHERE type = 'index' AND tbl_name != '_ferretdb_collections'`)
	require.NoError(t, err)
	defer rows.Close()
	defs := map[string]string{}
	for rows.Next() {
		var name, table, def string
		require.NoError(t, rows.Scan(&name, &table, &def))
		defs[strings.TrimPrefix(name, table)] = def
	}
	require.NoError(t, rows.Err())
	return defs
}
