package recovery_test

import (
	"testing"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestReaperPassFreesStrandedCapacitySlots: a job of a bounded queue that
// another app marked finished without unsetting its slot holds the queue's
// capacity until the next reaper pass frees it.
func TestReaperPassFreesStrandedCapacitySlots(t *testing.T) {
	b := reaperSetup(t)
	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 1, ""))
	res, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{Queue: "q"})
	require.NoError(t, err)
	_, err = store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": res.ID}, bson.M{"$set": bson.M{"state": "succeeded"}})
	require.NoError(t, err)
	_, err = b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{Queue: "q"})
	require.ErrorIs(t, err, queue.ErrQueueFull, "the stranded slot still counts")
	_, err = b.reaper(t, recovery.ReaperConfig{}).RunOnce(b.ctx)
	require.NoError(t, err)
	_, err = b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{Queue: "q"})
	require.NoError(t, err, "the pass freed it")
}
