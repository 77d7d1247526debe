package docket_test

import (
	"context"
	"testing"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// An Insert into a full bounded queue fails with docket.ErrQueueFull.
func TestInsertIntoAFullQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{})
	require.NoError(t, err)
	docket.MustAddHandler(c, noop, jobs.KindOptions{Queue: "sale"})
	require.NoError(t, c.Queue().SetCapacity(ctx, "sale", 1, ""))

	_, err = c.Insert(ctx, GreetArgs{Name: "a"}, nil)
	require.NoError(t, err)
	_, err = c.Insert(ctx, GreetArgs{Name: "b"}, nil)
	require.ErrorIs(t, err, docket.ErrQueueFull)
	require.ErrorContains(t, err, "queue sale is full (capacity 1)")
}

// Capacities and limits in docket.Config are checked by NewClient, naming
// what is wrong, and set by Start before the pool runs, so an embedded
// client bounds its queues as the worker command's configuration does.
func TestConfigCapacitiesAndLimitsAreSetAtStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	for _, c := range []struct {
		cfg  docket.Config
		want string
	}{
		{docket.Config{Capacities: map[string]int{"mail": -1}}, "capacities.mail: -1 must be between"},
		{docket.Config{Capacities: map[string]int{"": 3}}, "capacities"},
		{docket.Config{Limits: map[string]int{"mail": 3}}, "limits"},
		{docket.Config{Limits: map[string]int{"kind:greet": 1_000_000}}, "limits.kind:greet"},
	} {
		_, err := docket.NewClient(db, c.cfg)
		require.ErrorContains(t, err, c.want)
	}

	c, err := docket.NewClient(db, docket.Config{
		Logger:     zaptest.NewLogger(t),
		Capacities: map[string]int{"mail": 2},
		Limits:     map[string]int{"kind:greet": 1, "queue:mail": 3},
	})
	require.NoError(t, err)
	docket.MustAddHandler(c, noop, jobs.KindOptions{})
	require.NoError(t, c.Start(ctx))
	defer c.Stop(ctx)

	caps, err := c.Queue().QueueCapacities(ctx)
	require.NoError(t, err)
	require.Len(t, caps, 1)
	require.Equal(t, "mail", caps[0].Queue)
	require.Equal(t, 2, caps[0].Capacity)
	ls, err := c.Queue().RunLimits(ctx)
	require.NoError(t, err)
	require.Len(t, ls, 2)
	require.Equal(t, "kind:greet", ls[0].Name)
	require.Equal(t, 1, ls[0].Limit)
	require.Equal(t, "config:"+c.ID(), ls[0].SetBy)
	require.Equal(t, "queue:mail", ls[1].Name)
}
