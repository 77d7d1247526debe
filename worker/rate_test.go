package worker_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/require"
)

// TestRateBoundsStartsWithClaimsAhead: a rate bounds when handlers start,
// with claiming ahead on (the default Prefetch). While both run slots run
// long jobs of another kind, the worker must not claim the rated kind
// ahead at its rate and start the pile at once when the slots free (a
// rate of 2/s, burst 1 once started 9–10 handlers within one second). In
// any second at most N + burst + ⌈RateStartLag/T⌉ = 2 + 1 + 1 start, for a
// plain and a partitioned rate.
func TestRateBoundsStartsWithClaimsAhead(t *testing.T) {
	for _, by := range []string{"", "c"} {
		t.Run("by="+by, func(t *testing.T) {
			b := setup(t)
			r := queue.Rate{N: 2, Per: time.Second, Burst: 1, By: by}
			require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("rated"), r, ""))
			var mu sync.Mutex
			var starts []time.Time
			done := make(chan struct{}, 100)
			b.handle(t, "rated", func(ctx context.Context, j *jobs.Job) error {
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
				done <- struct{}{}
				return nil
			}, jobs.KindOptions{})
			b.handle(t, "long", func(ctx context.Context, j *jobs.Job) error {
				time.Sleep(2500 * time.Millisecond)
				return nil
			}, jobs.KindOptions{})
			const n = 12
			for range n {
				b.enqueue(t, "rated", map[string]any{"c": 1}, queue.InsertOpts{})
			}
			b.start(t, worker.Config{Concurrency: 2, ClaimBatch: 10})
			for range 2 { // a few rated starts: handlers look fast, so the worker claims ahead
				<-done
			}
			for range 2 {
				b.enqueue(t, "long", map[string]any{}, queue.InsertOpts{})
			}
			for range n - 2 {
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					t.Fatal("the rated jobs did not all run")
				}
			}
			mu.Lock()
			defer mu.Unlock()
			bound := r.N + 1 + int((store.RateStartLag+r.Per/2-1)/(r.Per/2))
			require.LessOrEqual(t, mostInWindow(starts, r.Per), bound, "starts: %v", starts)
		})
	}
}

// mostInWindow is the most of times in any closed window of w.
func mostInWindow(times []time.Time, w time.Duration) int {
	times = slices.Clone(times)
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	most, from := 0, 0
	for to := range times {
		for times[to].Sub(times[from]) > w {
			from++
		}
		most = max(most, to-from+1)
	}
	return most
}
