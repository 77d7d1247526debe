package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// lacksFeatures reports whether the test server is FerretDB v1 (devdb),
// which reports itself in buildInfo: the server whose missing features
// server.go lists. Only the tests ask which product it is; docket detects
// each feature by trying it.
func lacksFeatures(t *testing.T, b bundle) bool {
	t.Helper()
	raw, err := b.db.RunCommand(b.ctx, bson.D{{Key: "buildInfo", Value: 1}}).Raw()
	require.NoError(t, err)
	_, err = raw.LookupErr("ferretdbVersion")
	return err == nil
}

// want is the state detection must reach on the test server.
func want(lacking bool) string {
	if lacking {
		return "lacking"
	}
	return "held"
}

// count is how many of cmds are cmd.
func count(cmds []string, cmd string) int {
	n := 0
	for _, c := range cmds {
		if c == cmd {
			n++
		}
	}
	return n
}

// TestServerDetectsEachFeature: a fresh client knows nothing of its
// server; the first command that uses each feature finds out, as the
// server behaves (devdb lacks both, MongoDB holds them), and gives
// the right answer either way.
func TestServerDetectsEachFeature(t *testing.T) {
	b := setup(t)
	lacking := lacksFeatures(t, b)
	q, _ := monitoredQueue(t, b.db)
	srv := store.Of(q).Server()
	for _, f := range []*store.Feature{&srv.GroupMin, &srv.TypeAliases} {
		require.Equal(t, "unknown", f.State())
	}
	ids := enqueueN(t, b, 3)

	_, err := store.Of(q).Claim(b.ctx, claimAll)
	require.NoError(t, err)

	stats, err := q.Stats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, want(lacking), srv.GroupMin.State())
	require.Len(t, stats, 1)
	require.Equal(t, int64(2), stats[0].Counts["k"][jobs.StateAvailable])
	require.Equal(t, int64(1), stats[0].Counts["k"][jobs.StateRunning])
	require.False(t, stats[0].OldestAvailable.IsZero())

	page, more, err := q.List(b.ctx, queue.JobFilter{}, ids[0], 10)
	require.NoError(t, err)
	require.False(t, more)
	require.Len(t, page, 2)
	require.Equal(t, want(lacking), srv.TypeAliases.State())
}

// TestServerFeatureForcedLacking: each fallback, forced, gives the same
// answers as the feature, with no command refused first: on MongoDB this
// is the only run of the fallbacks.
func TestServerFeatureForcedLacking(t *testing.T) {
	b := setup(t)
	q, cmds := monitoredQueue(t, b.db)
	srv := store.Of(q).Server()
	srv.GroupMin.Set(false)
	srv.TypeAliases.Set(false)
	ids := enqueueN(t, b, 3)

	_, err := store.Of(q).Claim(b.ctx, claimAll)
	require.NoError(t, err)

	before := count(cmds(), "aggregate jobs")
	stats, err := q.Stats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, before, count(cmds(), "aggregate jobs"), "no $group tried")
	require.Len(t, stats, 1)
	require.Equal(t, int64(2), stats[0].Counts["k"][jobs.StateAvailable])
	require.Equal(t, int64(1), stats[0].Counts["k"][jobs.StateRunning])
	require.False(t, stats[0].OldestAvailable.IsZero())
	_, finished, err := q.Overview(b.ctx, time.Time{}, jobs.StateSucceeded)
	require.NoError(t, err)
	require.Empty(t, finished[jobs.StateSucceeded])

	before = count(cmds(), "find jobs")
	page, _, err := q.List(b.ctx, queue.JobFilter{}, ids[0], 10)
	require.NoError(t, err)
	require.Len(t, page, 2)
	require.Equal(t, 1, count(cmds(), "find jobs")-before, "no $type alias refused")

	for _, f := range []*store.Feature{&srv.GroupMin, &srv.TypeAliases} {
		require.Equal(t, "lacking", f.State())
	}
}

// TestServerFeatureForcedHeld: a client that takes a feature for held
// (what it finds on MongoDB) on a server that lacks it is refused once,
// learns, and answers right: the path a client takes on a server it has
// not met yet.
func TestServerFeatureForcedHeld(t *testing.T) {
	b := setup(t)
	if !lacksFeatures(t, b) {
		t.Skip("the server holds every feature: TestServerDetectsEachFeature covers it")
	}
	srv := store.Of(b.q).Server()
	srv.GroupMin.Set(true)
	srv.TypeAliases.Set(true)
	ids := enqueueN(t, b, 2)

	b.claim(t, claimAll)
	stats, err := b.q.Stats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), stats[0].Counts["k"][jobs.StateAvailable])
	page, _, err := b.q.List(b.ctx, queue.JobFilter{}, ids[0], 10)
	require.NoError(t, err)
	require.Len(t, page, 1)
	for _, f := range []*store.Feature{&srv.GroupMin, &srv.TypeAliases} {
		require.Equal(t, "lacking", f.State())
	}
}

