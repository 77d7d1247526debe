package devdb

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap/zaptest"
)

// jobsLikeIndexes are indexes as docket makes them on its jobs
// collection: a claim index on several fields, a unique sparse key, a
// sparse single field.
func jobsLikeIndexes() []mongo.IndexModel {
	return []mongo.IndexModel{
		{Keys: bson.D{{Key: "state", Value: 1}, {Key: "queue", Value: 1}, {Key: "priority", Value: -1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName("claim")},
		{Keys: bson.D{{Key: "uniqueKey", Value: 1}}, Options: options.Index().SetName("uniqueKey").SetUnique(true).SetSparse(true)},
		{Keys: bson.D{{Key: "after", Value: 1}}, Options: options.Index().SetName("after").SetSparse(true)},
	}
}

// fillJobs creates jobsLikeIndexes on coll and inserts n jobs, every
// tenth with a unique key.
func fillJobs(t *testing.T, coll *mongo.Collection, n int) {
	t.Helper()
	ctx := context.Background()
	_, err := coll.Indexes().CreateMany(ctx, jobsLikeIndexes())
	require.NoError(t, err)
	docs := make([]any, n)
	for i := range docs {
		d := bson.D{{Key: "_id", Value: fmt.Sprintf("j%03d", i)}, {Key: "state", Value: "available"}, {Key: "queue", Value: "q"}, {Key: "priority", Value: i % 3}}
		if i%10 == 0 {
			d = append(d, bson.E{Key: "uniqueKey", Value: fmt.Sprintf("k%d", i)})
		}
		docs[i] = d
	}
	_, err = coll.InsertMany(ctx, docs)
	require.NoError(t, err)
}

// The lookups SQLite must serve from an index: FerretDB's by _id (an
// update's write, as updateDocs spells it) and devdb's pushed-down
// equality to a string (pushdownWhere).
const (
	idLookupQuery    = `UPDATE %s SET _ferretdb_sjson = '{}' WHERE _ferretdb_sjson->'$._id' IN ('"j001"', '"j001"')`
	fieldLookupQuery = `SELECT * FROM %[1]s WHERE (_ferretdb_sjson->'$.uniqueKey' = '"k10"' OR ` +
		`(_ferretdb_sjson->'$.uniqueKey' >= '[' AND _ferretdb_sjson->'$.uniqueKey' < '\'))`
)

// TestCollectionIndexesServeTheLookups: a new collection's indexes are
// made on the expressions of FerretDB's and devdb's lookups, so SQLite
// serves the lookups by _id and by a unique key from the collection's own
// indexes and devdb adds no second index on the same expression (each
// one more to update at every write); it still adds the lookup of a field
// whose index holds nothing (a non-unique one) or not every document that
// has the field (a compound unique one). listIndexes lists the indexes as
// they were created.
func TestCollectionIndexesServeTheLookups(t *testing.T) {
	t.Parallel()

	s := startServer(t)
	coll := connect(t, s.URI()).Database("shared").Collection("jobs")
	fillJobs(t, coll, 100)
	_, err := coll.Indexes().CreateOne(context.Background(), mongo.IndexModel{
		Keys: bson.D{{Key: "a", Value: 1}, {Key: "b", Value: 1}}, Options: options.Index().SetName("ab").SetUnique(true),
	})
	require.NoError(t, err)
	file := filepath.Join(s.Dir(), "shared.sqlite")
	waitForIndex(t, file, "__devdb_s_state,queue,-priority,_id")
	waitForIndex(t, file, "__devdb_f_a")
	requireListed(t, coll, map[string]string{
		"_id_":      `{"_id": {"$numberInt":"1"}}`,
		"claim":     `{"state": {"$numberInt":"1"},"queue": {"$numberInt":"1"},"priority": {"$numberInt":"-1"},"_id": {"$numberInt":"1"}}`,
		"uniqueKey": `{"uniqueKey": {"$numberInt":"1"}} unique`,
		"after":     `{"after": {"$numberInt":"1"}}`,
		"ab":        `{"a": {"$numberInt":"1"},"b": {"$numberInt":"1"}} unique`,
	})

	defs := indexDefinitions(t, file)
	perExpr := map[string][]string{}
	for name, def := range defs {
		if expr := heldLookup(def); expr != "" {
			perExpr[expr] = append(perExpr[expr], name)
		}
	}
	for expr, names := range perExpr {
		require.Len(t, names, 1, "indexes on %s", expr)
	}
	for _, field := range []string{"_id", "uniqueKey", "state", "after", "a"} {
		require.Contains(t, perExpr, field, "an index serves lookups of %s", field)
	}
	require.Equal(t, []string{"__id_"}, perExpr["_id"])
	require.Equal(t, []string{"_uniqueKey"}, perExpr["uniqueKey"])

	require.Regexp(t, `USING INDEX \S+__id_ \(`, waitForPlan(t, file, "__id_ (", idLookupQuery))
	require.Regexp(t, `USING INDEX \S+_uniqueKey \(`, waitForPlan(t, file, "_uniqueKey (", fieldLookupQuery))
}

// requireListed requires listIndexes of coll to list the indexes of want:
// name → keys (extended JSON), then " unique" for a unique one.
func requireListed(t *testing.T, coll *mongo.Collection, want map[string]string) {
	t.Helper()
	specs, err := coll.Indexes().ListSpecifications(context.Background())
	require.NoError(t, err)
	got := map[string]string{}
	for _, spec := range specs {
		got[spec.Name] = spec.KeysDocument.String()
		if spec.Unique != nil && *spec.Unique {
			got[spec.Name] += " unique"
		}
	}
	require.Equal(t, want, got)
}

// heldLookup is the top-level field whose lookups (an equality) SQLite
// can serve from the index def, in either form of the expression
// (FerretDB's ->"f", devdb's ->'$.f'): its first key, when it holds every
// row that has that field (not partial, or partial on that field alone).
// Empty for another index.
func heldLookup(def string) string {
	m := leadingKey.FindStringSubmatch(def)
	if m == nil {
		return ""
	}
	key := m[1] + m[2]
	i := strings.LastIndex(def, ") WHERE ")
	if i < 0 {
		return key
	}
	switch def[i+len(") WHERE "):] {
	case `_ferretdb_sjson->"` + key + `" IS NOT NULL`, `_ferretdb_sjson->'$.` + key + `' IS NOT NULL`:
		return key
	}
	return ""
}

var leadingKey = regexp.MustCompile(`\(_ferretdb_sjson->(?:"(\w+)"|'\$\.(\w+)')( DESC)?[,)]`)

// TestDuplicateKeysAreReported: a second document with a unique index's
// key, by insert, update or findAndModify, or with an _id taken, is
// refused as before the indexes took the lookup expressions: MongoDB's
// duplicate key error, or for an update the command error quoting
// SQLite, which names the index (docs/EMBEDDED-SERVER.md; docket's
// store.DuplicateIndex reads it).
func TestDuplicateKeysAreReported(t *testing.T) {
	t.Parallel()

	s := startServer(t)
	coll := connect(t, s.URI()).Database("dups").Collection("jobs")
	fillJobs(t, coll, 20)
	ctx := context.Background()
	requireE11000 := func(err error, what string) {
		t.Helper()
		require.True(t, mongo.IsDuplicateKeyError(err), "%s: %v", what, err)
		require.Contains(t, err.Error(), "E11000 duplicate key error collection: dups.jobs", what)
	}

	_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "new"}, {Key: "uniqueKey", Value: "k10"}})
	requireE11000(err, "insert of a taken unique key")
	_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "j001"}})
	requireE11000(err, "insert of a taken _id")
	err = coll.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: "new"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "uniqueKey", Value: "k0"}}}},
		options.FindOneAndUpdate().SetUpsert(true)).Err()
	requireE11000(err, "findAndModify's upsert of a taken unique key")

	take := bson.D{{Key: "$set", Value: bson.D{{Key: "uniqueKey", Value: "k0"}}}}
	_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "j001"}}, take)
	requireNamesIndex(t, err, "uniqueKey", "update to a taken unique key")
	err = coll.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: "j002"}}, take).Err()
	requireNamesIndex(t, err, "uniqueKey", "findAndModify to a taken unique key")

	n, err := coll.CountDocuments(ctx, bson.D{{Key: "uniqueKey", Value: "k0"}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "j001"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "uniqueKey", Value: "k1"}}}})
	require.NoError(t, err, "a free key")
}

