package dockettest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/docketq/docket"
	"github.com/docketq/docket/dockettest"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type SignUpArgs struct {
	Email string `bson:"email"`
}

func (SignUpArgs) Kind() string { return "sign-up" }

func (a SignUpArgs) Validate() error {
	if !strings.Contains(a.Email, "@") {
		return fmt.Errorf("email %q has no @", a.Email)
	}
	return nil
}

type WelcomeArgs struct {
	To string `bson:"to"`
}

func (WelcomeArgs) Kind() string { return "welcome" }

// newClient is an application's client: a sign-up handler that inserts a
// welcome job, and a welcome handler that refuses one address for good.
func newClient(t *testing.T) *docket.Client {
	t.Helper()
	client, err := docket.NewClient(testdb.NewDB(t), docket.Config{})
	require.NoError(t, err)
	docket.MustAddHandler(client, func(ctx context.Context, _ *jobs.Job, a SignUpArgs) error {
		_, err := client.Insert(ctx, WelcomeArgs{To: a.Email}, nil)
		return err
	}, jobs.KindOptions{})
	docket.MustAddHandler(client, func(ctx context.Context, _ *jobs.Job, a WelcomeArgs) error {
		if a.To == "bounce@example.com" {
			return jobs.Permanent(errors.New("address bounces"))
		}
		return ctx.Err()
	}, jobs.KindOptions{})
	return client
}

func TestWorkRunsTheHandlerAndRequireInsertedSeesItsJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := newClient(t)

	dockettest.RequireNotInserted(t, client, WelcomeArgs{To: "a@example.com"})
	require.NoError(t, dockettest.Work(ctx, client, SignUpArgs{Email: "a@example.com"}))
	job := dockettest.RequireInserted(t, client, WelcomeArgs{To: "a@example.com"})
	require.Equal(t, jobs.StateAvailable, job.State)
	dockettest.RequireNotInserted(t, client, WelcomeArgs{To: "b@example.com"})

	err := dockettest.Work(ctx, client, WelcomeArgs{To: "bounce@example.com"})
	require.True(t, jobs.IsPermanent(err), "a permanent error stays one: %v", err)
	err = dockettest.Work(ctx, client, SignUpArgs{Email: "nobody"})
	require.True(t, jobs.IsPermanent(err), "args that fail Validate are a permanent error: %v", err)
	require.ErrorContains(t, err, `email "nobody" has no @`)

	ran, err := dockettest.WorkJob(ctx, client, WelcomeArgs{To: "c@example.com"}, docket.InsertOpts{Queue: "mail", MaxAttempts: 2})
	require.NoError(t, err)
	require.Equal(t, "mail", ran.Queue)
	require.Equal(t, 1, ran.Attempt)

	require.ErrorContains(t, dockettest.Work(ctx, client, otherArgs{}), `no handler for kind "other"`)
}

// TestWorkRunsTheClientsMiddleware: a handler worked by Work runs inside
// the middleware the client's pool would run it in (Use), so a test sees
// what the middleware adds (a context value here, tracing or logging in an
// application).
func TestWorkRunsTheClientsMiddleware(t *testing.T) {
	t.Parallel()
	type key struct{}
	client, err := docket.NewClient(testdb.NewDB(t), docket.Config{})
	require.NoError(t, err)
	var seen []string
	docket.MustAddHandler(client, func(ctx context.Context, _ *jobs.Job, a WelcomeArgs) error {
		tenant, _ := ctx.Value(key{}).(string)
		seen = append(seen, "handler for "+tenant)
		return nil
	}, jobs.KindOptions{})
	require.NoError(t, client.Use(func(next jobs.Handler) jobs.Handler {
		return jobs.HandlerFunc(func(ctx context.Context, job *jobs.Job) error {
			seen = append(seen, "middleware "+job.Kind)
			return next.Work(context.WithValue(ctx, key{}, "acme"), job)
		})
	}))

	require.NoError(t, dockettest.Work(context.Background(), client, WelcomeArgs{To: "a@example.com"}))
	require.Equal(t, []string{"middleware welcome", "handler for acme"}, seen)
}

type otherArgs struct{}

func (otherArgs) Kind() string { return "other" }

// recorder is a TB that records failures instead of failing the test.
type recorder struct{ failed []string }

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
}

func TestTheAssertionsFail(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	var r recorder
	dockettest.RequireInserted(&r, client, WelcomeArgs{To: "never@example.com"})
	require.Len(t, r.failed, 1)
	require.Contains(t, r.failed[0], `no "welcome" job was inserted`)

	_, err := client.Insert(context.Background(), WelcomeArgs{To: "x@example.com"}, nil)
	require.NoError(t, err)
	dockettest.RequireNotInserted(&r, client, WelcomeArgs{To: "x@example.com"})
	require.Len(t, r.failed, 2)
	require.Contains(t, r.failed[1], `1 "welcome" job(s) were inserted`)
}

