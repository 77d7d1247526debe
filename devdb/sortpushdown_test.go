package devdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"strings"
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
		d := bson.D{{Key: "_id", Value: mixedID(i)}}
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
		return sortedIDs(t, coll, filter, sort, limit)
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

// TestIndexedSortsMatchFerretDBsOwnSort: for a collection with an index on
// two or more top-level fields, devdb adds a covering index of their values
// and types (idindex.go), and a limited find whose filter sets the index's
// first field equal to strings and whose sort keys are all in the index is
// sorted from that index alone (orderByIndex in _overlay). Its result must
// be exactly the first documents of FerretDB's own sort of every match, for
// sort values of every type that index orders (numbers of three kinds
// around 2^53, strings with escapes and bytes past ASCII, null, missing,
// ObjectIDs, booleans, dates), _ids of three types, a non-leading key
// holding arrays; and still when a document's leading field or a sort key
// is an array or an object, which the index does not order (left to
// FerretDB's sort of the sort fields).
func TestIndexedSortsMatchFerretDBsOwnSort(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	coll := connect(t, s.URI()).Database("indexed").Collection("jobs")
	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{
		{Key: "state", Value: 1}, {Key: "q", Value: 1}, {Key: "p", Value: -1}, {Key: "r", Value: 1}, {Key: "_id", Value: 1},
	}})
	require.NoError(t, err)

	rng := rand.New(rand.NewPCG(3, 4))
	day := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	values := []any{
		int32(0), int32(3), int32(-7), int64(3), int64(1) << 40, int64(1)<<53 + 1, int64(1) << 53, float64(1 << 53), 2.5, -0.5, 3.0,
		math.MaxFloat64, -1e300, math.SmallestNonzeroFloat64,
		"", "a", "b", "B", "ä", "é", `quo"te`, "back\\slash", "tab\there", "<&>", "日本", "a\x00b", "[x", "{",
		nil, bson.NewObjectIDFromTimestamp(day), bson.NewObjectIDFromTimestamp(day.Add(time.Hour)),
		true, false, bson.NewDateTimeFromTime(day), bson.NewDateTimeFromTime(day.Add(-time.Minute)), bson.NewDateTimeFromTime(time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)),
	}
	const missing = "missing"
	pick := func(vs []any) any {
		if rng.IntN(8) == 0 {
			return missing
		}
		return vs[rng.IntN(len(vs))]
	}
	states := []any{"available", "available", "running", int32(1), nil, "availablf", bson.NewObjectID()}
	queues := []any{"a", "b", bson.A{"a", "z"}, bson.A{}, int32(4), nil, "[a]"}
	doc := func(i int) bson.D {
		d := bson.D{{Key: "_id", Value: mixedID(i)}}
		for _, f := range []struct {
			name string
			vs   []any
		}{{"state", states}, {"q", queues}, {"p", values}, {"r", values}} {
			if v := pick(f.vs); v != missing {
				d = append(d, bson.E{Key: f.name, Value: v})
			}
		}
		return append(d, bson.E{Key: "n", Value: int32(rng.IntN(10))}, bson.E{Key: "pad", Value: fmt.Sprintf("%0100d", i)})
	}
	var docs []any
	for i := range 600 {
		docs = append(docs, doc(i))
	}
	_, err = coll.InsertMany(ctx, docs)
	require.NoError(t, err)
	waitForIndex(t, filepath.Join(s.Dir(), "indexed.sqlite"), "__devdb_s_state,q,-p,r,_id")

	ids := func(filter, sort bson.D, limit int64) []string {
		t.Helper()
		return sortedIDs(t, coll, filter, sort, limit)
	}
	filters := []bson.D{
		{{Key: "state", Value: "available"}},
		{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"available", "running"}}}}},
		{{Key: "state", Value: "available"}, {Key: "q", Value: bson.D{{Key: "$in", Value: bson.A{"a", "z"}}}}},
		{{Key: "state", Value: "available"}, {Key: "q", Value: "b"}, {Key: "n", Value: bson.D{{Key: "$gte", Value: 4}}}},
		{{Key: "state", Value: "available"}, {Key: "r", Value: bson.D{{Key: "$lte", Value: bson.NewDateTimeFromTime(day)}}}},
		{{Key: "state", Value: "nothing"}},
	}
	sorts := []bson.D{
		{{Key: "p", Value: 1}, {Key: "_id", Value: 1}},
		{{Key: "p", Value: -1}, {Key: "_id", Value: 1}},
		{{Key: "p", Value: -1}, {Key: "r", Value: 1}, {Key: "_id", Value: 1}},
		{{Key: "r", Value: 1}, {Key: "p", Value: -1}, {Key: "_id", Value: -1}},
		{{Key: "_id", Value: 1}},
		{{Key: "_id", Value: -1}},
		{{Key: "q", Value: 1}, {Key: "_id", Value: 1}},
		{{Key: "n", Value: 1}, {Key: "_id", Value: 1}},
	}
	check := func(stage string) {
		t.Helper()
		for _, f := range filters {
			for _, so := range sorts {
				all := ids(f, so, 0)
				for _, limit := range []int64{1, 7, 64, 1000} {
					want := all[:min(int(limit), len(all))]
					require.Equal(t, want, ids(f, so, limit), "%s: filter %v sort %v limit %d", stage, f, so, limit)
				}
				require.Equal(t, all[:min(1, len(all))], modified(coll, f, so), "%s: findAndModify filter %v sort %v", stage, f, so)
			}
		}
	}
	check("simple types")

	// A sort key that is an array or an object, and a leading field that
	// is an array holding the value: the index orders neither.
	_, err = coll.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "arr-p"}, {Key: "state", Value: "available"}, {Key: "q", Value: "a"}, {Key: "p", Value: bson.A{int32(1), int32(99)}}},
		bson.D{{Key: "_id", Value: "obj-r"}, {Key: "state", Value: "available"}, {Key: "q", Value: "b"}, {Key: "r", Value: bson.D{{Key: "x", Value: 1}}}},
	})
	require.NoError(t, err)
	check("array and object sort values")
	_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "arr-state"}, {Key: "state", Value: bson.A{"x", "available"}}, {Key: "q", Value: "a"}, {Key: "p", Value: int32(1000)}})
	require.NoError(t, err)
	check("array leading field")
	require.Contains(t, ids(bson.D{{Key: "state", Value: "available"}}, bson.D{{Key: "_id", Value: -1}}, 1000), `"arr-state"`)

	// A filter the index applies in part, which leaves out most of the
	// first windows of the index's order: the find reads on, a window
	// twice as wide each time, until it has its limit.
	other := connect(t, s.URI()).Database("indexed").Collection("wide")
	_, err = other.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "state", Value: 1}, {Key: "p", Value: -1}, {Key: "_id", Value: 1}}})
	require.NoError(t, err)
	docs = docs[:0]
	for i := range 3000 {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("w-%04d", i)}, {Key: "state", Value: "available"},
			{Key: "p", Value: int32(rng.IntN(100))}, {Key: "n", Value: int32(i % 100)}})
	}
	_, err = other.InsertMany(ctx, docs)
	require.NoError(t, err)
	waitForIndex(t, filepath.Join(s.Dir(), "indexed.sqlite"), "__devdb_s_state,-p,_id")
	coll = other
	for _, f := range []bson.D{
		{{Key: "state", Value: "available"}, {Key: "n", Value: int32(99)}},
		{{Key: "state", Value: "available"}, {Key: "n", Value: bson.D{{Key: "$gte", Value: 90}}}},
	} {
		so := bson.D{{Key: "p", Value: -1}, {Key: "_id", Value: 1}}
		all := ids(f, so, 0)
		require.NotEmpty(t, all)
		for _, limit := range []int64{1, 25, 29, 30, 31, 200, 1000} {
			require.Equal(t, all[:min(int(limit), len(all))], ids(f, so, limit), "wide: filter %v limit %d", f, limit)
		}
	}
}

