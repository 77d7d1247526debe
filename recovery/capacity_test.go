package recovery_test

import (
	"testing"
	"time"

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

// TestReaperPassFreesStrandedRunSlots: a job of a limited kind that another
// app marked finished without unsetting its run slot holds the limit until
// the next reaper pass frees it; a running job's slot is left alone.
func TestReaperPassFreesStrandedRunSlots(t *testing.T) {
	b := reaperSetup(t)
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 2, ""))
	for range 3 {
		_, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
		require.NoError(t, err)
	}
	p := store.ClaimParams{Owner: "w", Queues: []string{"default"}, Kinds: []string{"k"}, Lease: time.Hour}
	var held []string
	for range 2 {
		j, err := store.Of(b.q).Claim(b.ctx, p)
		require.NoError(t, err)
		require.NotNil(t, j)
		held = append(held, j.ID)
	}
	_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": held[0]}, bson.M{"$set": bson.M{"state": "succeeded"}})
	require.NoError(t, err)
	// A client of its own for each claim: no view of the limit kept.
	fresh := func() *store.Store {
		q, err := queue.New(store.Of(b.q).Collection().Database(), queue.Config{})
		require.NoError(t, err)
		return store.Of(q)
	}
	j, err := fresh().Claim(b.ctx, p)
	require.NoError(t, err)
	require.Nil(t, j, "the stranded slot still counts")

	_, err = b.reaper(t, recovery.ReaperConfig{}).RunOnce(b.ctx)
	require.NoError(t, err)
	raw, err := store.Of(b.q).Collection().FindOne(b.ctx, bson.M{"_id": held[1]}).Raw()
	require.NoError(t, err)
	require.Equal(t, bson.TypeString, raw.Lookup("kindRunSlot").Type, "the running job keeps its slot")
	j, err = fresh().Claim(b.ctx, p)
	require.NoError(t, err)
	require.NotNil(t, j, "the pass freed it")
}
