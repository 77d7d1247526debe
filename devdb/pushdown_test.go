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

// devdb's FerretDB (built with _overlay, as make build and the tests build
// it) pushes down to SQLite an _id equality or $in, and string equalities,
// wherever they stand in a filter, and the indexer indexes the fields a
// collection's indexes start with, so that a fenced write by _id and a
// claim's {state: "available", ...} read only the rows they may match.
// Results are exactly MongoDB's: arrays holding the string, other types,
// missing fields and strings with characters JSON escapes all still match
// or not as they should.
func TestFiltersArePushedDown(t *testing.T) {
	s := startServer(t)
	mc := connect(t, s.URI())
	ctx := context.Background()
	db := mc.Database("pd")
	coll := db.Collection("jobs")

	oid := bson.NewObjectID()
	_, err := coll.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "a"}, {Key: "state", Value: "available"}, {Key: "n", Value: 1}},
		bson.D{{Key: "_id", Value: "b"}, {Key: "state", Value: bson.A{"x", "available"}}},
		bson.D{{Key: "_id", Value: "c"}, {Key: "state", Value: "running"}},
		bson.D{{Key: "_id", Value: "d"}},
		bson.D{{Key: "_id", Value: "e"}, {Key: "state", Value: `avail"able`}},
		bson.D{{Key: "_id", Value: 7}, {Key: "state", Value: "available"}},
		bson.D{{Key: "_id", Value: oid}, {Key: "state", Value: "available"}},
		bson.D{{Key: "_id", Value: "h<&>"}, {Key: "state", Value: "available"}},
		bson.D{{Key: "_id", Value: "i"}, {Key: "state", Value: bson.D{{Key: "v", Value: "available"}}}},
		bson.D{{Key: "_id", Value: "j"}, {Key: "state", Value: "availablé"}},
		bson.D{{Key: "_id", Value: "k"}, {Key: "state", Value: nil}},
		bson.D{{Key: "_id", Value: "l"}, {Key: "state", Value: "available"}, {Key: "sub", Value: bson.D{{Key: "x", Value: "y"}}}},
		bson.D{{Key: "_id", Value: "bad\xff"}, {Key: "state", Value: "dead"}},
		bson.D{{Key: "_id", Value: "m"}, {Key: "state", Value: "dead"}, {Key: "note", Value: "\x00\x1b[2J\xc3"}},
	})
	require.NoError(t, err)
	_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "state", Value: 1}, {Key: "n", Value: 1}}})
	require.NoError(t, err)

	for _, c := range []struct {
		filter   bson.D
		want     []string
		pushdown bool
	}{
		{bson.D{{Key: "state", Value: "available"}}, []string{"7", "a", "b", "h<&>", "l", oid.Hex()}, true},
		{bson.D{{Key: "state", Value: "available"}, {Key: "n", Value: 1}}, []string{"a"}, true},
		{bson.D{{Key: "_id", Value: "a"}, {Key: "state", Value: "available"}}, []string{"a"}, true},
		{bson.D{{Key: "state", Value: "running"}, {Key: "_id", Value: "a"}}, nil, true},
		{bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"a", "c", "zz"}}}}, {Key: "state", Value: "running"}}, []string{"c"}, true},
		{bson.D{{Key: "_id", Value: oid}, {Key: "state", Value: "available"}}, []string{oid.Hex()}, true},
		{bson.D{{Key: "_id", Value: "a"}}, []string{"a"}, true},
		// $in of strings: equal to one, or an array holding one.
		{bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"available", "dead"}}}}}, []string{"7", "a", "b", "bad�", "h<&>", "l", "m", oid.Hex()}, true},
		{bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"x"}}}}}, []string{"b"}, true},
		{bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"running", "none"}}}}, {Key: "n", Value: nil}}, []string{"c"}, true},
		// Not pushed down, still right.
		{bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"running", nil}}}}}, []string{"c", "d", "k"}, false},
		{bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"availablé", `avail"able`}}}}}, []string{"e", "j"}, false},
		{bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"running"}}, {Key: "$ne", Value: "x"}}}}, []string{"c"}, false},
		{bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{}}}}}, nil, false},
		{bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"a", 7}}}}}, []string{"7", "a"}, false},
		{bson.D{{Key: "_id", Value: "h<&>"}}, []string{"h<&>"}, false},
		{bson.D{{Key: "state", Value: `avail"able`}}, []string{"e"}, false},
		{bson.D{{Key: "state", Value: "availablé"}}, []string{"j"}, false},
		{bson.D{{Key: "sub.x", Value: "y"}}, []string{"l"}, false},
		{bson.D{{Key: "state", Value: nil}}, []string{"d", "k"}, false},
		{bson.D{{Key: "_id", Value: 7}}, []string{"7"}, false},
		{bson.D{{Key: "state", Value: "dead"}}, []string{"bad\ufffd", "m"}, true},
		{bson.D{{Key: "_id", Value: "bad\ufffd"}, {Key: "state", Value: "dead"}}, []string{"bad\ufffd"}, true},
	} {
		name := fmt.Sprint(c.filter)
		cur, err := coll.Find(ctx, c.filter)
		require.NoError(t, err, name)
		var docs []bson.Raw
		require.NoError(t, cur.All(ctx, &docs), name)
		var got []string
		for _, d := range docs {
			got = append(got, idString(d.Lookup("_id")))
		}
		slices.Sort(got)
		slices.Sort(c.want)
		require.Equal(t, c.want, got, name)

		n, err := coll.CountDocuments(ctx, c.filter)
		require.NoError(t, err, name)
		require.EqualValues(t, len(c.want), n, name)

		var explain bson.M
		require.NoError(t, db.RunCommand(ctx, bson.D{{Key: "explain", Value: bson.D{{Key: "find", Value: "jobs"}, {Key: "filter", Value: c.filter}}}}).Decode(&explain), name)
		require.Equal(t, c.pushdown, explain["filterPushdown"], "%s: pushed down", name)
	}

	// A string that is not UTF-8 is stored with U+FFFD in place of the bad
	// bytes (as FerretDB stores it), and found and updated by that.
	res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "bad\ufffd"}, {Key: "state", Value: "dead"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "available"}}}})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.ModifiedCount)
	var back bson.M
	require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: "bad\ufffd"}}).Decode(&back))
	require.Equal(t, "available", back["state"])

	// Writes: a fenced update matches only what its whole filter matches.
	res, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "state", Value: "running"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "w", Value: 1}}}})
	require.NoError(t, err)
	require.EqualValues(t, 0, res.MatchedCount)
	res, err = coll.UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"a", "b", "c"}}}}, {Key: "state", Value: "available"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "w", Value: 2}}}})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.MatchedCount) // a, and b's array
	var claimed bson.M
	require.NoError(t, coll.FindOneAndUpdate(ctx, bson.D{{Key: "state", Value: "available"}, {Key: "w", Value: nil}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "running"}}}},
		options.FindOneAndUpdate().SetSort(bson.D{{Key: "_id", Value: -1}})).Decode(&claimed))
	require.Equal(t, oid, claimed["_id"]) // an ObjectID sorts after every string
	del, err := coll.DeleteMany(ctx, bson.D{{Key: "state", Value: "running"}, {Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"c", "l", "a"}}}}})
	require.NoError(t, err)
	require.EqualValues(t, 1, del.DeletedCount) // c; l is available, a too

	// The state lookup is indexed, as the collection's index starts with
	// state: SQLite's plan for the pushed-down equality uses it. (Asked on a
	// connection of our own: FerretDB's pooled connections re-read the
	// schema when they next run a query, not for an EXPLAIN.)
	plan := waitForPlan(t, filepath.Join(s.Dir(), "pd.sqlite"), "__devdb_f_state",
		`SELECT _ferretdb_sjson FROM %s WHERE (_ferretdb_sjson->'$.state' = ? OR (_ferretdb_sjson->'$.state' >= '[' AND _ferretdb_sjson->'$.state' < '\'))`, `"available"`)
	require.Contains(t, plan, "__devdb_f_state")
}

