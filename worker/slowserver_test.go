package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/internal/testdb/slowproxy"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// On a server where every command takes seconds, one at a time (devdb over
// a big collection, an overloaded primary), a worker with its default
// lease makes the most of it: no claim is given up while the server works
// on it (and given back), no job is claimed twice, every job runs once.
// With a fixed 10 s claim deadline, a batch claim (three commands of 3.5 s
// in line) timed out and gave its jobs back.
func TestSlowServerNoClaimGivenBack(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of a slow server")
	}
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	fastQ, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, fastQ.EnsureIndexes(ctx))
	core, logs := observer.New(zap.InfoLevel)
	log := zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))
	reg := jobs.NewRegistry()
	require.NoError(t, reg.Add("noop", jobs.HandlerFunc(func(context.Context, *jobs.Job) error { return nil }), jobs.KindOptions{}))
	const n = 5
	ids := make([]string, n)
	for i := range ids {
		// Runnable a second ago: a backlog, which the worker claims in
		// batches after its first single claims.
		res, err := fastQ.Enqueue(ctx, "noop", nil, queue.InsertOpts{RunAt: time.Now().Add(-time.Second)})
		require.NoError(t, err)
		ids[i] = res.ID
	}

	proxy := slowproxy.Start(t, testdb.ProxyTarget(t), slowproxy.Config{Delay: 3500 * time.Millisecond, Serial: true})
	mc, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + proxy.Addr() + "/?directConnection=true"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = mc.Disconnect(context.Background()) })
	slowQ, err := queue.New(mc.Database(db.Name()), queue.Config{})
	require.NoError(t, err)

	cfg := worker.Config{Concurrency: 3, Lease: worker.DefaultLease, HeartbeatInterval: worker.DefaultHeartbeatInterval, Logger: log}
	w, err := worker.New(slowQ, reg, cfg)
	require.NoError(t, err)
	w.Start(context.Background())
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		done, err := db.Collection(fastQ.CollectionName()).CountDocuments(ctx, bson.D{{Key: "state", Value: jobs.StateSucceeded}})
		require.NoError(c, err)
		assert.EqualValues(c, n, done)
	}, 6*time.Minute, 500*time.Millisecond, "the jobs never all succeeded")

	require.Zero(t, w.Stats().ReleasedUnstarted, "claims given back (timed out while the server worked on them, or answered with too little lease)")
	require.Zero(t, logs.FilterMessage("claim failed; retrying").Len(), "claims that failed")
	for _, id := range ids {
		j, err := fastQ.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, 1, j.Attempt, "job %s ran more than once", id)
	}
}
