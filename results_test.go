package docket_test

import (
	"context"
	"testing"
	"time"

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
// runs after both and reads them with client.ParentResults, in the order
// of its After.
func TestResultsPassFromParentsToTheirDependent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	docket.MustAddHandler(c, func(ctx context.Context, _ *jobs.Job, a countArgs) error {
		return jobs.SetResult(ctx, bson.M{"n": a.N * 10})
	}, jobs.KindOptions{})
	total := make(chan []int, 1)
	docket.MustAddHandler(c, func(ctx context.Context, job *jobs.Job, _ sumArgs) error {
		rs, err := c.ParentResults(ctx, job)
		if err != nil {
			return err
		}
		var got []int
		for _, r := range rs {
			var v countArgs
			if err := r.Decode(&v); err != nil {
				return err
			}
			got = append(got, v.N)
		}
		total <- got
		return nil
	}, jobs.KindOptions{})

	a, err := c.Insert(ctx, countArgs{N: 1}, nil)
	require.NoError(t, err)
	b, err := c.Insert(ctx, countArgs{N: 2}, nil)
	require.NoError(t, err)
	_, err = c.Insert(ctx, sumArgs{}, &docket.InsertOpts{After: []string{b.ID, a.ID}})
	require.NoError(t, err)

	require.NoError(t, c.Start(ctx))
	defer c.Stop(ctx)
	require.Equal(t, []int{20, 10}, <-total)
}

// A parent without a result (it set none, or is gone) is listed, and its
// Decode says so with ErrNoResult, naming it, rather than failing to
// decode nothing.
func TestParentResultsOfAParentWithoutAResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{})
	require.NoError(t, err)
	a, err := c.Insert(ctx, countArgs{N: 1}, nil)
	require.NoError(t, err)
	job := &jobs.Job{ID: "child", After: []string{a.ID, "missing"}}
	rs, err := c.ParentResults(ctx, job)
	require.NoError(t, err)
	require.Equal(t, []string{a.ID, "missing"}, []string{rs[0].ID, rs[1].ID})
	for _, r := range rs {
		var v countArgs
		err := r.Decode(&v)
		require.ErrorIs(t, err, docket.ErrNoResult)
		require.ErrorContains(t, err, "parent "+r.ID+": no result")
	}
	rs, err = c.ParentResults(ctx, &jobs.Job{ID: "root"})
	require.NoError(t, err)
	require.Empty(t, rs)
}

// Count is the result the WORKFLOWS.md Results example passes on.
type Count struct {
	N int `bson:"n"`
}

// TotalArgs are the args of the WORKFLOWS.md example's fan-in task.
type TotalArgs struct{}

func (TotalArgs) Kind() string { return "total" }

// TestWorkflowsResultsExample runs the handler of docs/WORKFLOWS.md's
// Results section as it is written, as a workflow task after two parents
// that set results, and checks that the doc holds it line for line.
func TestWorkflowsResultsExample(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client, err := docket.NewClient(testdb.NewDB(t), docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	docket.MustAddHandler(client, func(ctx context.Context, _ *jobs.Job, a countArgs) error {
		return jobs.SetResult(ctx, Count(a))
	}, jobs.KindOptions{})
	// --- WORKFLOWS results ---
	docket.MustAddHandler(client, func(ctx context.Context, job *jobs.Job, _ TotalArgs) error {
		parents, err := client.ParentResults(ctx, job) // in job.After's order, the workflow's gate left out
		if err != nil {
			return err
		}
		total := 0
		for _, p := range parents {
			var c Count
			if err := p.Decode(&c); err != nil { // names the parent; errors.Is(err, docket.ErrNoResult) when it set none
				return jobs.Permanent(err)
			}
			total += c.N
		}
		return jobs.SetResult(ctx, Count{N: total})
	}, jobs.KindOptions{})
	// --- end ---
	require.NoError(t, client.Start(ctx))
	defer client.Stop(ctx)

	wf := docket.NewWorkflow("wf-1")
	a := wf.Add("a", countArgs{N: 1}, nil)
	b := wf.Add("b", countArgs{N: 2}, nil)
	wf.Add("total", TotalArgs{}, &docket.TaskOpts{After: []string{a, b}})
	res, err := client.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	var job *jobs.Job
	require.Eventually(t, func() bool {
		job, err = client.JobGet(ctx, docket.StringJobID(res.Tasks["total"]))
		return err == nil && job.State.Finished()
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, jobs.StateSucceeded, job.State, "errors: %+v", job.Errors)
	var got Count
	require.NoError(t, bson.Unmarshal(job.Result, &got))
	require.Equal(t, 3, got.N)

	requireDocHolds(t, "docs/WORKFLOWS.md", "results_test.go", "// --- WORKFLOWS results ---\n", "\t// --- end ---", nil)
}
