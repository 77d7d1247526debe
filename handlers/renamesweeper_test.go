package handlers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/docketq/docket/configs"
	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap/zaptest"
)

var _ recovery.Task = (*handlers.RenameSweeper)(nil)

func TestRenameSweeperConfig(t *testing.T) {
	t.Parallel()
	c := handlers.RenameSweeperConfig{}.WithDefaults()
	require.Equal(t, handlers.DefaultRenameSweepSchedule, c.Schedule)
	require.Equal(t, handlers.DefaultRenameSweepThreshold, c.Threshold)
	require.Equal(t, handlers.DefaultRenameSweepBatch, c.Batch)
	require.NotNil(t, c.Logger)
	require.NoError(t, c.Validate())

	// From a configuration file, through the demo kinds' settings.
	path := filepath.Join(t.TempDir(), "docket.yaml")
	require.NoError(t, os.WriteFile(path, []byte("renameSweeper:\n  schedule: '@every 1m'\n  threshold: 2m\n  batch: 10\n"), 0o600))
	var app handlers.Config
	require.NoError(t, configs.LoadFileApp(path, &configs.Config{}, &app))
	fromYAML := app.RenameSweeper
	require.Equal(t, handlers.RenameSweeperConfig{Schedule: "@every 1m", Threshold: 2 * time.Minute, Batch: 10}, fromYAML)
	require.Equal(t, fromYAML.Schedule, fromYAML.WithDefaults().Schedule)
	require.Equal(t, fromYAML.Threshold, fromYAML.WithDefaults().Threshold)
	require.Equal(t, fromYAML.Batch, fromYAML.WithDefaults().Batch)

	for _, tc := range []struct {
		name string
		cfg  handlers.RenameSweeperConfig
		msg  string
	}{
		{"negative threshold", handlers.RenameSweeperConfig{Threshold: -time.Second}, "renameSweeper.threshold: -1s must be positive"},
		{"negative batch", handlers.RenameSweeperConfig{Batch: -1}, "renameSweeper.batch: -1 must be at least 1"},
		{"bad schedule", handlers.RenameSweeperConfig{Schedule: "now and then"}, `renameSweeper.schedule: "now and then" is not a cron schedule`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorContains(t, tc.cfg.WithDefaults().Validate(), tc.msg)
			_, err := handlers.NewRenameSweeper(nil, nil, tc.cfg)
			require.ErrorContains(t, err, tc.msg)
		})
	}
}

type renameSweepEnv struct {
	ctx      context.Context
	q        *queue.Client
	reg      *jobs.Registry
	db       *mongo.Database
	users    *mongo.Collection
	comments *mongo.Collection
}

func newRenameSweepEnv(t *testing.T) *renameSweepEnv {
	t.Helper()
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	// Only the unique-key index matters here. It is built here rather than
	// by q.EnsureIndexes, which hands the shared queue.Indexes to the
	// driver, and the driver writes to their options: a data race between
	// parallel tests.
	_, err = store.Of(q).Collection().Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "uniqueKey", Value: 1}},
		Options: options.Index().SetUnique(true).SetSparse(true),
	})
	require.NoError(t, err)
	require.NoError(t, handlers.Setup(ctx, db))
	reg := jobs.NewRegistry()
	require.NoError(t, handlers.Register(reg, handlers.Deps{DB: db, Queue: q, Logger: zaptest.NewLogger(t)}))
	return &renameSweepEnv{
		ctx:      ctx,
		q:        q,
		reg:      reg,
		db:       db,
		users:    db.Collection(handlers.UsersCollection),
		comments: db.Collection(handlers.CommentsCollection),
	}
}

