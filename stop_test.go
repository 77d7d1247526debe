package docket_test

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/worker"
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
	c, started := blockingClient(t, docket.Config{Worker: worker.Config{Concurrency: 4}})
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
