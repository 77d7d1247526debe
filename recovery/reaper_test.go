package recovery_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

type reaperBundle struct {
	ctx context.Context
	q   *queue.Client
	log *zap.Logger
}

func reaperSetup(t *testing.T) *reaperBundle {
	t.Helper()
	t.Parallel()
	ctx := context.Background()
	q, err := queue.New(testdb.NewDB(t), queue.Config{})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(ctx))
	return &reaperBundle{ctx: ctx, q: q, log: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))}
}

func (b *reaperBundle) reaper(t *testing.T, cfg recovery.ReaperConfig) *recovery.Reaper {
	t.Helper()
	cfg.Logger = b.log
	r, err := recovery.NewReaper(b.q, cfg)
	require.NoError(t, err)
	return r
}

// insertFinished inserts n jobs that finished in state s at finishedAt.
func (b *reaperBundle) insertFinished(t *testing.T, n int, s jobs.State, finishedAt time.Time) {
	t.Helper()
	const chunk = 1000
	for from := 0; from < n; from += chunk {
		docs := make([]any, 0, chunk)
		for i := from; i < min(n, from+chunk); i++ {
			docs = append(docs, bson.D{
				{Key: "_id", Value: fmt.Sprintf("%s-%d-%07d", s, finishedAt.UnixNano(), i)}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "default"},
				{Key: "args", Value: bson.D{}}, {Key: "state", Value: s}, {Key: "runAt", Value: finishedAt},
				{Key: "finishedAt", Value: finishedAt}, {Key: "createdAt", Value: finishedAt}, {Key: "updatedAt", Value: finishedAt},
			})
		}
		_, err := store.Of(b.q).Collection().InsertMany(b.ctx, docs)
		require.NoError(t, err)
	}
}

func (b *reaperBundle) count(t *testing.T, filter bson.D) int64 {
	t.Helper()
	n, err := store.Of(b.q).Collection().CountDocuments(b.ctx, filter)
	require.NoError(t, err)
	return n
}

// TestReaperRetentionDeletesEveryBatch: issue 10 scenario 7. One pass
// deletes every job past its retention, batch after batch, not one batch
// per state.
func TestReaperRetentionDeletesEveryBatch(t *testing.T) {
	b := reaperSetup(t)
	old := time.Now().Add(-48 * time.Hour)
	b.insertFinished(t, 260, jobs.StateSucceeded, old)
	b.insertFinished(t, 130, jobs.StateCancelled, old)
	b.insertFinished(t, 5, jobs.StateSucceeded, time.Now()) // within retention
	r := b.reaper(t, recovery.ReaperConfig{Batch: 50})
	_, err := r.RunOnce(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 5, b.count(t, bson.D{}))
}

// TestReaperRetentionStopsAtItsBudget: a pass ends when its retention
// budget is spent (after at least one batch per state); the next goes on.
func TestReaperRetentionStopsAtItsBudget(t *testing.T) {
	b := reaperSetup(t)
	b.insertFinished(t, 30, jobs.StateSucceeded, time.Now().Add(-48*time.Hour))
	r := b.reaper(t, recovery.ReaperConfig{Batch: 10, RetentionBudget: time.Nanosecond})
	_, err := r.RunOnce(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 20, b.count(t, bson.D{}))
	_, err = b.reaper(t, recovery.ReaperConfig{Batch: 10}).RunOnce(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 0, b.count(t, bson.D{}))
}