// addUser inserts a user named name with two comments carrying
// commentName, syncing since syncing unless that is zero.
func (e *renameSweepEnv) addUser(t *testing.T, id, name, commentName string, syncing time.Time) {
	t.Helper()
	u := bson.D{{Key: "_id", Value: id}, {Key: "name", Value: name}, {Key: "friends", Value: bson.A{}}}
	if !syncing.IsZero() {
		u = append(u, bson.E{Key: "syncing", Value: syncing}, bson.E{Key: "renameJob", Value: "job-" + id})
	}
	_, err := e.users.InsertOne(e.ctx, u)
	require.NoError(t, err)
	for i := range 2 {
		_, err := e.comments.InsertOne(e.ctx, bson.D{
			{Key: "_id", Value: fmt.Sprintf("%s-c%d", id, i)},
			{Key: "uid", Value: id},
			{Key: "uname", Value: commentName},
			{Key: "text", Value: "hi"},
		})
		require.NoError(t, err)
	}
}

// requireUser checks the user's name, whether it is syncing, and the name
// both of its comments carry.
func (e *renameSweepEnv) requireUser(t *testing.T, id, name string, syncing bool, commentName string) {
	t.Helper()
	var u struct {
		Name    string     `bson:"name"`
		Syncing *time.Time `bson:"syncing"`
	}
	require.NoError(t, e.users.FindOne(e.ctx, bson.D{{Key: "_id", Value: id}}).Decode(&u))
	require.Equal(t, name, u.Name, "name of %s", id)
	require.Equal(t, syncing, u.Syncing != nil, "syncing flag of %s", id)
	cur, err := e.comments.Find(e.ctx, bson.D{{Key: "uid", Value: id}})
	require.NoError(t, err)
	var cs []struct {
		UName string `bson:"uname"`
	}
	require.NoError(t, cur.All(e.ctx, &cs))
	require.Len(t, cs, 2)
	for _, c := range cs {
		require.Equal(t, commentName, c.UName, "a comment of %s", id)
	}
}

func (e *renameSweepEnv) allJobs(t *testing.T) []jobs.Job {
	t.Helper()
	cur, err := store.Of(e.q).Collection().Find(e.ctx, bson.D{})
	require.NoError(t, err)
	var all []jobs.Job
	require.NoError(t, cur.All(e.ctx, &all))
	return all
}

// runAll claims and runs every runnable job, and returns how many ran.
func (e *renameSweepEnv) runAll(t *testing.T) int {
	t.Helper()
	n := 0
	for {
		j, err := store.Of(e.q).Claim(e.ctx, store.ClaimParams{
			Owner: "test", Queues: []string{jobs.DefaultQueue}, Kinds: e.reg.Kinds(), Lease: time.Minute,
		})
		require.NoError(t, err)
		if j == nil {
			return n
		}
		h, _, ok := e.reg.Lookup(j.Kind)
		require.True(t, ok)
		require.NoError(t, h.Work(e.ctx, j))
		require.NoError(t, store.Of(e.q).Complete(e.ctx, store.LeaseOf(j)))
		n++
	}
}

func TestRenameSweeperSyncsStaleRenames(t *testing.T) {
	e := newRenameSweepEnv(t)
	old := time.Now().Add(-10 * time.Minute)
	var stale []string
	for i := range 5 {
		id := fmt.Sprintf("s%d", i)
		stale = append(stale, id)
		e.addUser(t, id, "new-"+id, "old-"+id, old)
	}
	e.addUser(t, "fresh", "new-fresh", "old-fresh", time.Now())
	e.addUser(t, "synced", "synced", "synced", time.Time{})

	// A batch of 2 makes the pass read three pages.
	sw, err := handlers.NewRenameSweeper(e.db, e.q, handlers.RenameSweeperConfig{
		Threshold: time.Minute, Batch: 2, Logger: zaptest.NewLogger(t),
	})
	require.NoError(t, err)
	n, err := sw.RunOnce(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 5, n)

	var got []string
	for _, j := range e.allJobs(t) {
		require.Equal(t, handlers.RenameKind, j.Kind)
		args, err := jobs.DecodeArgs[handlers.RenameArgs](j.Args)
		require.NoError(t, err)
		require.True(t, args.Sync, "not a sync-only job: %+v", args)
		require.Equal(t, "rename-sync:"+args.UserID, j.UniqueKey)
		got = append(got, args.UserID)
	}
	slices.Sort(got)
	require.Equal(t, stale, got)

	// While the jobs are pending, a pass adds none.
	n, err = sw.RunOnce(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Len(t, e.allJobs(t), 5)

	require.Equal(t, 5, e.runAll(t))
	for _, id := range stale {
		e.requireUser(t, id, "new-"+id, false, "new-"+id)
	}
	e.requireUser(t, "fresh", "new-fresh", true, "old-fresh")
	e.requireUser(t, "synced", "synced", false, "synced")
	n, err = sw.RunOnce(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a pass enqueued jobs for users in sync")

	// Once a user's sync job has finished, a new stale rename (by a later
	// job) gets a new one.
	_, err = e.users.UpdateOne(e.ctx, bson.D{{Key: "_id", Value: "s0"}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "name", Value: "newer-s0"}, {Key: "syncing", Value: old}, {Key: "renameJob", Value: "job-s0-later"},
	}}})
	require.NoError(t, err)
	n, err = sw.RunOnce(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, e.runAll(t))
	e.requireUser(t, "s0", "newer-s0", false, "newer-s0")
}

