package e2e

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestRateHoldsAcrossWorkersAndSIGKILL: three worker processes, each
// configured with `--rates "kind:record=5/s burst 2"`, run 30 record jobs
// that call a downstream (the executions the handler writes first); one
// worker is SIGKILLed while it runs a job. Every job succeeds, the killed
// one run again, and the downstream, which allows 10 calls a second, never
// sees more in any second: the rate's 5 plus its burst of 2, plus the
// starts of one queue.RateStartLag (3 at 5/s) that a claim may take after
// its reservation (see queue/rate.go). The rate's stored reservations
// never pass N per second plus the burst.
func TestRateHoldsAcrossWorkersAndSIGKILL(t *testing.T) {
	t.Parallel()
	const n, per, burst, downstream = 5, time.Second, 2, 10
	lag := int(math.Ceil(float64(queue.RateStartLag) / float64(per/n)))
	require.Equal(t, downstream, n+burst+lag)
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	ctx := context.Background()
	ins := make([]queue.Insert, 30)
	for i := range ins {
		ins[i] = queue.Insert{Kind: "record", Args: bson.M{"sleepMs": 200}}
	}
	enqueueMany(t, q, ins)

	args := append([]string{"--rates", "kind:record=5/s burst 2", "--concurrency", "4"}, fastWorker...)
	ids := map[string]*proc{}
	start := time.Now()
	for range 3 {
		p := startWorker(t, db, "worker", args...)
		ids[p.workerID()] = p
	}
	victimJob := killMidJob(t, db, "record", ids)

	require.Eventually(t, func() bool {
		n, err := db.Collection("jobs").CountDocuments(ctx, bson.M{"kind": "record", "state": bson.M{"$ne": "succeeded"}})
		return err == nil && n == 0
	}, 90*time.Second, 50*time.Millisecond, "every job succeeds")
	elapsed := time.Since(start)

	execs := executions(t, db)
	require.GreaterOrEqual(t, len(execs[victimJob]), 2, "the killed worker's job ran again")
	var calls, claims []time.Time
	for _, es := range execs {
		for _, e := range es {
			calls = append(calls, e["at"].(bson.DateTime).Time())
			claims = append(claims, e["claimedAt"].(bson.DateTime).Time())
		}
	}
	most := func(ts []time.Time) int {
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		m, lo := 0, 0
		for hi := range ts {
			for ts[hi].Sub(ts[lo]) >= per {
				lo++
			}
			m = max(m, hi-lo+1)
		}
		return m
	}
	mostCalls, mostClaims := most(calls), most(claims)
	t.Logf("%d calls in %s; at most %d calls and %d claims in one second", len(calls), elapsed.Round(time.Millisecond), mostCalls, mostClaims)
	require.LessOrEqual(t, mostCalls, downstream, "calls the downstream saw in one second")
	require.LessOrEqual(t, mostClaims, downstream, "claims in one second")

	rs, err := q.RateLimits(ctx)
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, queue.Rate{N: n, Per: per, Burst: burst}, rs[0].Rate, "set by the workers' configuration")
	require.GreaterOrEqual(t, rs[0].Starts, int64(len(calls)), "every call had its start reserved")
	require.LessOrEqual(t, float64(rs[0].Starts), float64(n)*elapsed.Seconds()/per.Seconds()+burst, "starts reserved since the workers started")
}