// requireNamesIndex requires err to be devdb's error of an update that
// broke the unique index named index: SQLite's, naming it.
func requireNamesIndex(t *testing.T, err error, index, what string) {
	t.Helper()
	require.Error(t, err, what)
	require.Regexp(t, `UNIQUE constraint failed: index '[a-z]+_[0-9a-f]+_`+index+`'`, err.Error(), what)
}

// TestOldIndexesKeepTheirLookups: the tables of a data directory made by
// an earlier devdb have FerretDB's indexes on its own expressions, which
// SQLite does not take for the lookups; devdb adds its lookup indexes to
// them, and uniqueness holds as before.
func TestOldIndexesKeepTheirLookups(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Start(ctx, Config{Addr: "127.0.0.1:0", Dir: dir, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	fillJobs(t, connect(t, s.URI()).Database("old").Collection("jobs"), 100)
	require.NoError(t, s.Close())
	file := filepath.Join(dir, "old.sqlite")
	toOldForm(t, file, "__id_", `(_ferretdb_sjson->"_id") WHERE _ferretdb_sjson->"_id" IS NOT NULL`)
	toOldForm(t, file, "_uniqueKey", `(_ferretdb_sjson->"uniqueKey") WHERE _ferretdb_sjson->"uniqueKey" IS NOT NULL`)

	s = startServerIn(t, dir, "127.0.0.1:0")
	require.Contains(t, waitForPlan(t, file, "__devdb_id_lookup", idLookupQuery), "__devdb_id_lookup")
	require.Contains(t, waitForPlan(t, file, "__devdb_f_uniqueKey", fieldLookupQuery), "__devdb_f_uniqueKey")

	coll := connect(t, s.URI()).Database("old").Collection("jobs")
	_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "new"}, {Key: "uniqueKey", Value: "k10"}})
	require.True(t, mongo.IsDuplicateKeyError(err), "%v", err)
	_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "j001"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "uniqueKey", Value: "k0"}}}})
	requireNamesIndex(t, err, "uniqueKey", "update to a taken unique key")
	var got bson.M
	require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "uniqueKey", Value: "k20"}}).Decode(&got))
	require.Equal(t, "j020", got["_id"])
}

// toOldForm makes the unique index of the one collection table in file
// whose name ends in suffix again as an earlier devdb made it, with the
// columns and WHERE clause def.
func toOldForm(t *testing.T, file, suffix, def string) {
	t.Helper()
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: file}).String())
	require.NoError(t, err)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var table string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT table_name FROM _ferretdb_collections`).Scan(&table))
	name := quoteIdent(table + suffix)
	_, err = db.ExecContext(ctx, `DROP INDEX `+name)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, fmt.Sprintf(`CREATE UNIQUE INDEX %s ON %s %s`, name, quoteIdent(table), def))
	require.NoError(t, err)
}
