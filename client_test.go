package docket_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/clientengine"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

func noop(context.Context, *jobs.Job, GreetArgs) error { return nil }

func TestClientLifecycleErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)

	c, err := docket.NewClient(db, docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.ErrorIs(t, c.Stop(ctx), docket.ErrNotStarted)
	require.ErrorContains(t, c.Start(ctx), "no handler registered")

	docket.MustAddHandler(c, noop, jobs.KindOptions{})
	require.ErrorContains(t, docket.AddHandler(c, noop, jobs.KindOptions{}), "already registered")
	require.Panics(t, func() { docket.MustAddHandler(c, noop, jobs.KindOptions{}) })
	require.ErrorContains(t, docket.AddHandler(c, noop, jobs.KindOptions{Timeout: -1}), "must not be negative")

	require.NoError(t, c.Start(ctx))
	require.ErrorContains(t, c.Start(ctx), "twice")
	require.ErrorContains(t, c.AddMaintenance(&countingTask{}), "after Start")
	require.NoError(t, c.Stop(ctx))
	require.NoError(t, c.Stop(ctx), "a second Stop does nothing more")
	require.ErrorContains(t, c.Start(ctx), "after Stop")

	_, err = docket.NewClient(nil, docket.Config{})
	require.ErrorContains(t, err, "db must not be nil")
	_, err = docket.NewClient(db, docket.Config{Concurrency: -1})
	require.ErrorContains(t, err, "Config.Concurrency: -1 must be at least 1")
	_, err = docket.NewClient(db, docket.Config{LeaderTTL: time.Second})
	require.ErrorContains(t, err, "Config.LeaderTTL: 1s must be at least 3s")
}

// A Start whose set-up fails starts nothing and may be called again.
func TestStartFailsWholeAndCanBeRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var calls atomic.Int32
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{
		Logger: zaptest.NewLogger(t),
		Setup: func(context.Context) error {
			if calls.Add(1) == 1 {
				return errors.New("app indexes: not yet")
			}
			return nil
		},
	})
	require.NoError(t, err)
	docket.MustAddHandler(c, noop, jobs.KindOptions{})
	require.ErrorContains(t, c.Start(ctx), "app indexes: not yet")
	require.ErrorIs(t, c.Stop(ctx), docket.ErrNotStarted, "nothing started")
	require.NoError(t, c.Start(ctx))
	require.NoError(t, c.Stop(ctx))
	require.EqualValues(t, 2, calls.Load())
}

func TestInsertTakesTheArgsDefaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{})
	require.NoError(t, err)

	plain, err := c.Insert(ctx, ReportArgs{Day: "a"}, nil)
	require.NoError(t, err)
	own, err := c.Insert(ctx, ReportArgs{Day: "b"}, &docket.InsertOpts{MaxAttempts: 9, Queue: "urgent", Priority: 1})
	require.NoError(t, err)

	j, err := c.JobGet(ctx, plain.JobID())
	require.NoError(t, err)
	require.Equal(t, "report", j.Kind)
	require.Equal(t, 4, j.MaxAttempts)
	require.Equal(t, "reports", j.Queue)
	require.Equal(t, 3, j.Priority)
	j, err = c.JobGet(ctx, own.JobID())
	require.NoError(t, err)
	require.Equal(t, 9, j.MaxAttempts)
	require.Equal(t, "urgent", j.Queue)
	require.Equal(t, 1, j.Priority)

	_, err = c.InsertMany(ctx, []docket.InsertManyParams{{Args: GreetArgs{Name: "c"}}, {Args: nil}})
	require.ErrorContains(t, err, "args")
	n, err := store.Of(clientengine.Part[*queue.Client](c)).Collection().CountDocuments(ctx, map[string]any{})
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "an invalid InsertMany writes nothing")
}

// countingTask is a maintenance pass that counts its runs.
type countingTask struct{ runs atomic.Int32 }

func (t *countingTask) Run()             { t.runs.Add(1) }
func (t *countingTask) Schedule() string { return "@every 1s" }

// Two clients on one database: only the elected one runs the maintenance
// its kinds contribute, and stopping it hands the maintenance over at once.
func TestOnlyTheLeaderRunsMaintenanceAndStopHandsItOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	var clients [2]*docket.Client
	var tasks [2]*countingTask
	for i := range clients {
		c, err := docket.NewClient(db, docket.Config{Logger: zaptest.NewLogger(t), LeaderTTL: 3 * time.Second})
		require.NoError(t, err)
		docket.MustAddHandler(c, noop, jobs.KindOptions{})
		tasks[i] = &countingTask{}
		require.NoError(t, c.AddMaintenance(tasks[i]))
		require.NoError(t, c.Start(ctx))
		clients[i] = c
	}
	defer func() {
		for _, c := range clients {
			_ = c.Stop(ctx)
		}
	}()

	require.Eventually(t, func() bool { return tasks[0].runs.Load()+tasks[1].runs.Load() >= 3 }, 30*time.Second, 50*time.Millisecond)
	leader, follower := 0, 1
	if tasks[1].runs.Load() > 0 {
		leader, follower = 1, 0
	}
	require.Zero(t, tasks[follower].runs.Load(), "both clients ran the maintenance")

	require.NoError(t, clients[leader].Stop(ctx))
	stoppedAt := time.Now()
	require.Eventually(t, func() bool { return tasks[follower].runs.Load() > 0 }, 10*time.Second, 50*time.Millisecond)
	t.Logf("the other client ran the maintenance %v after the leader stopped", time.Since(stoppedAt).Round(time.Millisecond))
	before := tasks[leader].runs.Load()
	time.Sleep(1500 * time.Millisecond)
	require.Equal(t, before, tasks[leader].runs.Load(), "a stopped client ran maintenance")
}
