package docket_test

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap/zaptest"
)

// WaitIdle, in a client that is not started, waits for the jobs another
// client runs, and is not held up by jobs it leaves out or that wait for a
// later time.
func TestWaitIdle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	waiter, err := docket.NewClient(db, docket.Config{})
	require.NoError(t, err)
	waitFor := func(p docket.WaitParams, d time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return waiter.WaitIdle(ctx, p)
	}
	require.NoError(t, waitFor(docket.WaitParams{}, time.Second), "an empty collection is idle")

	// Reports go to a queue nobody serves: they stay available.
	_, err = waiter.Insert(ctx, ReportArgs{Day: "mon"}, &docket.InsertOpts{ID: "periodic:nightly:1"})
	require.NoError(t, err)
	_, err = waiter.Insert(ctx, ReportArgs{Day: "tue"}, &docket.InsertOpts{Delay: time.Hour})
	require.NoError(t, err)
	require.ErrorIs(t, waitFor(docket.WaitParams{Kinds: []string{"report"}}, 300*time.Millisecond), context.DeadlineExceeded)
	require.ErrorIs(t, waitFor(docket.WaitParams{Queues: []string{"reports"}}, 300*time.Millisecond), context.DeadlineExceeded)
	require.NoError(t, waitFor(docket.WaitParams{Kinds: []string{"report"}, IgnorePeriodic: true}, time.Second),
		"a periodic job's tick is left out, and a delayed job is not runnable now")
	require.NoError(t, waitFor(docket.WaitParams{Queues: []string{"default"}}, time.Second))

	runner, err := docket.NewClient(db, docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	started, release := make(chan struct{}), make(chan struct{})
	docket.MustAddHandler(runner, func(ctx context.Context, _ *jobs.Job, _ GreetArgs) error {
		close(started)
		<-release
		return nil
	}, jobs.KindOptions{})
	require.NoError(t, runner.Start(ctx))
	defer func() { require.NoError(t, runner.Stop(ctx)) }()
	_, err = waiter.Insert(ctx, GreetArgs{Name: "a"}, nil)
	require.NoError(t, err)
	<-started

	idle := make(chan error, 1)
	go func() { idle <- waitFor(docket.WaitParams{Queues: []string{"default"}}, 30*time.Second) }()
	select {
	case err := <-idle:
		t.Fatalf("WaitIdle returned %v while a job ran", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-idle)
	require.ErrorIs(t, waitFor(docket.WaitParams{}, 200*time.Millisecond), context.DeadlineExceeded, "the reports are still available")
	require.ErrorContains(t, waiter.WaitIdle(ctx, docket.WaitParams{PollInterval: -1}), "poll interval")
}

// WaitIdle waits for the blocked jobs that can still move: one whose
// parent finished and that the worker which finished it did not tell
// (settled by the leader's pass: run, or cancelled after a dead parent),
// one whose parent of a kind the params leave out runs; not for one whose
// parent waits for a later time.
func TestWaitIdleWaitsForBlockedJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	waiter, err := docket.NewClient(db, docket.Config{})
	require.NoError(t, err)
	waitFor := func(p docket.WaitParams, d time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return waiter.WaitIdle(ctx, p)
	}
	insert := func(args jobs.Args, id string, opts docket.InsertOpts) {
		t.Helper()
		opts.ID = id
		_, err := waiter.Insert(ctx, args, &opts)
		require.NoError(t, err)
	}
	// Ended by a worker that stopped right after its finishing write.
	finish := func(id string, s jobs.State) {
		t.Helper()
		now := time.Now()
		res, err := db.Collection(docket.DefaultCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{
			{Key: "$set", Value: bson.D{{Key: "state", Value: s}, {Key: "finishedAt", Value: now}, {Key: "updatedAt", Value: now}}},
			{Key: "$rename", Value: bson.D{{Key: "dependents", Value: "dependentsDue"}}},
		})
		require.NoError(t, err)
		require.EqualValues(t, 1, res.ModifiedCount)
	}

	insert(ReportArgs{Day: "mon"}, "later", docket.InsertOpts{Delay: time.Hour})
	insert(GreetArgs{Name: "after-later"}, "after-later", docket.InsertOpts{After: []string{"later"}})
	// Written by another app: nothing moves them.
	_, err = db.Collection(docket.DefaultCollection).InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "foreign-empty"}, {Key: "kind", Value: "greet"}, {Key: "state", Value: "blocked"},
			{Key: "waitingOn", Value: bson.A{}}, {Key: "after", Value: bson.A{"gone", 7}}},
		bson.D{{Key: "_id", Value: "foreign-odd"}, {Key: "kind", Value: "greet"}, {Key: "state", Value: "blocked"},
			{Key: "waitingOn", Value: "later"}, {Key: "after", Value: bson.A{"later"}}, {Key: "linking", Value: "yes"}},
	})
	require.NoError(t, err)
	require.NoError(t, waitFor(docket.WaitParams{}, time.Second), "nothing can run before an hour")

	insert(GreetArgs{Name: "p"}, "p", docket.InsertOpts{})
	insert(GreetArgs{Name: "d"}, "d", docket.InsertOpts{After: []string{"p"}})
	finish("p", jobs.StateSucceeded)
	insert(ReportArgs{Day: "tue"}, "bad", docket.InsertOpts{})
	insert(GreetArgs{Name: "orphan"}, "orphan", docket.InsertOpts{After: []string{"bad"}})
	finish("bad", jobs.StateDead)
	require.ErrorIs(t, waitFor(docket.WaitParams{}, 300*time.Millisecond), context.DeadlineExceeded)
	require.ErrorIs(t, waitFor(docket.WaitParams{Kinds: []string{"greet"}}, 300*time.Millisecond), context.DeadlineExceeded)
	require.NoError(t, waitFor(docket.WaitParams{Kinds: []string{"report"}}, time.Second))

	// A report runs; its dependent greet waits for it.
	insert(ReportArgs{Day: "wed"}, "r", docket.InsertOpts{})
	insert(GreetArgs{Name: "after-r"}, "after-r", docket.InsertOpts{After: []string{"r"}})
	runner, err := docket.NewClient(db, docket.Config{
		Logger: zaptest.NewLogger(t), Queues: []string{"default", "reports"}, ReapInterval: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	started, release := make(chan struct{}), make(chan struct{})
	docket.MustAddHandler(runner, func(ctx context.Context, j *jobs.Job, _ GreetArgs) error { return nil }, jobs.KindOptions{})
	docket.MustAddHandler(runner, func(ctx context.Context, j *jobs.Job, _ ReportArgs) error {
		close(started)
		<-release
		return nil
	}, jobs.KindOptions{})
	require.NoError(t, runner.Start(ctx))
	defer func() { require.NoError(t, runner.Stop(ctx)) }()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the report did not start")
	}
	idle := make(chan error, 1)
	go func() { idle <- waitFor(docket.WaitParams{Kinds: []string{"greet"}}, 30*time.Second) }()
	select {
	case err := <-idle:
		t.Fatalf("WaitIdle returned %v while a greet waited for a running report", err)
	case <-time.After(500 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-idle)
	for id, s := range map[string]jobs.State{
		"d": jobs.StateSucceeded, "orphan": jobs.StateCancelled, "after-r": jobs.StateSucceeded, "after-later": jobs.StateBlocked,
	} {
		j, err := waiter.JobGet(ctx, docket.StringJobID(id))
		require.NoError(t, err)
		require.Equal(t, s, j.State, id)
	}
}
