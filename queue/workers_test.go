package queue_test

import (
	"testing"
	"time"

	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestWorkersRegistry: beats are listed as alive by the server's clock; a
// process is left out once it missed its beats (or the listing's ttl),
// forgotten an hour later; documents another app wrote with fields of
// other types are listed with what can be read, never alive, and stop
// nothing; Unregister removes a process.
func TestWorkersRegistry(t *testing.T) {
	b := setup(t)
	started := time.Now().Add(-time.Minute)
	for _, id := range []string{"h-1-a", "h-2-b"} {
		require.NoError(t, b.q.Beat(b.ctx, queue.WorkerInfo{ID: id, Host: "h", PID: 1, Version: "v1", Queues: []string{"default"},
			Kinds: []string{"k"}, Concurrency: 4, Running: 2, StartedAt: started, BeatEvery: time.Minute}))
	}
	coll := b.db.Collection(queue.DefaultWorkersCollection)
	_, err := coll.InsertMany(b.ctx, []any{
		bson.M{"_id": "old-1-c", "host": "h", "lastSeen": time.Now().Add(-2 * time.Hour), "beatEveryMs": 1000},
		bson.M{"_id": "quiet-1-d", "host": "h", "lastSeen": time.Now().Add(-10 * time.Second), "beatEveryMs": 1000},
		bson.M{"_id": 42, "host": 7, "pid": "x", "queues": "default", "lastSeen": "yesterday"},
	})
	require.NoError(t, err)

	alive, err := b.q.Workers(b.ctx, 0, false)
	require.NoError(t, err)
	require.Len(t, alive, 2)
	w := alive[0]
	require.Equal(t, "h-1-a", w.ID)
	require.True(t, w.Alive)
	require.Equal(t, []string{"default"}, w.Queues)
	require.EqualValues(t, 2, w.Running)
	require.EqualValues(t, 4, w.Concurrency)
	require.WithinDuration(t, started, w.StartedAt, time.Millisecond)
	require.Less(t, w.Age, 30*time.Second)

	all, err := b.q.Workers(b.ctx, 0, true)
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, w := range all {
		ids[w.ID] = w.Alive
	}
	require.Equal(t, map[string]bool{"h-1-a": true, "h-2-b": true, "quiet-1-d": false, `{"$numberInt":"42"}`: false}, ids,
		"the one not seen for two hours was forgotten")
	n, err := coll.CountDocuments(b.ctx, bson.M{"_id": "old-1-c"})
	require.NoError(t, err)
	require.Zero(t, n)

	within, err := b.q.Workers(b.ctx, time.Minute, false)
	require.NoError(t, err)
	require.Len(t, within, 3, "--ttl 1m takes in the one seen 10 s ago")

	require.NoError(t, b.q.Unregister(b.ctx, "h-2-b"))
	alive, err = b.q.Workers(b.ctx, 0, false)
	require.NoError(t, err)
	require.Len(t, alive, 1)
	require.Error(t, b.q.Beat(b.ctx, queue.WorkerInfo{}), "a beat needs an id")
}