// sortedIDs returns the _ids, as their extended JSON, of the documents a
// find with filter, sort and limit (none when 0) returns, in order.
func sortedIDs(t *testing.T, coll *mongo.Collection, filter, sort bson.D, limit int64) []string {
	t.Helper()
	o := options.Find().SetSort(sort).SetProjection(bson.D{{Key: "_id", Value: 1}})
	if limit > 0 {
		o.SetLimit(limit)
	}
	cur, err := coll.Find(context.Background(), filter, o)
	require.NoError(t, err)
	var got []bson.Raw
	require.NoError(t, cur.All(context.Background(), &got))
	out := make([]string, len(got))
	for i, d := range got {
		out[i] = d.Lookup("_id").String()
	}
	return out
}

// modified is the _id, as ids gives it, of the document a findAndModify
// with filter and sort updates (a field no index holds), none when it
// finds none.
func modified(coll *mongo.Collection, filter, sort bson.D) []string {
	var got bson.Raw
	err := coll.FindOneAndUpdate(context.Background(), filter, bson.D{{Key: "$inc", Value: bson.D{{Key: "touched", Value: 1}}}},
		options.FindOneAndUpdate().SetSort(sort)).Decode(&got)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return []string{}
	}
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	return []string{got.Lookup("_id").String()}
}

