//lint:file-ignore SA1019 tests how the deprecated insert defaults of KindOptions are refused

package docket_test

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
)

// The same insert gives the same job in every process: a client with the
// kind's handler and one without (a producer) insert it into the same
// queue with the same priority and attempts, those the args type declares
// or else the defaults. A handler's KindOptions that would have made the
// two differ is refused when it is added.
func TestInsertGivesTheSameJobWithOrWithoutTheHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	producer, err := docket.NewClient(db, docket.Config{})
	require.NoError(t, err)
	worker, err := docket.NewClient(db, docket.Config{})
	require.NoError(t, err)
	require.Error(t, docket.AddHandler(worker, noop, jobs.KindOptions{MaxAttempts: 5, Queue: "mail"}))
	docket.MustAddHandler(worker, noop, jobs.KindOptions{Timeout: time.Minute})
	docket.MustAddHandler(worker, func(context.Context, *jobs.Job, ReportArgs) error { return nil }, jobs.KindOptions{})

	shape := func(c *docket.Client, args jobs.Args) []any {
		t.Helper()
		res, err := c.Insert(ctx, args, nil)
		require.NoError(t, err)
		j, err := c.JobGet(ctx, res.JobID())
		require.NoError(t, err)
		return []any{j.Queue, j.Priority, j.MaxAttempts}
	}
	for _, args := range []jobs.Args{GreetArgs{Name: "a"}, ReportArgs{Day: "mon"}} {
		require.Equal(t, shape(producer, args), shape(worker, args), "kind %q", args.Kind())
	}
	require.Equal(t, []any{jobs.DefaultQueue, 0, jobs.DefaultMaxAttempts}, shape(worker, GreetArgs{Name: "b"}))
	require.Equal(t, []any{"reports", 3, 4}, shape(producer, ReportArgs{Day: "tue"}))
}

// KindOptions' insert defaults (Queue, MaxAttempts, Priority) apply only
// where the handler is registered, so a handler that sets one its args type
// does not declare is refused, the error naming the kind and the method
// to add; the args type declaring the same value is accepted. The registry
// refuses them outright: it has no args type to check them against.
func TestKindOptionsInsertDefaultsMustBeTheArgsTypes(t *testing.T) {
	t.Parallel()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{})
	require.NoError(t, err)

	err = docket.AddHandler(c, noop, jobs.KindOptions{Timeout: time.Minute, MaxAttempts: 5, Queue: "mail"})
	require.ErrorContains(t, err, `"greet"`)
	require.ErrorContains(t, err, `func (GreetArgs) InsertOpts() docket.InsertOpts { return docket.InsertOpts{Queue: "mail", MaxAttempts: 5} }`)
	err = docket.AddHandler(c, noop, jobs.KindOptions{Priority: 2})
	require.ErrorContains(t, err, `docket.InsertOpts{Priority: 2}`)
	require.Empty(t, c.Registry().Kinds(), "a refused handler is not registered")

	report := func(context.Context, *jobs.Job, ReportArgs) error { return nil }
	err = docket.AddHandler(c, report, jobs.KindOptions{Queue: "elsewhere"})
	require.ErrorContains(t, err, `ReportArgs.InsertOpts() declares Queue "reports"`)
	require.NoError(t, docket.AddHandler(c, report, jobs.KindOptions{Queue: "reports", MaxAttempts: 4}), "the args declare the same")
	_, ko, ok := c.Handler("report")
	require.True(t, ok)
	require.Equal(t, jobs.KindOptions{Timeout: jobs.DefaultTimeout}, ko)

	h := jobs.HandlerFunc(func(context.Context, *jobs.Job) error { return nil })
	err = c.Registry().Add("raw", h, jobs.KindOptions{MaxAttempts: 3})
	require.ErrorContains(t, err, "InsertOpts()")
	require.NoError(t, c.Registry().Add("raw", h, jobs.KindOptions{Timeout: time.Second}))
}