func TestRenameSweeperTask(t *testing.T) {
	e := newRenameSweepEnv(t)
	e.addUser(t, "s0", "new", "old", time.Now().Add(-time.Hour))
	sw, err := handlers.NewRenameSweeper(e.db, e.q, handlers.RenameSweeperConfig{})
	require.NoError(t, err)
	require.Equal(t, handlers.DefaultRenameSweepSchedule, sw.Schedule())
	sw.Run()
	js := e.allJobs(t)
	require.Len(t, js, 1)
	require.Equal(t, handlers.RenameSyncUniqueKey("s0"), js[0].UniqueKey)
}

// TestRenameSweeperForeignUsers: users that other apps wrote in other
// shapes (an _id that is not a string, a name that is not a string, a
// syncing that is not a date) never stop a pass: the users of the right
// shape around them get their sync jobs, page after page.
func TestRenameSweeperForeignUsers(t *testing.T) {
	e := newRenameSweepEnv(t)
	old := time.Now().Add(-10 * time.Minute)
	_, err := e.users.InsertMany(e.ctx, []any{
		bson.D{{Key: "_id", Value: 7}, {Key: "name", Value: "seven"}, {Key: "syncing", Value: old}},
		bson.D{{Key: "_id", Value: bson.D{{Key: "k", Value: 1}}}, {Key: "name", Value: "doc"}, {Key: "syncing", Value: old}},
		bson.D{{Key: "_id", Value: "a-number-name"}, {Key: "name", Value: 42}, {Key: "syncing", Value: old}},
		bson.D{{Key: "_id", Value: "b-no-name"}, {Key: "syncing", Value: old}},
		bson.D{{Key: "_id", Value: "c-string-syncing"}, {Key: "name", Value: "c"}, {Key: "syncing", Value: "long ago"}},
	})
	require.NoError(t, err)
	var want []string
	for i := range 3 {
		id := fmt.Sprintf("s%d", i)
		want = append(want, id)
		e.addUser(t, id, "new-"+id, "old-"+id, old)
	}
	sw, err := handlers.NewRenameSweeper(e.db, e.q, handlers.RenameSweeperConfig{
		Threshold: time.Minute, Batch: 2, Logger: zaptest.NewLogger(t),
	})
	require.NoError(t, err)
	n, err := sw.RunOnce(e.ctx)
	require.NoError(t, err)
	require.Equal(t, len(want), n)
	var got []string
	for _, j := range e.allJobs(t) {
		args, err := jobs.DecodeArgs[handlers.RenameArgs](j.Args)
		require.NoError(t, err)
		got = append(got, args.UserID)
	}
	slices.Sort(got)
	require.Equal(t, want, got)
	require.Equal(t, len(want), e.runAll(t))
	for _, id := range want {
		e.requireUser(t, id, "new-"+id, false, "new-"+id)
	}
}