// TestSortedFindAndModifyOfACappedCollection: devdb's FerretDB has the
// backend sort a findAndModify's matches, a capped collection's too
// (whose documents the backend otherwise returns in insertion order):
// the document updated is the first in sort order, not in insertion order.
func TestSortedFindAndModifyOfACappedCollection(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	db := connect(t, s.URI()).Database("capped")
	require.NoError(t, db.CreateCollection(ctx, "jobs", options.CreateCollection().SetCapped(true).SetSizeInBytes(1<<20)))
	coll := db.Collection("jobs")
	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "state", Value: 1}, {Key: "p", Value: -1}}})
	require.NoError(t, err)
	for i, p := range []int32{3, 9, 1, 7} {
		_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("c%d", i)}, {Key: "state", Value: "available"}, {Key: "p", Value: p}})
		require.NoError(t, err)
	}
	waitForIndex(t, filepath.Join(s.Dir(), "capped.sqlite"), "__devdb_s_state,-p")
	require.Equal(t, []string{`"c1"`}, modified(coll, bson.D{{Key: "state", Value: "available"}}, bson.D{{Key: "p", Value: -1}}))
	require.Equal(t, []string{`"c2"`}, modified(coll, bson.D{{Key: "state", Value: "available"}}, bson.D{{Key: "p", Value: 1}}))
}

// openReadOnly opens the SQLite file read-only, on a connection of the
// test's own (FerretDB's pooled connections re-read the schema only when
// they next run a query), closed when the test ends.
func openReadOnly(t *testing.T, file string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: file, RawQuery: "mode=ro"}).String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// mixedID is the i-th of _ids of three types in turn: a string, an int32
// and an ObjectID.
func mixedID(i int) any {
	switch i % 3 {
	case 0:
		return fmt.Sprintf("id-%03d", i)
	case 1:
		return int32(i)
	default:
		return bson.NewObjectID()
	}
}

