package docket_test

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
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