// TestFeatureDetect: what each answer teaches.
func TestFeatureDetect(t *testing.T) {
	notImplemented := mongo.CommandError{Code: 238, Name: "NotImplemented", Message: "$min is not implemented"}
	other := mongo.CommandError{Code: 11600, Name: "InterruptedAtShutdown"}
	for _, tc := range []struct {
		name    string
		err     error
		refused bool
		state   string
	}{
		{"answered", nil, false, "held"},
		{"no document", mongo.ErrNoDocuments, false, "held"},
		{"decoded with the error", fmt.Errorf("heartbeat: %w", mongo.ErrNoDocuments), false, "held"},
		{"refused", notImplemented, true, "lacking"},
		{"another server error", other, false, "held"},
		{"not answered", errors.New("connection reset"), false, "unknown"},
		{"cancelled", context.Canceled, false, "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &store.Of(setupNoDB(t)).Server().GroupMin
			require.Equal(t, tc.refused, f.Detect(tc.err))
			require.Equal(t, tc.state, f.State())
		})
	}
	t.Run("lacking stays lacking", func(t *testing.T) {
		f := &store.Of(setupNoDB(t)).Server().GroupMin
		f.Set(false)
		require.False(t, f.Detect(nil))
		require.True(t, f.Lacking())
	})
}

// setupNoDB is a client on a database it never reaches.
func setupNoDB(t *testing.T) *queue.Client {
	t.Helper()
	c, err := mongo.Connect()
	require.NoError(t, err)
	q, err := queue.New(c.Database("unused"), queue.Config{})
	require.NoError(t, err)
	return q
}

// TestDuplicateKeyForms: the duplicate-key errors of both forms are read
// alike, and so is what the test server answers for an insert and an
// update that break a unique index.
func TestDuplicateKeyForms(t *testing.T) {
	e11000 := mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 11000,
		Message: `E11000 duplicate key error collection: db.jobs index: capacitySlot dup key: { capacitySlot: "q/0" }`}}}
	sqlite := mongo.CommandError{Code: 1, Name: "InternalError",
		Message: "UNIQUE constraint failed: index 'jobs_5c1a9f_capacitySlot'"}
	unnamed := mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 11000,
		Message: "E11000 duplicate key error collection: db.jobs"}}}
	for _, tc := range []struct {
		name      string
		err       error
		dup, cmd  bool
		index     string
		isCapSlot bool
	}{
		{"E11000", e11000, true, false, "capacitySlot", true},
		{"SQLite", sqlite, true, true, "jobs_5c1a9f_capacitySlot", true},
		{"unnamed", unnamed, true, false, "", false},
		{"wrapped", fmt.Errorf("queue: %w", sqlite), true, true, "jobs_5c1a9f_capacitySlot", true},
		{"other", errors.New("connection reset"), false, false, "", false},
		{"nil", nil, false, false, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.dup, store.IsDuplicateKey(tc.err))
			require.Equal(t, tc.cmd, store.DuplicateCommand(tc.err))
			require.Equal(t, tc.index, store.DuplicateIndex(tc.err))
			require.Equal(t, tc.isCapSlot, store.DuplicateIndexIs(tc.err, "capacitySlot"))
			require.False(t, store.DuplicateIndexIs(tc.err, "Slot"))
		})
	}

	b := setup(t)
	coll := b.db.Collection("dups")
	_, err := coll.Indexes().CreateOne(b.ctx, mongo.IndexModel{Keys: bson.D{{Key: "k", Value: 1}},
		Options: options.Index().SetName("kUnique").SetUnique(true).SetSparse(true)})
	require.NoError(t, err)
	_, err = coll.InsertMany(b.ctx, []any{bson.D{{Key: "_id", Value: 1}, {Key: "k", Value: "a"}}, bson.D{{Key: "_id", Value: 2}}})
	require.NoError(t, err)
	_, err = coll.InsertOne(b.ctx, bson.D{{Key: "_id", Value: 3}, {Key: "k", Value: "a"}})
	require.True(t, store.IsDuplicateKey(err), "insert: %v", err)
	_, err = coll.UpdateOne(b.ctx, bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "$set", Value: bson.D{{Key: "k", Value: "a"}}}})
	require.True(t, store.IsDuplicateKey(err), "update: %v", err)
	require.True(t, store.DuplicateIndexIs(err, "kUnique"), "the update's duplicate names its index: %v", err)
}
