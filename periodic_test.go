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

// Periodic jobs take typed args, checked by NewClient as an insert's are
// (and by their Validate); Start refuses one whose kind has no handler.
func TestPeriodicJobsAreChecked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	newClient := func(p docket.PeriodicJob) (*docket.Client, error) {
		return docket.NewClient(db, docket.Config{Logger: zaptest.NewLogger(t), PeriodicJobs: []docket.PeriodicJob{p}})
	}
	for _, tt := range []struct {
		job  docket.PeriodicJob
		want string
	}{
		{docket.PeriodicJob{Name: "n", Schedule: "@every 1s"}, `periodic job 0 ("n"): args must not be nil`},
		{docket.PeriodicJob{Name: "n", Schedule: "@every 1s", Args: GreetArgs{}}, `args of kind "greet": name must not be empty`},
		{docket.PeriodicJob{Name: "n", Schedule: "every second", Args: GreetArgs{Name: "a"}}, `schedule "every second"`},
		{docket.PeriodicJob{Name: "", Schedule: "@every 1s", Args: GreetArgs{Name: "a"}}, "name must be 1 to 100 bytes"},
		{docket.PeriodicJob{Name: "n", Schedule: "@every 1s", Args: GreetArgs{Name: "a"}, Queue: "bad queue\x00"}, "queue"},
	} {
		_, err := newClient(tt.job)
		require.ErrorContains(t, err, tt.want, "%+v", tt.job)
	}

	c, err := newClient(docket.PeriodicJob{Name: "nightly", Schedule: "@daily", Args: ReportArgs{Day: "mon"}})
	require.NoError(t, err)
	docket.MustAddHandler(c, noop, jobs.KindOptions{})
	err = c.Start(ctx)
	require.ErrorContains(t, err, `periodic job "nightly": no handler registered for its kind "report"`)
	require.ErrorIs(t, c.Stop(ctx), docket.ErrNotStarted, "nothing started")
}

// Each tick's job takes its options as an insert does: the periodic job's
// own, then its args' InsertOpts(), then the handler's KindOptions.
func TestPeriodicJobTakesTheKindsOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{
		Logger: zaptest.NewLogger(t),
		Queues: []string{"reports"},
		PeriodicJobs: []docket.PeriodicJob{{
			Name: "nightly", Schedule: "@every 1s", Args: ReportArgs{Day: "mon"}, Priority: 8,
		}},
	})
	require.NoError(t, err)
	ran := make(chan *jobs.Job, 10)
	docket.MustAddHandler(c, func(_ context.Context, j *jobs.Job, a ReportArgs) error {
		require.Equal(t, "mon", a.Day)
		ran <- j
		return nil
	}, jobs.KindOptions{})
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()
	select {
	case j := <-ran:
		require.Equal(t, []any{"reports", 8, 4}, []any{j.Queue, j.Priority, j.MaxAttempts})
	case <-time.After(30 * time.Second):
		t.Fatal("no tick ran")
	}
}
