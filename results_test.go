package docket_test

import (
	"context"
	"testing"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap/zaptest"
)

type countArgs struct {
	N int `bson:"n"`
}

func (countArgs) Kind() string { return "count" }

type sumArgs struct{}

func (sumArgs) Kind() string { return "sum" }

// A fan-in from the one client: two parents set results, the dependent
// runs after both and reads them with client.Results.
func TestResultsPassFromParentsToTheirDependent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	docket.MustAddHandler(c, func(ctx context.Context, _ *jobs.Job, a countArgs) error {
		return jobs.SetResult(ctx, bson.M{"n": a.N * 10})
	}, jobs.KindOptions{})
	total := make(chan int, 1)
	docket.MustAddHandler(c, func(ctx context.Context, job *jobs.Job, _ sumArgs) error {
		rs, err := c.Results(ctx, job.After)
		if err != nil {
			return err
		}
		sum := 0
		for _, id := range job.After {
			n, _ := rs[id].Lookup("n").AsInt64OK()
			sum += int(n)
		}
		total <- sum
		return nil
	}, jobs.KindOptions{})

	a, err := c.Insert(ctx, countArgs{N: 1}, nil)
	require.NoError(t, err)
	b, err := c.Insert(ctx, countArgs{N: 2}, nil)
	require.NoError(t, err)
	_, err = c.Insert(ctx, sumArgs{}, &docket.InsertOpts{After: []string{a.ID, b.ID}})
	require.NoError(t, err)

	require.NoError(t, c.Start(ctx))
	defer c.Stop(ctx)
	require.NoError(t, c.WaitIdle(ctx, docket.WaitParams{}))
	require.Equal(t, 30, <-total)

	rs, err := c.Results(ctx, []string{a.ID, "missing"})
	require.NoError(t, err)
	require.Len(t, rs, 1, "a job not in the collection is absent")
}