// waitForPlan waits until SQLite's plan for query (%s: the one collection
// table of file) names want, and returns the last plan it read.
func waitForPlan(t *testing.T, file, want, query string, args ...any) string {
	t.Helper()
	db := openReadOnly(t, file)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var table string
		require.NoError(t, db.QueryRow(`SELECT table_name FROM _ferretdb_collections`).Scan(&table))
		rows, err := db.Query(`EXPLAIN QUERY PLAN `+fmt.Sprintf(query, quoteIdent(table)), args...)
		require.NoError(t, err)
		var plan strings.Builder
		for rows.Next() {
			var id, parent, notused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
			plan.WriteString(detail + "\n")
		}
		require.NoError(t, rows.Close())
		if strings.Contains(plan.String(), want) || time.Now().After(deadline) {
			return plan.String()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func idString(v bson.RawValue) string {
	if s, ok := v.StringValueOK(); ok {
		return s
	}
	if o, ok := v.ObjectIDOK(); ok {
		return o.Hex()
	}
	if n, ok := v.AsInt64OK(); ok {
		return fmt.Sprint(n)
	}
	return v.String()
}

// An update command of many statements (a bulkWrite of 150 updates) ends:
// FerretDB kept every statement's query open until the command ended, one
// pool connection each, and the 100th statement waited forever for one
// (with the front's lock held: the whole server hung).
func TestBulkWriteOfManyUpdatesEnds(t *testing.T) {
	s := startServer(t)
	mc := connect(t, s.URI())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	coll := mc.Database("bulk").Collection("jobs")
	const n = 150
	docs := make([]any, n)
	models := make([]mongo.WriteModel, n)
	for i := range n {
		id := fmt.Sprintf("j%03d", i)
		docs[i] = bson.D{{Key: "_id", Value: id}, {Key: "state", Value: "available"}}
		models[i] = mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: id}, {Key: "state", Value: "available"}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "running"}}}})
	}
	_, err := coll.InsertMany(ctx, docs)
	require.NoError(t, err)
	res, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	require.NoError(t, err)
	require.EqualValues(t, n, res.ModifiedCount)
	left, err := coll.CountDocuments(ctx, bson.D{{Key: "state", Value: "available"}})
	require.NoError(t, err)
	require.Zero(t, left)
}
