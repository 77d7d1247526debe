package docket_test

import (
	"context"
	"testing"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
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
