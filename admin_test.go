package docket_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap/zaptest"
)

// The admin verbs on the one client, with params structs: list a page at a
// time, retry, delete (Force a field), purge, cancel, pause and resume.
func TestAdminVerbsOnTheClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	var ids []string
	for _, name := range []string{"a", "b", "c"} {
		res, err := c.Insert(ctx, GreetArgs{Name: name}, &docket.InsertOpts{Delay: time.Hour})
		require.NoError(t, err)
		ids = append(ids, res.ID)
	}

	page, err := c.JobList(ctx, &docket.JobListParams{Limit: 2})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 2)
	require.NotEmpty(t, page.Next)
	page, err = c.JobList(ctx, &docket.JobListParams{After: page.Next, Limit: 2})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	require.Empty(t, page.Next, "the last page")
	_, err = c.JobList(ctx, &docket.JobListParams{Limit: -1})
	require.ErrorContains(t, err, "limit -1")

	out, err := c.JobCancel(ctx, docket.StringJobID(ids[0]))
	require.NoError(t, err)
	require.Equal(t, docket.JobCancelled, out)
	_, err = c.JobCancel(ctx, docket.StringJobID(ids[0]))
	require.ErrorIs(t, err, docket.ErrJobFinished)
	_, err = c.JobGet(ctx, docket.StringJobID("nope"))
	require.ErrorIs(t, err, docket.ErrJobNotFound)

	_, err = c.JobRetry(ctx, &docket.JobRetryParams{})
	require.ErrorContains(t, err, "selects every job")
	_, err = c.JobDelete(ctx, nil)
	require.ErrorContains(t, err, "selects every job")

	res, err := c.JobRetry(ctx, &docket.JobRetryParams{JobFilter: docket.JobFilter{States: []jobs.State{jobs.StateCancelled}}})
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.NoError(t, res[0].Err)
	j, err := c.JobGet(ctx, docket.StringJobID(ids[0]))
	require.NoError(t, err)
	require.Equal(t, jobs.StateAvailable, j.State)

	res, err = c.JobDelete(ctx, &docket.JobDeleteParams{JobFilter: docket.JobFilter{JobIDs: []docket.JobID{docket.StringJobID(ids[1])}}})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, docket.ErrJobNotFinished, "without Force an available job stays")
	res, err = c.JobDelete(ctx, &docket.JobDeleteParams{JobFilter: docket.JobFilter{JobIDs: []docket.JobID{docket.StringJobID(ids[1])}}, Force: true})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	_, err = c.JobGet(ctx, docket.StringJobID(ids[1]))
	require.True(t, errors.Is(err, docket.ErrJobNotFound))

	_, err = c.JobCancel(ctx, docket.StringJobID(ids[2]))
	require.NoError(t, err)
	n, err := c.JobPurge(ctx, &docket.JobPurgeParams{State: jobs.StateCancelled})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = c.JobPurge(ctx, &docket.JobPurgeParams{State: jobs.StateAvailable})
	require.ErrorContains(t, err, "not a finished state")

	changed, err := c.QueuePause(ctx, "default", &docket.QueuePauseOpts{By: "test"})
	require.NoError(t, err)
	require.True(t, changed)
	queues, err := c.QueueList(ctx)
	require.NoError(t, err)
	require.Len(t, queues, 1)
	require.True(t, queues[0].Paused)
	require.EqualValues(t, 1, queues[0].Counts["greet"][jobs.StateAvailable])
	changed, err = c.QueueResume(ctx, "default", nil)
	require.NoError(t, err)
	require.True(t, changed)

	require.NoError(t, c.LimitSet(ctx, docket.QueueLimit("default"), 2, &docket.LimitOpts{By: "test"}))
	had, err := c.LimitClear(ctx, docket.QueueLimit("default"))
	require.NoError(t, err)
	require.True(t, had)
}

// Workers lists the started clients; IsLeader says whether this one leads
// the maintenance.
func TestWorkersAndLeadership(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{Logger: zaptest.NewLogger(t), ID: "w-admin", LeaderTTL: docket.MinLeaderTTL})
	require.NoError(t, err)
	require.False(t, c.IsLeader(), "not before Start")
	docket.MustAddHandler(c, noop, jobs.KindOptions{})
	require.NoError(t, c.Start(ctx))
	require.Eventually(t, c.IsLeader, 10*time.Second, 10*time.Millisecond, "the only process leads")
	require.True(t, c.Leadership().IsLeader())
	var ws []docket.WorkerInfo
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		ws, err = c.Workers(ctx, nil)
		require.NoError(ct, err)
		assert.Len(ct, ws, 1)
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, "w-admin", ws[0].ID)
	require.NoError(t, c.Stop(ctx))
	require.False(t, c.IsLeader(), "Stop gives the leadership up")
	ws, err = c.Workers(ctx, &docket.WorkersParams{All: true})
	require.NoError(t, err)
	require.Empty(t, ws, "a stopped client leaves the registry")
}

// Rate limits and cancel hooks are set on the one client too: an
// application needs no second client for them.
func TestRatesAndCancelHooksOnTheClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)

	r, err := docket.ParseRate("14/s burst 5")
	require.NoError(t, err)
	require.NoError(t, c.RateSet(ctx, docket.KindLimit("email"), r, &docket.LimitOpts{By: "test"}))
	rs, err := c.RateList(ctx)
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, "kind:email", rs[0].Name)
	require.Equal(t, r, rs[0].Rate)
	require.Equal(t, "test", rs[0].SetBy)
	require.Error(t, c.RateSet(ctx, "email", r, nil), "a name without kind: or queue:")
	had, err := c.RateClear(ctx, docket.KindLimit("email"))
	require.NoError(t, err)
	require.True(t, had)

	res, err := c.Insert(ctx, GreetArgs{Name: "d"}, nil)
	require.NoError(t, err)
	var hooked []string
	c.OnCancel(GreetArgs{}.Kind(), func(_ context.Context, id docket.JobID, _ bson.Raw) error {
		hooked = append(hooked, id.Token())
		return fmt.Errorf("already shipped: %w", docket.ErrNotCancellable)
	})
	_, err = c.JobCancel(ctx, res.JobID())
	require.ErrorIs(t, err, docket.ErrNotCancellable)
	require.Equal(t, []string{res.ID}, hooked)
	job, err := c.JobGet(ctx, res.JobID())
	require.NoError(t, err)
	require.Equal(t, jobs.StateAvailable, job.State, "a refused cancel leaves the job as it was")

	c.OnCancel(GreetArgs{}.Kind(), nil)
	out, err := c.JobCancel(ctx, res.JobID())
	require.NoError(t, err)
	require.Equal(t, docket.JobCancelled, out)
}
