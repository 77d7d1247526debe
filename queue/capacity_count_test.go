package queue_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// unfinished counts the jobs of queue "q" that are available or running.
func (b bundle) unfinished(t *testing.T) int {
	t.Helper()
	n, err := store.Of(b.q).Collection().CountDocuments(b.ctx, bson.M{"queue": "q", "state": bson.M{"$in": bson.A{jobs.StateAvailable, jobs.StateRunning}}})
	require.NoError(t, err)
	return int(n)
}

// requireReported checks that Occupied and QueueCapacities report the
// queue's real count of unfinished jobs.
func (b bundle) requireReported(t *testing.T) {
	t.Helper()
	want := b.unfinished(t)
	require.Equal(t, want, b.occupied(t), "Occupied")
	caps, err := b.q.QueueCapacities(b.ctx)
	require.NoError(t, err)
	for _, c := range caps {
		if c.Queue == "q" {
			require.Equal(t, want, c.Occupied, "QueueCapacities")
		}
	}
}

// TestCapacityCountsJobsEnqueuedWithoutIt: jobs enqueued while the queue
// had no capacity (before the first one, and between off and on) count
// against the capacity set later; a retry of a job finished while the
// queue was unbounded too. Admissions never take the queue's unfinished
// jobs past the capacity, and what is reported is the real count.
func TestCapacityCountsJobsEnqueuedWithoutIt(t *testing.T) {
	b := setup(t)
	claimQ := claimAll
	claimQ.Queues = []string{"q"}
	var before []string
	for range 5 {
		r, err := b.capped(queue.InsertOpts{})
		require.NoError(t, err)
		before = append(before, r.ID)
	}
	b.claim(t, claimQ) // one of them running: it counts too
	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 3, ""))
	b.requireFull(t, 3)
	require.Equal(t, 5, b.unfinished(t))
	b.requireReported(t)

	for _, id := range before[2:] {
		_, err := b.q.Cancel(b.ctx, id)
		require.NoError(t, err)
	}
	require.Equal(t, 2, b.unfinished(t))
	_, err := b.capped(queue.InsertOpts{})
	require.NoError(t, err, "2 of 3: one more")
	b.requireFull(t, 3)
	b.requireReported(t)

	// Off: admitted without a slot. On again, lower: they count.
	_, err = b.q.ClearCapacity(b.ctx, "q", "")
	require.NoError(t, err)
	for range 2 {
		_, err := b.capped(queue.InsertOpts{})
		require.NoError(t, err)
	}
	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 4, ""))
	b.requireFull(t, 4)
	b.requireReported(t)
	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 2, ""))
	b.requireFull(t, 2)
	b.requireReported(t)

	// A job cancelled, retried while the queue is full: refused.
	res, err := b.q.Retry(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(before[2])}})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, queue.ErrQueueFull)
	require.Equal(t, 5, b.unfinished(t))

	// Another app's job with a null slot counts too.
	_, err = store.Of(b.q).Collection().InsertOne(b.ctx, bson.M{"_id": "raw", "kind": "k", "queue": "q", "state": "available", "capacitySlot": nil})
	require.NoError(t, err)
	require.Equal(t, 6, b.occupied(t))
	b.requireReported(t)
}

// TestCapacityRacingAdmissionsCountWhatHoldsNoSlot: admissions that all
// read the queue before any of them inserts (the admit hook holds each one
// until every one has read) still stop at the capacity, whether the jobs
// already there hold no slot (enqueued before the capacity was set) or
// hold slots at or over a capacity since lowered.
func TestCapacityRacingAdmissionsCountWhatHoldsNoSlot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, b bundle)
	}{
		{"unslotted", func(t *testing.T, b bundle) {
			for range 3 {
				_, err := b.capped(queue.InsertOpts{})
				require.NoError(t, err)
			}
			require.NoError(t, b.q.SetCapacity(b.ctx, "q", 5, ""))
		}},
		{"lowered", func(t *testing.T, b bundle) {
			require.NoError(t, b.q.SetCapacity(b.ctx, "q", 10, ""))
			for range 10 {
				_, err := b.capped(queue.InsertOpts{})
				require.NoError(t, err)
			}
			require.NoError(t, b.q.SetCapacity(b.ctx, "q", 5, ""))
			// Keep the holders of slots 7, 8 and 9: over the new capacity.
			for k := range 7 {
				var holder struct {
					ID string `bson:"_id"`
				}
				require.NoError(t, store.Of(b.q).Collection().FindOne(b.ctx, bson.M{"capacitySlot": "q/" + string(rune('0'+k))}).Decode(&holder))
				_, err := b.q.Cancel(b.ctx, holder.ID)
				require.NoError(t, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			tc.prepare(t, b)
			require.Equal(t, 3, b.unfinished(t))
			const n = 5
			var read sync.WaitGroup
			read.Add(n)
			var calls atomic.Int32
			ctx := queue.WithAdmitHook(b.ctx, func() {
				if calls.Add(1) <= n { // the first read of each; not a second round's
					read.Done()
					read.Wait()
				}
			})
			var admitted atomic.Int32
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					_, err := b.q.Enqueue(ctx, "k", bson.M{}, queue.InsertOpts{Queue: "q"})
					switch {
					case err == nil:
						admitted.Add(1)
					case !errors.Is(err, queue.ErrQueueFull):
						t.Error(err)
					}
				})
			}
			wg.Wait()
			require.EqualValues(t, 2, admitted.Load(), "3 there, capacity 5")
			require.Equal(t, 5, b.unfinished(t))
			b.requireReported(t)
		})
	}
}