// TestReaperPassGoesOnPastAnUndecodableJob: issue 10 scenario 2, through
// the reaper's pass: a running job with a field of the wrong type is buried
// and the good one is re-queued, and retention still runs.
func TestReaperPassGoesOnPastAnUndecodableJob(t *testing.T) {
	b := reaperSetup(t)
	res, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	j, err := store.Of(b.q).Claim(b.ctx, store.ClaimParams{Owner: "w1", Queues: []string{"default"}, Kinds: []string{"k"}, Lease: time.Minute})
	require.NoError(t, err)
	require.NotNil(t, j)
	past := time.Now().Add(-time.Hour)
	_, err = store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": res.ID}, bson.M{"$set": bson.M{"leaseExpiresAt": past}})
	require.NoError(t, err)
	_, err = store.Of(b.q).Collection().InsertOne(b.ctx, bson.D{
		{Key: "_id", Value: "bad"}, {Key: "kind", Value: "k"}, {Key: "state", Value: "running"}, {Key: "attempt", Value: "x"},
		{Key: "errors", Value: 5}, {Key: "leaseToken", Value: "t"}, {Key: "leaseExpiresAt", Value: past},
	})
	require.NoError(t, err)
	b.insertFinished(t, 3, jobs.StateSucceeded, time.Now().Add(-48*time.Hour))

	got, err := b.reaper(t, recovery.ReaperConfig{}).RunOnce(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, got.Requeued)
	require.Equal(t, 1, got.Buried)
	require.EqualValues(t, 1, b.count(t, bson.D{{Key: "_id", Value: "bad"}, {Key: "state", Value: "dead"}}))
	require.EqualValues(t, 1, b.count(t, bson.D{{Key: "_id", Value: res.ID}, {Key: "state", Value: "available"}}))
	require.EqualValues(t, 0, b.count(t, bson.D{{Key: "state", Value: "succeeded"}}))
}

// TestReaperPassClearsNullUniqueKeys: issue 10 scenario 12. A uniqueKey
// another app wrote as null is cleared by the next pass, so the next such
// job is not refused by the unique index.
func TestReaperPassClearsNullUniqueKeys(t *testing.T) {
	b := reaperSetup(t)
	insert := func(id string) error {
		_, err := store.Of(b.q).Collection().InsertOne(b.ctx, bson.D{
			{Key: "_id", Value: id}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "default"}, {Key: "args", Value: bson.D{}},
			{Key: "state", Value: "available"}, {Key: "runAt", Value: time.Now()}, {Key: "uniqueKey", Value: nil},
		})
		return err
	}
	require.NoError(t, insert("n1"))
	require.Error(t, insert("n2"), "the unique index refuses a second null")
	_, err := b.reaper(t, recovery.ReaperConfig{}).RunOnce(b.ctx)
	require.NoError(t, err)
	require.NoError(t, insert("n2"))
	require.EqualValues(t, 0, b.count(t, bson.D{{Key: "_id", Value: "n1"}, {Key: "uniqueKey", Value: bson.D{{Key: "$exists", Value: true}}}}))
}

// TestMeasureRetentionRate measures how many finished jobs one reaper pass
// deletes per second on the test server; set DOCKET_MEASURE_RETENTION to
// the number of jobs to run it (figures in docs/CONCEPTS.md, under
// Retention).
func TestMeasureRetentionRate(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("DOCKET_MEASURE_RETENTION"))
	if n <= 0 {
		t.Skip("set DOCKET_MEASURE_RETENTION=<jobs> to measure")
	}
	b := reaperSetup(t)
	b.insertFinished(t, n, jobs.StateSucceeded, time.Now().Add(-48*time.Hour))
	r := b.reaper(t, recovery.ReaperConfig{RetentionBudget: time.Hour})
	start := time.Now()
	_, err := r.RunOnce(b.ctx)
	require.NoError(t, err)
	elapsed := time.Since(start)
	require.EqualValues(t, 0, b.count(t, bson.D{}))
	t.Logf("deleted %d finished jobs in %s: %.0f jobs/s (batch %d)", n, elapsed, float64(n)/elapsed.Seconds(), recovery.DefaultReapBatch)
}

// TestZeroRetentionMeansTheDefault: the one rule of docket's settings (zero
// is the default) holds for both retentions, and negative keeps forever.
func TestZeroRetentionMeansTheDefault(t *testing.T) {
	t.Parallel()
	d := recovery.ReaperConfig{}.WithDefaults()
	require.Equal(t, recovery.DefaultSucceededRetention, d.SucceededRetention)
	require.Equal(t, recovery.KeepForever, d.DeadRetention)
	require.Equal(t, recovery.DefaultDeadRetention, d.DeadRetention)
	set := recovery.ReaperConfig{SucceededRetention: -time.Hour, DeadRetention: 72 * time.Hour}.WithDefaults()
	require.Equal(t, -time.Hour, set.SucceededRetention)
	require.Equal(t, 72*time.Hour, set.DeadRetention)
}

