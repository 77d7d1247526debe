package docket_test

import (
	"context"
	"testing"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// ReportArgs carry their kind's insert defaults: every client that inserts
// a report, with its handler or without, puts it in the reports queue.
type ReportArgs struct {
	Day string `bson:"day"`
}

func (ReportArgs) Kind() string { return "report" }

func (ReportArgs) InsertOpts() docket.InsertOpts {
	return docket.InsertOpts{Queue: "reports", Priority: 3, MaxAttempts: 4}
}

// A handler added after Start would never run (the pool took the kinds at
// start): it is refused, naming the kind.
func TestAddHandlerAfterStartIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	docket.MustAddHandler(c, noop, jobs.KindOptions{})
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()

	err = docket.AddHandler(c, func(context.Context, *jobs.Job, ReportArgs) error { return nil }, jobs.KindOptions{})
	require.ErrorContains(t, err, `"report"`)
	require.ErrorContains(t, err, "after Start")
	err = c.Registry().Add("other", jobs.HandlerFunc(func(context.Context, *jobs.Job) error { return nil }), jobs.KindOptions{})
	require.ErrorContains(t, err, "after Start", "the registry itself refuses it too")
}

// A producer-only client (no handler) inserts a kind into the queue its
// args type names, with its priority and attempts, as a client with the
// handler does; explicit options win, then the args', then the defaults.
func TestInsertDefaultsTravelWithTheArgsType(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	producer, err := docket.NewClient(db, docket.Config{})
	require.NoError(t, err)
	get := func(c *docket.Client, args jobs.Args, o *docket.InsertOpts) *jobs.Job {
		t.Helper()
		res, err := c.Insert(ctx, args, o)
		require.NoError(t, err)
		j, err := c.JobGet(ctx, res.JobID())
		require.NoError(t, err)
		return j
	}

	j := get(producer, ReportArgs{Day: "mon"}, nil)
	require.Equal(t, []any{"reports", 3, 4}, []any{j.Queue, j.Priority, j.MaxAttempts})
	j = get(producer, ReportArgs{Day: "tue"}, &docket.InsertOpts{Priority: 9})
	require.Equal(t, []any{"reports", 9, 4}, []any{j.Queue, j.Priority, j.MaxAttempts}, "explicit options win field by field")

	worker, err := docket.NewClient(db, docket.Config{})
	require.NoError(t, err)
	docket.MustAddHandler(worker, func(context.Context, *jobs.Job, ReportArgs) error { return nil }, jobs.KindOptions{})
	j = get(worker, ReportArgs{Day: "wed"}, nil)
	require.Equal(t, []any{"reports", 3, 4}, []any{j.Queue, j.Priority, j.MaxAttempts}, "the client with the handler inserts alike")
	j = get(worker, ReportArgs{Day: "thu"}, &docket.InsertOpts{Queue: "urgent"})
	require.Equal(t, []any{"urgent", 3, 4}, []any{j.Queue, j.Priority, j.MaxAttempts})
}

// A registered kind whose queue no worker of the client serves is named in
// a warning at start, with the queue and the queues served.
func TestStartWarnsOfAKindNoQueueServes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	core, logs := observer.New(zap.WarnLevel)
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{Logger: zap.New(core), Queues: []string{"default", "mail"}})
	require.NoError(t, err)
	docket.MustAddHandler(c, func(context.Context, *jobs.Job, mailQueueArgs) error { return nil }, jobs.KindOptions{}) // served
	docket.MustAddHandler(c, func(context.Context, *jobs.Job, ReportArgs) error { return nil }, jobs.KindOptions{})    // its args say "reports"
	docket.MustAddHandler(c, func(context.Context, *jobs.Job, EmailArgs) error { return nil }, jobs.KindOptions{})     // the default queue, served
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()

	warned := map[string]string{}
	for _, e := range logs.FilterMessageSnippet("no worker of this client serves").All() {
		f := e.ContextMap()
		warned[f["kind"].(string)] = f["queue"].(string)
	}
	require.Equal(t, map[string]string{"report": "reports"}, warned)
}

// mailQueueArgs go to the mail queue.
type mailQueueArgs struct{}

func (mailQueueArgs) Kind() string { return "mail-queue" }

func (mailQueueArgs) InsertOpts() docket.InsertOpts { return docket.InsertOpts{Queue: "mail"} }
