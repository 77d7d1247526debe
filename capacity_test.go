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

// An Insert into a full bounded queue fails with docket.ErrQueueFull.
func TestInsertIntoAFullQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{})
	require.NoError(t, err)
	require.NoError(t, c.QueueSetCapacity(ctx, "sale", 1, nil))

	_, err = c.Insert(ctx, GreetArgs{Name: "a"}, &docket.InsertOpts{Queue: "sale"})
	require.NoError(t, err)
	_, err = c.Insert(ctx, GreetArgs{Name: "b"}, &docket.InsertOpts{Queue: "sale"})
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
		{docket.Config{Capacities: map[string]int{"mail": -2}}, `Config.Capacities["mail"]: -2 must be from 1 to 100000, or docket.CapacityClosed`},
		{docket.Config{Capacities: map[string]int{"": 3}}, "Config.Capacities"},
		{docket.Config{Limits: map[string]int{"mail": 3}}, "Config.Limits"},
		{docket.Config{Limits: map[string]int{"kind:greet": 1_000_000}}, `Config.Limits["kind:greet"]`},
		{docket.Config{PartitionLimits: map[string]docket.PartitionLimit{"greet": {N: 1, By: "name"}}}, "Config.PartitionLimits"},
		{docket.Config{PartitionLimits: map[string]docket.PartitionLimit{"kind:greet": {N: 0, By: "name"}}}, `Config.PartitionLimits["kind:greet"]: 0 per name: N must be from 1`},
		{docket.Config{PartitionLimits: map[string]docket.PartitionLimit{"kind:greet": {N: 1, By: "$name"}}}, `Config.PartitionLimits["kind:greet"]`},
	} {
		_, err := docket.NewClient(db, c.cfg)
		require.ErrorContains(t, err, c.want)
	}

	c, err := docket.NewClient(db, docket.Config{
		Logger:          zaptest.NewLogger(t),
		Capacities:      map[string]int{"mail": 2},
		Limits:          map[string]int{docket.KindLimit("greet"): 1, docket.QueueLimit("mail"): 3},
		PartitionLimits: map[string]docket.PartitionLimit{docket.KindLimit("greet"): {N: 2, By: "name"}},
	})
	require.NoError(t, err)
	docket.MustAddHandler(c, noop, jobs.KindOptions{})
	require.NoError(t, c.Start(ctx))
	defer c.Stop(ctx)

	queues, err := c.QueueList(ctx)
	require.NoError(t, err)
	require.Len(t, queues, 1)
	require.Equal(t, "mail", queues[0].Name)
	require.Equal(t, 2, queues[0].Capacity)
	ls, err := c.LimitList(ctx)
	require.NoError(t, err)
	require.Len(t, ls, 2)
	require.Equal(t, "kind:greet", ls[0].Name)
	require.Equal(t, 1, ls[0].Limit)
	require.Equal(t, "config:"+c.ID(), ls[0].SetBy)
	require.Equal(t, "name", ls[0].PartitionBy)
	require.Equal(t, 2, ls[0].PartitionLimit)
	require.Equal(t, "queue:mail", ls[1].Name)

	// The admin verbs: a partition beside the queue's total; cleared, the
	// total stays.
	require.ErrorContains(t, c.LimitSetPartition(ctx, docket.QueueLimit("mail"), docket.PartitionLimit{N: 0, By: "x"}, nil), "N must be from 1")
	require.NoError(t, c.LimitSetPartition(ctx, docket.QueueLimit("mail"), docket.PartitionLimit{N: 1, By: "tenant"}, &docket.LimitOpts{By: "test"}))
	ls, err = c.LimitList(ctx)
	require.NoError(t, err)
	require.Equal(t, "tenant", ls[1].PartitionBy)
	require.Equal(t, "test", ls[1].PartitionSetBy)
	had, err := c.LimitClearPartition(ctx, docket.QueueLimit("mail"))
	require.NoError(t, err)
	require.True(t, had)
	ls, err = c.LimitList(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, ls[1].Limit)
	require.Empty(t, ls[1].PartitionBy)
}

// Zero means the default throughout Config, so a capacity or limit of 0 is
// refused (it used to close the queue, or stop the kind, silently); closing
// is spelled CapacityClosed, running none LimitNone, in Config and in the
// admin verbs alike.
func TestZeroIsNotACapacityClosedIsSpelledOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	_, err := docket.NewClient(db, docket.Config{Capacities: map[string]int{"sale": 0}})
	require.ErrorContains(t, err, "0 is not a capacity: write docket.CapacityClosed to refuse every insert")
	_, err = docket.NewClient(db, docket.Config{Limits: map[string]int{docket.KindLimit("greet"): 0}})
	require.ErrorContains(t, err, "0 is not a limit: write docket.LimitNone")

	c, err := docket.NewClient(db, docket.Config{
		Logger:     zaptest.NewLogger(t),
		Capacities: map[string]int{"sale": docket.CapacityClosed},
		Limits:     map[string]int{docket.KindLimit("greet"): docket.LimitNone},
	})
	require.NoError(t, err)
	docket.MustAddHandler(c, noop, jobs.KindOptions{})
	require.NoError(t, c.Start(ctx))
	defer c.Stop(ctx)
	_, err = c.Insert(ctx, GreetArgs{Name: "a"}, &docket.InsertOpts{Queue: "sale"})
	require.ErrorIs(t, err, docket.ErrQueueFull, "a closed queue admits nothing")
	queues, err := c.QueueList(ctx)
	require.NoError(t, err)
	require.Equal(t, docket.CapacityClosed, queues[0].Capacity)
	ls, err := c.LimitList(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, ls[0].Limit, "LimitNone is stored as a limit of none")

	require.ErrorContains(t, c.QueueSetCapacity(ctx, "sale", 0, nil), "0 is not a capacity")
	require.ErrorContains(t, c.LimitSet(ctx, docket.KindLimit("greet"), 0, nil), "0 is not a limit")
	require.NoError(t, c.QueueSetCapacity(ctx, "sale", 1, nil))
	_, err = c.Insert(ctx, GreetArgs{Name: "a"}, &docket.InsertOpts{Queue: "sale", Delay: time.Hour})
	require.NoError(t, err, "reopened with a capacity of 1")
}
