package docket_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// blockingClient is a started client whose greet handler signals started
// and then runs until its context ends.
func blockingClient(t *testing.T, cfg docket.Config) (*docket.Client, chan struct{}) {
	t.Helper()
	cfg.Logger = zaptest.NewLogger(t)
	c, err := docket.NewClient(testdb.NewDB(t), cfg)
	require.NoError(t, err)
	started := make(chan struct{}, 10)
	docket.MustAddHandler(c, func(ctx context.Context, _ *jobs.Job, _ GreetArgs) error {
		started <- struct{}{}
		<-ctx.Done()
		return context.Cause(ctx)
	}, jobs.KindOptions{})
	return c, started
}

// A Stop whose wait ends before the running jobs finish says so, and how
// many it cancelled; one that did not have to cancel returns nil.
func TestStopSaysItCancelledRunningJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, started := blockingClient(t, docket.Config{Concurrency: 4})
	require.NoError(t, c.Start(ctx))
	for _, name := range []string{"a", "b"} {
		_, err := c.Insert(ctx, GreetArgs{Name: name}, nil)
		require.NoError(t, err)
	}
	<-started
	<-started

	stopCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err := c.Stop(stopCtx)
	require.ErrorIs(t, err, docket.ErrJobsCancelled)
	var cut *docket.JobsCancelledError
	require.ErrorAs(t, err, &cut)
	require.Equal(t, 2, cut.Count)
	require.ErrorContains(t, err, "cancelled 2 running job(s)")
	require.NoError(t, c.Stop(ctx), "a second Stop does nothing more")

	idle, _ := blockingClient(t, docket.Config{})
	require.NoError(t, idle.Start(ctx))
	require.NoError(t, idle.Stop(ctx), "no job ran: nothing was cancelled")

	asked, started := blockingClient(t, docket.Config{})
	require.NoError(t, asked.Start(ctx))
	_, err = asked.Insert(ctx, GreetArgs{Name: "c"}, nil)
	require.NoError(t, err)
	<-started
	require.NoError(t, asked.StopAndCancel(ctx), "StopAndCancel was asked to cancel")
}

// Run stops gracefully when its context ends, and on SIGTERM; the stop's
// wait is the shutdown timeout's, not the ended context's.
func TestRunStopsOnContextAndSignal(t *testing.T) {
	t.Parallel()
	c, started := blockingClient(t, docket.Config{ShutdownTimeout: 300 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	require.Eventually(t, func() bool {
		_, err := c.Insert(context.Background(), GreetArgs{Name: "a"}, nil)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond)
	<-started
	cancel()
	err := <-ran
	var cut *docket.JobsCancelledError
	require.ErrorAs(t, err, &cut, "the handler outlived the shutdown timeout")
	require.Equal(t, 1, cut.Count)

	c2, err := docket.NewClient(testdb.NewDB(t), docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	worked := make(chan struct{})
	docket.MustAddHandler(c2, func(context.Context, *jobs.Job, GreetArgs) error { close(worked); return nil }, jobs.KindOptions{})
	go func() { ran <- c2.Run(context.Background()) }()
	_, err = c2.Insert(context.Background(), GreetArgs{Name: "b"}, nil)
	require.NoError(t, err)
	<-worked // Run has started, so its signal handler is in place
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGTERM))
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after SIGTERM")
	}
	require.False(t, errors.Is(c2.Stop(context.Background()), docket.ErrNotStarted), "Run started the client")
}
