package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// A kind's cancel hook runs before Cancel cancels an unfinished job of
// that kind, with the job's id and args; its error leaves the job as it
// was and is Cancel's; jobs of other kinds and finished jobs do not run it;
// a nil hook removes it.
func TestCancelRunsTheKindsHook(t *testing.T) {
	b := setup(t)
	res, err := b.q.EnqueueMany(b.ctx, []queue.Insert{
		{Kind: "refund", Args: bson.D{{Key: "order", Value: "o-1"}}},
		{Kind: "refund", Args: bson.D{{Key: "order", Value: "o-2"}}},
		{Kind: "other"},
	})
	require.NoError(t, err)

	var mu sync.Mutex
	var seen []string
	b.q.OnCancel("refund", func(_ context.Context, id queue.JobID, args bson.Raw) error {
		order, _ := args.Lookup("order").StringValueOK()
		mu.Lock()
		seen = append(seen, order)
		mu.Unlock()
		if order == "o-2" {
			return fmt.Errorf("order %s shipped: %w", order, queue.ErrNotCancellable)
		}
		s, ok := id.StringID()
		require.True(t, ok)
		require.Equal(t, res[0].ID, s)
		return nil
	})

	out, err := b.q.Cancel(b.ctx, res[0].ID)
	require.NoError(t, err)
	require.Equal(t, queue.Cancelled, out)

	_, err = b.q.Cancel(b.ctx, res[1].ID)
	require.ErrorIs(t, err, queue.ErrNotCancellable)
	require.ErrorContains(t, err, "order o-2 shipped")
	require.Equal(t, jobs.StateAvailable, b.get(t, res[1].ID).State, "a refused cancel leaves the job")

	_, err = b.q.Cancel(b.ctx, res[2].ID)
	require.NoError(t, err, "another kind: no hook")
	_, err = b.q.Cancel(b.ctx, res[0].ID)
	require.ErrorIs(t, err, queue.ErrFinished, "a finished job: no hook, and Cancel says it finished")
	require.Equal(t, []string{"o-1", "o-2"}, seen)

	b.q.OnCancel("refund", nil)
	_, err = b.q.Cancel(b.ctx, res[1].ID)
	require.NoError(t, err, "the hook is gone")
	require.Equal(t, jobs.StateCancelled, b.get(t, res[1].ID).State)
	require.False(t, errors.Is(err, queue.ErrNotCancellable))
}
