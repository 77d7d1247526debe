package docket_test

import (
	"context"
	"testing"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
)

// Insert middleware runs around Insert and InsertMany, the first given
// outermost, and what it gives next is what is inserted.
func TestUseInsertWrapsInserts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{})
	require.NoError(t, err)
	var order []string
	named := func(name string) docket.InsertMiddleware {
		return func(next docket.InsertFunc) docket.InsertFunc {
			return func(ctx context.Context, params []docket.InsertManyParams) ([]docket.InsertResult, error) {
				order = append(order, name)
				return next(ctx, params)
			}
		}
	}
	prioritize := func(next docket.InsertFunc) docket.InsertFunc {
		return func(ctx context.Context, params []docket.InsertManyParams) ([]docket.InsertResult, error) {
			out := make([]docket.InsertManyParams, len(params))
			for i, p := range params {
				out[i] = docket.InsertManyParams{Args: p.Args, Opts: &docket.InsertOpts{Priority: 7}}
			}
			return next(ctx, out)
		}
	}
	require.Error(t, c.UseInsert(nil))
	require.NoError(t, c.UseInsert(named("outer"), named("inner")))
	require.NoError(t, c.UseInsert(prioritize))

	res, err := c.Insert(ctx, GreetArgs{Name: "a"}, nil)
	require.NoError(t, err)
	many, err := c.InsertMany(ctx, []docket.InsertManyParams{{Args: GreetArgs{Name: "b"}}})
	require.NoError(t, err)
	require.Equal(t, []string{"outer", "inner", "outer", "inner"}, order)
	for _, id := range []string{res.ID, many[0].ID} {
		job, err := c.JobGet(ctx, docket.StringJobID(id))
		require.NoError(t, err)
		require.Equal(t, 7, job.Priority)
	}
}

// An insert middleware that returns no result for a job (its contract is
// one per job) makes the insert fail as of unknown outcome, never panic.
func TestInsertMiddlewareWithoutResultsIsAnError(t *testing.T) {
	t.Parallel()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{})
	require.NoError(t, err)
	require.NoError(t, c.UseInsert(func(next docket.InsertFunc) docket.InsertFunc {
		return func(ctx context.Context, params []docket.InsertManyParams) ([]docket.InsertResult, error) {
			_, err := next(ctx, params)
			return nil, err
		}
	}))
	_, err = c.Insert(context.Background(), GreetArgs{Name: "a"}, nil)
	require.ErrorIs(t, err, docket.ErrOutcomeUnknown)
	require.ErrorContains(t, err, "returned 0 results for 1 jobs")
}
