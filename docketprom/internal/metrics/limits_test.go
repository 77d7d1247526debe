package metrics_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/docketq/docket/docketprom"
	"github.com/docketq/docket/docketprom/internal/metrics"
	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap/zaptest"
)

// TestLimitGauges: the leader exports each concurrency limit's running
// jobs and limit (and a partition limit's N, partitions running and
// running full), each rate's starts, steady rate and burst used, and the
// jobs waiting on each; a rate another app wrote under a name with bytes
// that are not UTF-8 breaks no scrape (labelValue).
func TestLimitGauges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(ctx))
	for range 5 {
		_, err := q.Enqueue(ctx, "k", nil, queue.InsertOpts{})
		require.NoError(t, err)
	}
	require.NoError(t, q.SetLimit(ctx, queue.KindLimit("k"), 3, ""))
	require.NoError(t, q.SetPartitionLimit(ctx, queue.KindLimit("k"), "c", 4, ""))
	require.NoError(t, q.SetRate(ctx, queue.KindLimit("p"), queue.Rate{N: 1, Per: time.Hour, Burst: 1, By: "customerId"}, ""))
	require.NoError(t, q.SetRate(ctx, queue.KindLimit("k"), queue.Rate{N: 2, Per: time.Hour, Burst: 2}, ""))
	_, err = db.Collection(store.DefaultLimitsCollection).InsertOne(ctx, bson.M{"_id": "rate:kind:bad\xff", "rate": 1, "periodMs": 1000, "burst": 1})
	require.NoError(t, err)
	got, err := store.Of(q).ClaimBatch(ctx, store.ClaimParams{Owner: "w", Queues: []string{"default"}, Kinds: []string{"k"}, Lease: time.Minute}, 5)
	require.NoError(t, err)
	require.Len(t, got, 2, "the rate's burst")

	qs, err := metrics.NewQueueStats(metrics.QueueStatsConfig{Queue: q, Leader: termLeader{leadership.Term{Token: "t"}}, Interval: time.Minute, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	reg.MustRegister(qs)
	srv := httptest.NewServer(docketprom.Handler(reg, docketprom.NewHealth(func(context.Context) error { return nil }, 0)))
	t.Cleanup(srv.Close)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); qs.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	var fams = scrape(t, srv.URL)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		fams = scrape(c, srv.URL)
		_, ok := value(fams, "docket_limit_running_jobs", "limit", "kind:k")
		assert.True(c, ok, "no docket_limit_running_jobs sample yet")
	}, 10*time.Second, 50*time.Millisecond)
	for _, c := range []struct {
		name string
		want float64
	}{
		{"docket_limit_running_jobs", 2},
		{"docket_limit_max_running_jobs", 3},
		{"docket_limit_partition_max_running_jobs", 4},
		{"docket_limit_partitions_running", 1}, // the jobs have no c: one partition, of null
		{"docket_limit_partitions_full", 0},
		{"docket_rate_limit_starts_total", 2},
		{"docket_rate_limit_burst_used", 2},
		{"docket_rate_limit_per_second", 2.0 / 3600},
	} {
		v, ok := value(fams, c.name, "limit", "kind:k")
		require.True(t, ok, c.name)
		require.InDelta(t, c.want, v, 1e-9, c.name)
	}
	v, ok := value(fams, "docket_rate_limit_partitions", "limit", "kind:p")
	require.True(t, ok, "a partitioned rate's partitions")
	require.Zero(t, v)
	_, ok = value(fams, "docket_rate_limit_partitions_spent", "limit", "kind:p")
	require.True(t, ok)
	_, ok = value(fams, "docket_rate_limit_burst_used", "limit", "kind:p")
	require.False(t, ok, "a partitioned rate has no one burst")
	// Waiting is exported for the limit and for the rate: the same 3 jobs.
	v, _ = value(fams, "docket_limit_waiting_jobs", "limit", "kind:k")
	require.Equal(t, 3.0, v)
	require.Len(t, fams["docket_rate_limit_per_second"].GetMetric(), 3, "the rate of the odd name is exported (beside k's and p's), and breaks no scrape")
}
