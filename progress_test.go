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

// ProgressingArgs is the args of a job whose handler reports its progress.
type ProgressingArgs struct{}

// Kind implements jobs.Args.
func (ProgressingArgs) Kind() string { return "progressing" }

// A subscription that names EventJobProgress hears the progress a lease
// renewal wrote, the job running; one without kinds hears only the
// attempt that ended, whose job keeps its last progress.
func TestProgressEventsGoToThoseWhoAskForThem(t *testing.T) {
	t.Parallel()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{
		Logger: zaptest.NewLogger(t), Lease: time.Second, HeartbeatInterval: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	release := make(chan struct{})
	docket.MustAddHandler(c, func(ctx context.Context, _ *jobs.Job, _ ProgressingArgs) error {
		if err := jobs.Progress(ctx, 0.5, "halfway"); err != nil {
			return err
		}
		<-release
		return nil
	}, jobs.KindOptions{})
	progress, stopProgress := c.Subscribe(docket.EventJobProgress)
	defer stopProgress()
	all, stopAll := c.Subscribe()
	defer stopAll()

	ctx := context.Background()
	require.NoError(t, c.Start(ctx))
	defer func() { _ = c.Stop(ctx) }()
	res, err := c.Insert(ctx, ProgressingArgs{}, nil)
	require.NoError(t, err)
	select {
	case e := <-progress:
		require.Equal(t, docket.EventJobProgress, e.Kind)
		require.Equal(t, res.ID, e.Job.ID)
		require.Equal(t, jobs.StateRunning, e.Job.State)
		require.Equal(t, "halfway", e.Job.Progress.Message)
		require.Equal(t, 0.5, e.Job.Progress.Fraction)
	case <-time.After(20 * time.Second):
		t.Fatal("no progress event")
	}
	close(release)
	select {
	case e := <-all:
		require.Equal(t, docket.EventJobSucceeded, e.Kind, "a subscription without kinds got %s", e.Kind)
		require.Equal(t, "halfway", e.Job.Progress.Message, "the ended job keeps its last progress")
	case <-time.After(20 * time.Second):
		t.Fatal("no event for the ended attempt")
	}
}
