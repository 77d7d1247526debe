package docket_test

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// A dependent inserted while its parent runs, whose worker claimed it
// before the dependent's link and so does not know of it, runs as soon as
// the parent finishes, not at the leader's next pass (a minute away here):
// inserted by the client that runs the parent and by another process.
func TestDependentInsertedWhileItsParentRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	runner, err := docket.NewClient(db, docket.Config{Logger: zaptest.NewLogger(t), ReapInterval: time.Minute})
	require.NoError(t, err)
	started, release := make(chan struct{}), make(chan struct{})
	docket.MustAddHandler(runner, func(ctx context.Context, j *jobs.Job, a GreetArgs) error {
		if a.Name == "parent" {
			close(started)
			<-release
		}
		return nil
	}, jobs.KindOptions{})
	require.NoError(t, runner.Start(ctx))
	defer func() { require.NoError(t, runner.Stop(ctx)) }()
	other, err := docket.NewClient(db, docket.Config{}) // another process, not started
	require.NoError(t, err)

	_, err = runner.Insert(ctx, GreetArgs{Name: "parent"}, &docket.InsertOpts{ID: "p"})
	require.NoError(t, err)
	<-started
	_, err = runner.Insert(ctx, GreetArgs{Name: "same"}, &docket.InsertOpts{ID: "same", After: []string{"p"}})
	require.NoError(t, err)
	_, err = other.Insert(ctx, GreetArgs{Name: "other"}, &docket.InsertOpts{ID: "other", After: []string{"p"}})
	require.NoError(t, err)
	close(release)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, id := range []string{"p", "same", "other"} {
			j, err := runner.JobGet(ctx, docket.StringJobID(id))
			require.NoError(c, err)
			assert.Equal(c, jobs.StateSucceeded, j.State, "job %s", id)
		}
	}, 2*time.Second, 20*time.Millisecond, "the dependents ran within 2 s of their parent's end")
}
