package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/require"
)

// TestRateClaimsForFreeSlots: under a rate with a burst, a worker with a
// backlog claims for its free run slots, and the rate's starts decide how
// many jobs each claim gets, so that several starts come in one claim;
// not one findAndModify per job, as its claim sizing gives a trickle of
// single jobs. 24 jobs under 20/s burst 5: batches of up to 4.
func TestRateClaimsForFreeSlots(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("rated"), queue.Rate{N: 20, Per: time.Second, Burst: 5}, ""))
	b.handle(t, "rated", func(ctx context.Context, j *jobs.Job) error { return nil }, jobs.KindOptions{})
	const n = 24
	ids := make([]string, n)
	for i := range ids {
		ids[i] = b.enqueue(t, "rated", map[string]any{}, queue.InsertOpts{})
	}
	mc, cmds := testdb.Monitored(t)
	q, err := queue.New(mc.Database(store.Of(b.q).Collection().Database().Name()), queue.Config{})
	require.NoError(t, err)
	w, err := worker.New(q, b.reg, worker.Config{Logger: b.log, Concurrency: 10, ClaimBatch: 10,
		PollMin: 5 * time.Millisecond, PollMax: 50 * time.Millisecond})
	require.NoError(t, err)
	w.Start(context.Background())
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	for _, id := range ids {
		b.waitState(t, id, jobs.StateSucceeded)
	}
	single := 0
	for _, c := range cmds() {
		if c == "findAndModify "+store.Of(b.q).Collection().Name() {
			single++
		}
	}
	require.Less(t, single, n/2, "single claims of %d jobs", n)
}
