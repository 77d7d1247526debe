package devdb

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// devdb's FerretDB pushes down {field: {$exists: true}} of a top-level
// field with a plain name as the field being present in the stored JSON:
// results stay exactly MongoDB's, a field holding null, an empty array or
// object, false, 0 or "" being present, a missing one not; fields whose
// names a JSON path does not take as they are (and dotted paths) are left
// to the handler, and still match as they should.
func TestExistsIsPushedDown(t *testing.T) {
	t.Parallel()

	s := startServer(t)
	db := connect(t, s.URI()).Database("exists")
	coll := db.Collection("jobs")
	ctx := context.Background()
	_, err := coll.Indexes().CreateMany(ctx, []mongo.IndexModel{
		{Keys: bson.D{{Key: "state", Value: 1}, {Key: "n", Value: 1}}},
		{Keys: bson.D{{Key: "f", Value: 1}}, Options: options.Index().SetSparse(true)},
	})
	require.NoError(t, err)
	oid := bson.NewObjectID()
	docs := []bson.D{
		{{Key: "_id", Value: "a"}, {Key: "state", Value: "done"}},
		{{Key: "_id", Value: "b"}, {Key: "state", Value: "done"}, {Key: "f", Value: nil}},
		{{Key: "_id", Value: "c"}, {Key: "f", Value: bson.A{}}},
		{{Key: "_id", Value: "d"}, {Key: "state", Value: "done"}, {Key: "f", Value: bson.A{nil}}},
		{{Key: "_id", Value: "e"}, {Key: "f", Value: bson.D{}}},
		{{Key: "_id", Value: "g"}, {Key: "state", Value: bson.A{"done"}}, {Key: "f", Value: ""}},
		{{Key: "_id", Value: "h"}, {Key: "f", Value: 0}},
		{{Key: "_id", Value: "i"}, {Key: "f", Value: false}},
		{{Key: "_id", Value: "j"}, {Key: "state", Value: "running"}, {Key: "f", Value: "x"}, {Key: "ff", Value: 1}},
		{{Key: "_id", Value: "k"}, {Key: "f", Value: bson.D{{Key: "x", Value: nil}}}},
		{{Key: "_id", Value: "l"}, {Key: "f", Value: oid}, {Key: "a-b", Value: 1}, {Key: "x'y", Value: 1}},
		{{Key: "_id", Value: "m"}, {Key: "ff", Value: "f"}, {Key: "F", Value: 1}, {Key: "sub", Value: bson.D{{Key: "f", Value: nil}}}},
		{{Key: "_id", Value: "o"}, {Key: "f", Value: 1.5}, {Key: "a b", Value: nil}, {Key: "sub", Value: bson.D{}}},
		{{Key: "_id", Value: "p"}, {Key: "f", Value: bson.DateTime(0)}, {Key: "note", Value: "\x00\x1b[2J\xc3"}},
		{{Key: "_id", Value: "q"}, {Key: "f", Value: bson.Binary{Data: []byte{0}}}, {Key: "state", Value: nil}},
	}
	for _, d := range docs {
		_, err := coll.InsertOne(ctx, d)
		require.NoError(t, err)
	}
	present := bson.D{{Key: "$exists", Value: true}}
	withF := []string{"b", "c", "d", "e", "g", "h", "i", "j", "k", "l", "o", "p", "q"}

	for _, c := range []struct {
		filter   bson.D
		want     []string
		pushdown bool
	}{
		{bson.D{{Key: "f", Value: present}}, withF, true},
		{bson.D{{Key: "f", Value: present}, {Key: "state", Value: "done"}}, []string{"b", "d", "g"}, true},
		{bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"done", "running"}}}}, {Key: "f", Value: present}}, []string{"b", "d", "g", "j"}, true},
		{bson.D{{Key: "ff", Value: present}}, []string{"j", "m"}, true},
		{bson.D{{Key: "f", Value: present}, {Key: "ff", Value: present}}, []string{"j"}, true},
		{bson.D{{Key: "F", Value: present}}, []string{"m"}, true},
		{bson.D{{Key: "state", Value: present}}, []string{"a", "b", "d", "g", "j", "q"}, true},
		{bson.D{{Key: "_id", Value: "b"}, {Key: "f", Value: present}}, []string{"b"}, true},
		{bson.D{{Key: "_id", Value: "a"}, {Key: "f", Value: present}}, nil, true},
		{bson.D{{Key: "_id", Value: present}}, []string{"a", "b", "c", "d", "e", "g", "h", "i", "j", "k", "l", "m", "o", "p", "q"}, false},
		// Not pushed down, still right.
		{bson.D{{Key: "f", Value: bson.D{{Key: "$exists", Value: false}}}}, []string{"a", "m"}, false},
		{bson.D{{Key: "a-b", Value: present}}, []string{"l"}, false},
		{bson.D{{Key: "a b", Value: present}}, []string{"o"}, false},
		{bson.D{{Key: "x'y", Value: present}}, []string{"l"}, false},
		{bson.D{{Key: "sub.f", Value: present}}, []string{"m"}, false},
		{bson.D{{Key: "f", Value: bson.D{{Key: "$exists", Value: true}, {Key: "$ne", Value: "x"}}}}, slices.DeleteFunc(slices.Clone(withF), func(id string) bool { return id == "j" }), false},
	} {
		name := fmt.Sprint(c.filter)
		require.Equal(t, c.want, foundIDs(t, coll, c.filter), name)
		n, err := coll.CountDocuments(ctx, c.filter)
		require.NoError(t, err, name)
		require.EqualValues(t, len(c.want), n, name)
		_, pushdown := explainFind(t, db, "jobs", c.filter)
		require.Equal(t, c.pushdown, pushdown, "%s: pushed down", name)
	}

	// SQLite reads the index of the documents that have f, not that of
	// state's $in; without such an index (ff has none), state's as before.
	plan := waitForFindPlan(t, db, "jobs", bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"done", "x"}}}}, {Key: "f", Value: present}}, "__devdb_f_f")
	require.Regexp(t, `__devdb_f_f(\s|$)`, plan)
	require.NotContains(t, plan, "__devdb_f_state")
	plan = waitForFindPlan(t, db, "jobs", bson.D{{Key: "state", Value: "running"}, {Key: "ff", Value: present}}, "__devdb_f_state")
	require.Contains(t, plan, "__devdb_f_state")

	// A fenced write by _id still finds its document, and only while
	// the field is there.
	res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "b"}, {Key: "f", Value: present}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "f", Value: ""}}}})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.ModifiedCount)
	res, err = coll.UpdateMany(ctx, bson.D{{Key: "f", Value: present}, {Key: "state", Value: "done"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "w", Value: 1}}}})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.ModifiedCount) // d, g's array; no longer b
}

