package cli

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestCtlJSONEscapesDELAndC1: the --json outputs of list, show, stats,
// workers and workflow write DEL and the C1 controls another app stored
// (U+009B acts as ESC [ on a terminal) as \u escapes, and the values read
// back exact.
func TestCtlJSONEscapesDELAndC1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	odd := "q\x7f\u009b31m\u0085"
	now := time.Now().UTC()
	_, err := db.Collection(queue.DefaultCollection).InsertOne(ctx, bson.D{
		{Key: "_id", Value: "j1"}, {Key: "kind", Value: odd}, {Key: "queue", Value: odd}, {Key: "state", Value: "available"},
		{Key: "attempt", Value: 0}, {Key: "maxAttempts", Value: 1}, {Key: "runAt", Value: now}, {Key: "errors", Value: bson.A{}},
		{Key: "args", Value: bson.D{}}, {Key: "workflow", Value: "wf"},
	})
	require.NoError(t, err)
	_, err = db.Collection(queue.DefaultWorkersCollection).InsertOne(ctx, bson.D{
		{Key: "_id", Value: "w1"}, {Key: "host", Value: odd}, {Key: "lastSeen", Value: now}, {Key: "startedAt", Value: now}, {Key: "beatEveryMs", Value: 1000},
	})
	require.NoError(t, err)
	for _, args := range [][]string{
		{"list", "--json"}, {"show", "--json", "j1"}, {"stats", "--exact", "--json"}, {"workers", "--all", "--json"}, {"workflow", "--json", "wf"},
	} {
		out, errs, code := runCtl(t, uri, db, args...)
		require.Zero(t, code, "%v: %s", args, errs)
		requireSafe(t, out, false)
		require.True(t, json.Valid([]byte(strings.TrimSpace(out))), "%v: %s", args, out)
		require.Contains(t, out, `q\u007f\u009b31m\u0085`, args)
	}
}

// TestCtlJSONDatesOutOfRange: a date another app stored past year 9999
// or before year 0 (a worker's startedAt, a job's runAt)
// does not fail `workers --json` nor `stats --json`: it is written as
// RFC 3339 with the year as it is.
func TestCtlJSONDatesOutOfRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	future, past := bson.DateTime(math.MaxInt64), bson.DateTime(math.MinInt64)
	_, err := db.Collection(queue.DefaultWorkersCollection).InsertOne(ctx, bson.D{
		{Key: "_id", Value: "w1"}, {Key: "host", Value: "h"}, {Key: "lastSeen", Value: time.Now()}, {Key: "startedAt", Value: future}, {Key: "beatEveryMs", Value: 1000},
	})
	require.NoError(t, err)
	_, err = db.Collection(queue.DefaultCollection).InsertOne(ctx, bson.D{
		{Key: "_id", Value: "j1"}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "q"}, {Key: "state", Value: "available"},
		{Key: "attempt", Value: 0}, {Key: "maxAttempts", Value: 1}, {Key: "runAt", Value: past}, {Key: "createdAt", Value: past},
		{Key: "errors", Value: bson.A{}}, {Key: "args", Value: bson.D{}},
	})
	require.NoError(t, err)
	out, errs, code := runCtl(t, uri, db, "workers", "--all", "--json")
	require.Zero(t, code, errs)
	var w map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &w), out)
	require.Equal(t, time.UnixMilli(math.MaxInt64).UTC().Format(time.RFC3339Nano), w["startedAt"])
	out, errs, code = runCtl(t, uri, db, "stats", "--exact", "--json")
	require.Zero(t, code, errs)
	require.True(t, json.Valid([]byte(out)), out)
}