// waitForIndex waits until the SQLite file holds an index whose name ends
// with suffix.
func waitForIndex(t *testing.T, file, suffix string) {
	t.Helper()
	db := openReadOnly(t, file)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND substr(name, -?) = ?`, len(suffix), suffix).Scan(&n))
		if n > 0 {
			return
		}
		require.False(t, time.Now().After(deadline), "no index %s in %s", suffix, file)
		time.Sleep(100 * time.Millisecond)
	}
}

// TestWalkedSortsMatchFerretDBsOwnSort: while no document has a key of a
// type the covering index does not order, a sorted find whose filter sets
// the keys before the sort's to strings walks the index from each
// combination of them (orderByIndex's walkRead) and stops at its limit;
// its results must be FerretDB's own sort's, for every type the index
// orders (numbers of three types, strings with escapes and bytes past
// ASCII, null, missing, ObjectIDs, booleans, dates), in the index's
// directions and all reversed, with a filter the index applies in part.
// A document whose sort key is an array (which sorts by its least or
// greatest element) turns the walk off until it is gone.
func TestWalkedSortsMatchFerretDBsOwnSort(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	coll := connect(t, s.URI()).Database("walked").Collection("jobs")
	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{
		{Key: "state", Value: 1}, {Key: "q", Value: 1}, {Key: "p", Value: -1}, {Key: "r", Value: 1}, {Key: "_id", Value: 1},
	}})
	require.NoError(t, err)

	rng := rand.New(rand.NewPCG(5, 6))
	day := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	values := []any{
		int32(0), int32(3), int32(-7), int64(3), int64(1) << 40, int64(1)<<53 + 1, float64(1 << 53), 2.5, -0.5, 3.0,
		"", "a", "B", "ä", `quo"te`, "back\\slash", "日本", "[x", nil,
		bson.NewObjectIDFromTimestamp(day), bson.NewObjectIDFromTimestamp(day.Add(time.Hour)),
		true, false, bson.NewDateTimeFromTime(day), bson.NewDateTimeFromTime(day.Add(-time.Minute)),
	}
	var docs []any
	for i := range 900 {
		d := bson.D{{Key: "_id", Value: mixedID(i)},
			{Key: "state", Value: []string{"available", "available", "running"}[rng.IntN(3)]},
			{Key: "q", Value: []string{"a", "b", "c", "[a]"}[rng.IntN(4)]}}
		for _, k := range []string{"p", "r"} {
			if rng.IntN(8) > 0 {
				d = append(d, bson.E{Key: k, Value: values[rng.IntN(len(values))]})
			}
		}
		docs = append(docs, append(d, bson.E{Key: "n", Value: int32(rng.IntN(10))}))
	}
	_, err = coll.InsertMany(ctx, docs)
	require.NoError(t, err)
	file := filepath.Join(s.Dir(), "walked.sqlite")
	waitForIndex(t, file, "__devdb_s_state,q,-p,r,_id")
	waitForIndex(t, file, "__devdb_o_state,q,-p,r,_id")

	filters := []bson.D{
		{{Key: "state", Value: "available"}, {Key: "q", Value: "a"}},
		{{Key: "state", Value: "available"}, {Key: "q", Value: bson.D{{Key: "$in", Value: bson.A{"a", "[a]", "c"}}}}},
		{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"available", "running"}}}}, {Key: "q", Value: bson.D{{Key: "$in", Value: bson.A{"b", "c"}}}}},
		{{Key: "state", Value: "available"}, {Key: "q", Value: "b"}, {Key: "n", Value: bson.D{{Key: "$gte", Value: 8}}}},
		{{Key: "state", Value: "available"}, {Key: "q", Value: "nothing"}},
	}
	sorts := []bson.D{
		{{Key: "p", Value: -1}, {Key: "r", Value: 1}, {Key: "_id", Value: 1}},
		{{Key: "p", Value: 1}, {Key: "r", Value: -1}, {Key: "_id", Value: -1}},
		{{Key: "p", Value: -1}, {Key: "r", Value: 1}},
		{{Key: "p", Value: -1}},
	}
	check := func(stage string) {
		t.Helper()
		for _, f := range filters {
			for _, so := range sorts {
				all := sortedIDs(t, coll, f, so, 0)
				for _, limit := range []int64{1, 7, 64, 300} {
					got := sortedIDs(t, coll, f, so, limit)
					if len(so) == 3 {
						require.Equal(t, all[:min(int(limit), len(all))], got, "%s: filter %v sort %v limit %d", stage, f, so, limit)
					} else {
						require.Len(t, got, min(int(limit), len(all)), "%s: filter %v sort %v limit %d", stage, f, so, limit)
					}
				}
				if len(so) == 3 {
					require.Equal(t, all[:min(1, len(all))], modified(coll, f, so), "%s: findAndModify filter %v sort %v", stage, f, so)
				}
			}
		}
	}
	check("ordered types")
	require.NotContains(t, walkPlan(t, file), "TEMP B-TREE", "a walk reads the index in order")

	// Documents another application wrote, one at a time: an array in the
	// first sort key, in a later one, in a key the filter sets (holding
	// one of its strings), and an object in a sort key.
	day2 := bson.NewDateTimeFromTime(day.Add(24 * time.Hour))
	for _, odd := range []bson.D{
		{{Key: "p", Value: bson.A{int32(-100), int32(1000)}}, {Key: "r", Value: int32(1)}},
		{{Key: "p", Value: int32(3)}, {Key: "r", Value: bson.A{day2, int32(-50)}}},
		{{Key: "q", Value: bson.A{"z", "a"}}, {Key: "p", Value: true}},
		{{Key: "p", Value: int32(3)}, {Key: "r", Value: bson.D{{Key: "x", Value: int32(1)}}}},
	} {
		d := append(bson.D{{Key: "_id", Value: "odd"}, {Key: "state", Value: "available"}, {Key: "q", Value: "a"}}, odd...)
		if odd[0].Key == "q" {
			d = append(bson.D{d[0], d[1]}, odd...)
		}
		_, err = coll.InsertOne(ctx, d)
		require.NoError(t, err)
		check(fmt.Sprintf("odd document %v", odd))
		_, err = coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: "odd"}})
		require.NoError(t, err)
	}
	check("the odd documents gone")
}

