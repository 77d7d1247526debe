package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// emptyClaims counts the claims that returned no job.
type emptyClaims struct {
	worker.NopObserver
	n atomic.Int64
}

func (e *emptyClaims) Claimed(_ time.Duration, n int, err error) {
	if n == 0 && err == nil {
		e.n.Add(1)
	}
}

// TestLimitFullClaimsWhenTheSlotFrees: a worker whose jobs fill a
// concurrency limit claims the next job when a finishing write has freed a
// slot, which it is handed, and not before: not when the handler returns
// (the slot is still held), nor at once after a claim that filled the
// limit. With polls an hour apart, its only empty claim is the last one,
// when no job is left.
func TestLimitFullClaimsWhenTheSlotFrees(t *testing.T) {
	b := setup(t)
	const n = 6
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 1, "test"))
	// Set long ago: past the seconds after a set when every claim reads
	// the limit's running jobs.
	_, err := store.Of(b.q).Collection().Database().Collection(queue.DefaultLimitsCollection).UpdateOne(b.ctx,
		bson.D{{Key: "_id", Value: queue.KindLimit("k")}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "limitSetAt", Value: time.Now().Add(-time.Hour)}}}})
	require.NoError(t, err)
	var running, most atomic.Int64
	b.handle(t, "k", func(context.Context, *jobs.Job) error {
		most.Store(max(most.Load(), running.Add(1)))
		time.Sleep(10 * time.Millisecond)
		running.Add(-1)
		return nil
	}, jobs.KindOptions{})
	ids := make([]string, n)
	for i := range ids {
		ids[i] = b.enqueue(t, "k", nil, queue.InsertOpts{})
	}
	obs := &emptyClaims{}
	w, err := worker.New(b.q, b.reg, worker.Config{
		Logger: b.log, Concurrency: 4, Observer: obs,
		PollMin: time.Hour, PollMax: time.Hour,
	})
	require.NoError(t, err)
	w.Start(context.Background())
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	for _, id := range ids {
		b.waitState(t, id, jobs.StateSucceeded)
	}
	require.Eventually(t, func() bool { return obs.n.Load() >= 1 }, 10*time.Second, 10*time.Millisecond,
		"the claim after the last job's write finds nothing")
	require.Equal(t, int64(1), obs.n.Load(), "claims that found the limit full")
	require.Equal(t, int64(1), most.Load())
}
