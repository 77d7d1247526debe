package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestUnservedJobsGauge: docket_jobs_unserved counts, per queue, the
// available jobs whose kind no live worker serves on their queue (a kind
// misspelt, a kind served on another queue only); a served kind, a running
// job and a worker that stopped beating do not change it.
func TestUnservedJobsGauge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	var ins []queue.Insert
	for _, j := range []struct{ kind, queue string }{{"ok", ""}, {"send_emial", ""}, {"send_emial", ""}, {"ok", "mail"}, {"ok", "idle"}} {
		ins = append(ins, queue.Insert{Kind: j.kind, Args: bson.M{}, Opts: queue.InsertOpts{Queue: j.queue, RunAt: time.Now().Add(time.Hour)}})
	}
	_, err = q.EnqueueMany(ctx, ins)
	require.NoError(t, err)
	_, err = db.Collection(queue.DefaultCollection).UpdateOne(ctx, bson.M{"queue": "idle"}, bson.M{"$set": bson.M{"state": "running"}})
	require.NoError(t, err)
	require.NoError(t, q.Beat(ctx, queue.WorkerInfo{ID: "w1", Queues: []string{"default", "idle"}, Kinds: []string{"ok"},
		StartedAt: time.Now(), BeatEvery: time.Minute}))
	// A process that stopped beating ten minutes ago serves nothing.
	_, err = db.Collection(queue.DefaultWorkersCollection).InsertOne(ctx, bson.M{"_id": "gone", "queues": bson.A{"default", "mail"},
		"kinds": bson.A{"send_emial", "ok"}, "beatEveryMs": 1000, "lastSeen": store.Of(q).ServerTime(ctx).Add(-10 * time.Minute)})
	require.NoError(t, err)

	got := scrape(t, leaderStats(t, q, "docket_jobs_unserved"))
	for queue, want := range map[string]float64{"default": 2, "mail": 1, "idle": 0} {
		n, ok := value(got, "docket_jobs_unserved", "queue", queue)
		require.True(t, ok, queue)
		require.Equal(t, want, n, queue)
	}
}