// TestReaperPassSparesALiveWorkersJobsForOneLease: issue 22. A pass leaves
// the expired jobs of a worker that still beats in the registry for one more
// lease, goes on past them batch after batch to the jobs of workers that
// died, and reaps the live worker's jobs once that lease has passed too.
func TestReaperPassSparesALiveWorkersJobsForOneLease(t *testing.T) {
	b := reaperSetup(t)
	require.NoError(t, b.q.Beat(b.ctx, queue.WorkerInfo{ID: "slow", BeatEvery: 10 * time.Second}))
	for _, owner := range []string{"slow", "slow", "dead", "dead"} {
		res, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
		require.NoError(t, err)
		j, err := store.Of(b.q).Claim(b.ctx, store.ClaimParams{Owner: owner, Queues: []string{"default"}, Kinds: []string{"k"}, Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, res.ID, j.ID)
	}
	// expire sets every lease, of a minute, as expired ago.
	expire := func(ago time.Duration) {
		exp := time.Now().Add(-ago)
		_, err := store.Of(b.q).Collection().UpdateMany(b.ctx, bson.M{"state": "running"},
			bson.M{"$set": bson.M{"leaseExpiresAt": exp, "heartbeatAt": exp.Add(-time.Minute)}})
		require.NoError(t, err)
	}
	expire(30 * time.Second)
	r := b.reaper(t, recovery.ReaperConfig{Batch: 1})
	got, err := r.RunOnce(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 2, got.Requeued, "the dead worker's jobs, one batch at a time")
	require.EqualValues(t, 2, b.count(t, bson.D{{Key: "owner", Value: "slow"}, {Key: "state", Value: "running"}}))

	// Past grace (5 s) and one more lease: reaped, alive or not.
	expire(66 * time.Second)
	got, err = r.RunOnce(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 2, got.Requeued)
	require.Zero(t, got.Spared)
	require.EqualValues(t, 4, b.count(t, bson.D{{Key: "state", Value: "available"}}))
}

// TestReaperPassCleansIdleRatePartitions: a pass deletes the documents of
// partitions of a partitioned rate whose tat is RatePartitionIdle past,
// at most a batch of them, and keeps the others.
func TestReaperPassCleansIdleRatePartitions(t *testing.T) {
	b := reaperSetup(t)
	parts := store.Of(b.q).Collection().Database().Collection(store.DefaultRatePartsCollection)
	old := time.Now().Add(-store.RatePartitionIdle - time.Minute)
	_, err := parts.InsertMany(b.ctx, []any{
		bson.D{{Key: "_id", Value: "kind:k/1"}, {Key: "tat", Value: old}, {Key: "starts", Value: 1}},
		bson.D{{Key: "_id", Value: "kind:k/2"}, {Key: "tat", Value: old}, {Key: "starts", Value: 1}},
		bson.D{{Key: "_id", Value: "kind:k/3"}, {Key: "tat", Value: old}, {Key: "starts", Value: 1}},
		bson.D{{Key: "_id", Value: "kind:k/4"}, {Key: "tat", Value: time.Now().Add(time.Minute)}, {Key: "starts", Value: 1}},
	})
	require.NoError(t, err)
	r := b.reaper(t, recovery.ReaperConfig{Batch: 2})
	_, err = r.RunOnce(b.ctx)
	require.NoError(t, err)
	n, err := parts.CountDocuments(b.ctx, bson.D{})
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "a batch of the idle ones")
	_, err = r.RunOnce(b.ctx)
	require.NoError(t, err)
	n, err = parts.CountDocuments(b.ctx, bson.D{})
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the one whose tat is ahead is kept")
}