// foundIDs returns the _ids, as strings, of the documents of coll that
// filter matches, sorted.
func foundIDs(t *testing.T, coll *mongo.Collection, filter bson.D, opts ...options.Lister[options.FindOptions]) []string {
	t.Helper()
	cur, err := coll.Find(context.Background(), filter, opts...)
	require.NoError(t, err)
	var docs []bson.Raw
	require.NoError(t, cur.All(context.Background(), &docs))
	var got []string
	for _, d := range docs {
		got = append(got, idString(d.Lookup("_id")))
	}
	slices.Sort(got)
	return got
}

// explainFind returns devdb's explain of a find of filter in coll: the
// SQLite plan of its query, one line a step, and whether the filter was
// pushed down.
func explainFind(t *testing.T, db *mongo.Database, coll string, filter bson.D) (string, bool) {
	t.Helper()
	var explain struct {
		QueryPlanner struct {
			Plan []string `bson:"Plan"`
		} `bson:"queryPlanner"`
		FilterPushdown bool `bson:"filterPushdown"`
	}
	cmd := bson.D{{Key: "explain", Value: bson.D{{Key: "find", Value: coll}, {Key: "filter", Value: filter}, {Key: "limit", Value: 100}}}}
	require.NoError(t, db.RunCommand(context.Background(), cmd).Decode(&explain))
	return strings.Join(explain.QueryPlanner.Plan, "\n"), explain.FilterPushdown
}