// walkPlan is SQLite's plan of one walk of the test's covering index, as
// orderByIndex's walkRead writes it.
func walkPlan(t *testing.T, file string) string {
	t.Helper()
	db := openReadOnly(t, file)
	var table string
	require.NoError(t, db.QueryRow(`SELECT table_name FROM _ferretdb_collections`).Scan(&table))
	v := func(k string) string { return fmt.Sprintf(coveringValue, k) }
	q := fmt.Sprintf(`EXPLAIN QUERY PLAN SELECT rowid AS rid, %[3]s AS s0, %[4]s AS s1, %[5]s AS s2, %[6]s AS s3, %[7]s AS s4, %[8]s AS s5 `+
		`FROM %[1]s INDEXED BY %[2]s WHERE %[9]s = ? AND %[10]s = 3 AND %[11]s = ? AND %[12]s = 3 `+
		`ORDER BY s0 DESC, s1 DESC, s2, s3, s4, s5 LIMIT 10`,
		quoteIdent(table), quoteIdent(table+coveringInfix+"state,q,-p,r,_id"),
		coveringRankOf("p"), v("p"), coveringRankOf("r"), v("r"), coveringRankOf("_id"), v("_id"),
		v("state"), coveringRankOf("state"), v("q"), coveringRankOf("q"))
	rows, err := db.Query(q, "available", "a")
	require.NoError(t, err)
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var id, parent, notused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
		plan.WriteString(detail + "\n")
	}
	require.NoError(t, rows.Err())
	return plan.String()
}

// TestWalkedSortsWithTiesReadOnPastTheFirstWindow: a walk whose sort runs to
// the covering index's end leaves ties, which SQLite orders by rowid; a
// find that needs a second window (its filter leaves out most of the first)
// must read the ties in the order the first did, missing none and
// returning none twice, in both directions.
func TestWalkedSortsWithTiesReadOnPastTheFirstWindow(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	coll := connect(t, s.URI()).Database("ties").Collection("jobs")
	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{
		{Key: "state", Value: 1}, {Key: "q", Value: 1}, {Key: "p", Value: -1}, {Key: "r", Value: 1},
	}})
	require.NoError(t, err)
	var docs []any
	for i := range 2000 {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("t-%04d", i)}, {Key: "state", Value: "available"},
			{Key: "q", Value: "a"}, {Key: "p", Value: int32(i % 2)}, {Key: "r", Value: int32(i % 3)}, {Key: "n", Value: int32(i % 10)}})
	}
	_, err = coll.InsertMany(ctx, docs)
	require.NoError(t, err)
	file := filepath.Join(s.Dir(), "ties.sqlite")
	waitForIndex(t, file, "__devdb_s_state,q,-p,r")
	waitForIndex(t, file, "__devdb_o_state,q,-p,r")

	filter := bson.D{{Key: "state", Value: "available"}, {Key: "q", Value: "a"}, {Key: "n", Value: int32(9)}}
	keys := func(so bson.D, limit int64) (ids map[string]bool, order []string) {
		o := options.Find().SetSort(so).SetLimit(limit)
		cur, err := coll.Find(ctx, filter, o)
		require.NoError(t, err)
		var got []bson.Raw
		require.NoError(t, cur.All(ctx, &got))
		ids = map[string]bool{}
		for _, d := range got {
			ids[d.Lookup("_id").StringValue()] = true
			order = append(order, d.Lookup("p").String()+"/"+d.Lookup("r").String())
		}
		require.Len(t, ids, len(got), "no document twice")
		return ids, order
	}
	for _, so := range []bson.D{
		{{Key: "p", Value: -1}, {Key: "r", Value: 1}},
		{{Key: "p", Value: 1}, {Key: "r", Value: -1}},
	} {
		all, want := keys(so, 10_000)
		require.Len(t, all, 200)
		for _, limit := range []int64{1, 150, 199, 200} {
			_, got := keys(so, limit)
			require.Equal(t, want[:limit], got, "sort %v limit %d", so, limit)
		}
	}
}