// exampleDB is a fresh database on the test server, for the examples.
func exampleDB(name string) *mongo.Database {
	mc, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()))
	if err != nil {
		panic(err)
	}
	db := mc.Database("example_" + name)
	if err := db.Drop(context.Background()); err != nil {
		panic(err)
	}
	return db
}

// printingT stands in for a *testing.T outside a test.
type printingT struct{}

func (printingT) Helper()                           {}
func (printingT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// ReceiptArgs declare their kind's insert defaults.
type ReceiptArgs struct {
	Order string `bson:"order"`
}

func (ReceiptArgs) Kind() string { return "receipt" }

func (ReceiptArgs) InsertOpts() docket.InsertOpts {
	return docket.InsertOpts{Queue: "mail", Priority: 2, MaxAttempts: 5}
}

// The job WorkJob runs the handler on is the job Insert would insert: the
// same queue, priority and attempts, from the args type's InsertOpts()
// and the options given.
func TestWorkJobRunsOnTheJobInsertGives(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client, err := docket.NewClient(testdb.NewDB(t), docket.Config{})
	require.NoError(t, err)
	docket.MustAddHandler(client, func(context.Context, *jobs.Job, ReceiptArgs) error { return nil }, jobs.KindOptions{})

	for _, opts := range []*docket.InsertOpts{nil, {Priority: 9}, {Queue: "urgent", MaxAttempts: 2}} {
		var given []docket.InsertOpts
		if opts != nil {
			given = append(given, *opts)
		}
		ran, err := dockettest.WorkJob(ctx, client, ReceiptArgs{Order: "o-1"}, given...)
		require.NoError(t, err)
		res, err := client.Insert(ctx, ReceiptArgs{Order: "o-1"}, opts)
		require.NoError(t, err)
		inserted, err := client.JobGet(ctx, res.JobID())
		require.NoError(t, err)
		require.Equal(t, []any{inserted.Queue, inserted.Priority, inserted.MaxAttempts}, []any{ran.Queue, ran.Priority, ran.MaxAttempts}, "opts %+v", opts)
	}
}

type TotalArgs struct {
	Items []int `bson:"items"`
}

func (TotalArgs) Kind() string { return "total" }

// Work gives the handler a result slot and a progress reporter as a
// worker does: a handler that sets its result and reports progress works
// under it, WorkJob returns both on the job (the result only when the
// handler succeeded), and a slot or reporter of the test's own in ctx
// receives them too.
func TestWorkGivesTheHandlerAResultSlotAndProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client, err := docket.NewClient(testdb.NewDB(t), docket.Config{})
	require.NoError(t, err)
	docket.MustAddHandler(client, func(ctx context.Context, _ *jobs.Job, a TotalArgs) error {
		sum := 0
		for i, n := range a.Items {
			sum += n
			if err := jobs.Progress(ctx, float64(i+1)/float64(len(a.Items)), "adding"); err != nil {
				return err
			}
		}
		if err := jobs.SetResult(ctx, map[string]int{"sum": sum}); err != nil {
			return err
		}
		if sum < 0 {
			return errors.New("negative")
		}
		return nil
	}, jobs.KindOptions{})

	ran, err := dockettest.WorkJob(ctx, client, TotalArgs{Items: []int{1, 2, 3, 4}})
	require.NoError(t, err)
	require.NotNil(t, ran.Result)
	require.Equal(t, int32(10), ran.Result.Lookup("sum").Int32())
	require.NotNil(t, ran.Progress)
	require.Equal(t, 1.0, ran.Progress.Fraction)
	require.Equal(t, "adding", ran.Progress.Message)

	ran, err = dockettest.WorkJob(ctx, client, TotalArgs{Items: []int{-5}})
	require.EqualError(t, err, "negative")
	require.Nil(t, ran.Result, "a failed attempt stores no result")
	require.Equal(t, 1.0, ran.Progress.Fraction)

	var slot jobs.ResultSlot
	var reports []jobs.ProgressReport
	own := jobs.WithProgressReporter(jobs.WithResultSlot(ctx, &slot), func(r jobs.ProgressReport) { reports = append(reports, r) })
	require.NoError(t, dockettest.Work(own, client, TotalArgs{Items: []int{2, 3}}))
	require.Equal(t, int32(5), slot.Result().Lookup("sum").Int32())
	require.Len(t, reports, 2)
	require.Equal(t, []float64{0.5, 1}, []float64{reports[0].Fraction, reports[1].Fraction})
}