// waitForFindPlan waits until devdb's plan of a find of filter names want
// (FerretDB's pooled connections read an index the indexer added when
// they next run a query: a find runs before each explain), and returns the
// last plan it read.
func waitForFindPlan(t *testing.T, db *mongo.Database, coll string, filter bson.D, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		foundIDs(t, db.Collection(coll), filter)
		plan, pushdown := explainFind(t, db, coll, filter)
		require.True(t, pushdown, "%v: pushed down", filter)
		if strings.Contains(plan, want) || time.Now().After(deadline) {
			return plan
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The leader's due pass of docket, {dependentsDue: {$exists: true},
// state: {$in: [finished states]}} with a limit, reads the few jobs
// flagged from the partial index of the documents that have the sparse
// field dependentsDue, not every finished job from the index on state
// (as SQLite, without statistics, would take it): its cost does not grow
// with the finished jobs a collection retains. A lookup by _id with the
// same condition still reads the one row by _id.
func TestDuePassReadsTheFlaggedJobsOnly(t *testing.T) {
	t.Parallel()

	s := startServer(t)
	db := connect(t, s.URI()).Database("due")
	coll := db.Collection("jobs")
	ctx := context.Background()
	_, err := coll.Indexes().CreateMany(ctx, append(jobsLikeIndexes(),
		mongo.IndexModel{Keys: bson.D{{Key: "dependentsDue", Value: 1}}, Options: options.Index().SetName("dependentsDue").SetSparse(true)}))
	require.NoError(t, err)
	finished := []string{"succeeded", "dead", "cancelled"}
	docs := make([]any, 0, 2010)
	for i := range 2000 {
		d := bson.D{{Key: "_id", Value: fmt.Sprintf("j%04d", i)}, {Key: "state", Value: finished[i%3]}, {Key: "queue", Value: "q"}, {Key: "priority", Value: 0}}
		if i%700 == 5 {
			d = append(d, bson.E{Key: "dependentsDue", Value: bson.A{fmt.Sprintf("k%d", i)}})
		}
		docs = append(docs, d)
	}
	for i := range 10 { // flagged but not finished: not due yet
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("r%d", i)}, {Key: "state", Value: "running"}, {Key: "dependentsDue", Value: true}})
	}
	_, err = coll.InsertMany(ctx, docs)
	require.NoError(t, err)
	file := filepath.Join(s.Dir(), "due.sqlite")
	waitForIndex(t, file, "__devdb_f_dependentsDue")
	waitForIndex(t, file, "__devdb_f_state")
	waitForIndex(t, file, "__devdb_f_after")

	due := bson.D{
		{Key: "dependentsDue", Value: bson.D{{Key: "$exists", Value: true}}},
		{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"succeeded", "dead", "cancelled"}}}},
	}
	require.Equal(t, []string{"j0005", "j0705", "j1405"}, foundIDs(t, coll, due, options.Find().SetLimit(100)))
	plan := waitForFindPlan(t, db, "jobs", due, "__devdb_f_dependentsDue")
	require.Contains(t, plan, "__devdb_f_dependentsDue", "the due pass reads the flagged jobs' index")
	require.NotContains(t, plan, "__devdb_f_state")
	require.True(t, strings.HasSuffix(indexDefinitions(t, file)["__devdb_f_dependentsDue"],
		` WHERE _ferretdb_sjson->'$.dependentsDue' IS NOT NULL`), "the index holds the flagged jobs only")

	byID := bson.D{{Key: "_id", Value: "j0705"}, {Key: "dependentsDue", Value: bson.D{{Key: "$exists", Value: true}}}}
	require.Equal(t, []string{"j0705"}, foundIDs(t, coll, byID))
	plan = waitForFindPlan(t, db, "jobs", byID, "__id_ (")
	require.Regexp(t, `USING INDEX \S+__id_ \(`, plan, "a lookup by _id reads by _id")

	// A cancelled job's dependents that are due in turn ({after: id,
	// state, dependentsDue present}, the cascade of a cancel) are read by
	// after's index: an equality may select fewer than the flagged.
	cascade := bson.D{{Key: "after", Value: "p1"}, {Key: "state", Value: "cancelled"}, {Key: "dependentsDue", Value: bson.D{{Key: "$exists", Value: true}}}}
	require.Empty(t, foundIDs(t, coll, cascade))
	plan = waitForFindPlan(t, db, "jobs", cascade, "__devdb_f_after")
	require.Regexp(t, `__devdb_f_after(\s|$)`, plan)

	// Settled: the flag goes, and the pass finds the others only.
	res, err := coll.UpdateOne(ctx, byID, bson.D{{Key: "$unset", Value: bson.D{{Key: "dependentsDue", Value: ""}}}})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.ModifiedCount)
	require.Equal(t, []string{"j0005", "j1405"}, foundIDs(t, coll, due, options.Find().SetLimit(100)))
}
