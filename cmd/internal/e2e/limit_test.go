package e2e

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestLimitHoldsAcrossWorkersAndSIGKILL: three worker processes, each
// configured with `--limits kind:record=2` and a concurrency of 4, run 12
// jobs of 300 ms; one is SIGKILLed while it runs a job. A sampler of the
// database never sees more than 2 record jobs running, also while the
// killed worker's lease holds (its slot is not given to another until the
// reaper takes the job back), and every job succeeds, the killed one run
// again by another worker.
func TestLimitHoldsAcrossWorkersAndSIGKILL(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	ctx := context.Background()
	ins := make([]queue.Insert, 12)
	for i := range ins {
		ins[i] = queue.Insert{Kind: "record", Args: bson.M{"sleepMs": 300}}
	}
	enqueueMany(t, q, ins)

	var maxRunning atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			n, err := db.Collection("jobs").CountDocuments(ctx, bson.M{"kind": "record", "state": "running"})
			if err == nil && n > maxRunning.Load() {
				maxRunning.Store(n)
			}
		}
	}()

	args := append([]string{"--limits", "kind:record=2", "--concurrency", "4"}, fastWorker...)
	workers := make([]*proc, 3)
	ids := map[string]*proc{}
	for i := range workers {
		workers[i] = startWorker(t, db, "worker", args...)
		ids[workers[i].workerID()] = workers[i]
	}

	// Kill a worker mid-job.
	victimJob := killMidJob(t, db, "record", ids)
	// While its lease holds (2 s), its slot stays taken: at most one more
	// record job runs.
	var ls []queue.RunLimit
	must(t, "read the run limits", func() (err error) { ls, err = q.RunLimits(ctx); return err })
	require.Len(t, ls, 1)
	require.Equal(t, 2, ls[0].Limit, "set by the workers' configuration")

	require.Eventually(t, func() bool {
		n, err := db.Collection("jobs").CountDocuments(ctx, bson.M{"kind": "record", "state": bson.M{"$ne": "succeeded"}})
		return err == nil && n == 0
	}, 90*time.Second, 50*time.Millisecond, "every job succeeds")
	close(stop)
	sampler.Wait()

	require.LessOrEqual(t, maxRunning.Load(), int64(2), "record jobs running at once, sampled")
	require.Equal(t, int64(2), maxRunning.Load(), "the limit was reached")
	execs := executions(t, db)
	require.GreaterOrEqual(t, len(execs[victimJob]), 2, "the killed worker's job ran again")
	require.Zero(t, count(t, db.Collection("jobs"), bson.M{"kindRunSlot": bson.M{"$exists": true}}), "no slot left held")
}
