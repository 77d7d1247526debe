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

// TestWorkersRegistryProcessLimits: a beat stores the process's limits as
// a document, an empty one when there are none, and a listing reads them
// back; a name some servers refuse as a field name (a '.', as in a kind
// "email.send") is left out rather than failing the beat. Documents
// another app wrote with processLimits of other types, or values that are
// not whole numbers from 1 to MaxLimit, are listed, what cannot be read
// left out.
func TestWorkersRegistryProcessLimits(t *testing.T) {
	b := setup(t)
	beat := func(id string, limits map[string]int) {
		t.Helper()
		require.NoError(t, b.q.Beat(b.ctx, queue.WorkerInfo{ID: id, Host: "h", Queues: []string{"reports"}, Concurrency: 4,
			ProcessLimits: limits, StartedAt: time.Now(), BeatEvery: time.Minute}))
	}
	beat("limited", map[string]int{"queue:reports": 3, "kind:email": 2, "kind:email.send": 4})
	beat("unlimited", nil)
	coll := b.db.Collection(queue.DefaultWorkersCollection)
	raw, err := coll.FindOne(b.ctx, bson.M{"_id": "limited"}).Raw()
	require.NoError(t, err)
	require.Equal(t, `{"kind:email": {"$numberInt":"2"},"queue:reports": {"$numberInt":"3"}}`, raw.Lookup("processLimits").String(),
		"a document in name order, without the dotted name")
	raw, err = coll.FindOne(b.ctx, bson.M{"_id": "unlimited"}).Raw()
	require.NoError(t, err)
	require.Equal(t, "{}", raw.Lookup("processLimits").String(), "always a document")

	seen := time.Now()
	malformed := map[string]any{
		"a-string": "kind:email=2",
		"an-array": bson.A{"kind:email", 2},
		"a-null":   nil,
		"values": bson.D{
			{Key: "kind:x", Value: "x"}, {Key: "kind:frac", Value: 2.5}, {Key: "kind:null", Value: nil},
			{Key: "kind:zero", Value: 0}, {Key: "kind:neg", Value: int64(-3)}, {Key: "kind:huge", Value: int64(1) << 62},
			{Key: "kind:big-double", Value: 1e300}, {Key: "kind:over", Value: queue.MaxLimit + 1}, {Key: "kind:doc", Value: bson.D{{Key: "n", Value: 2}}},
			{Key: "kind:whole-double", Value: 5.0}, {Key: "kind:long", Value: int64(6)}, {Key: "queue:\x1b[2Kq", Value: int32(7)},
		},
	}
	for id, v := range malformed {
		_, err := coll.InsertOne(b.ctx, bson.M{"_id": id, "host": "other-app", "lastSeen": seen, "beatEveryMs": 60_000, "processLimits": v})
		require.NoError(t, err, id)
	}

	list, err := b.q.Workers(b.ctx, 0, false)
	require.NoError(t, err)
	got := map[string]map[string]int{}
	for _, w := range list {
		got[w.ID] = w.ProcessLimits
	}
	require.Equal(t, map[string]map[string]int{
		"limited":   {"kind:email": 2, "queue:reports": 3},
		"unlimited": nil,
		"a-string":  nil, "an-array": nil, "a-null": nil,
		"values": {"kind:whole-double": 5, "kind:long": 6, "queue:\x1b[2Kq": 7},
	}, got)
}

// TestUnlistedLimitName: the names Beat leaves out are those not every
// server takes as a field name.
func TestUnlistedLimitName(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"kind:email": false, "queue:reports": false, "kind:e-mail_2": false, "kind:ü": false, "queue:$x": false,
		"kind:email.send": true, "$kind": true, "kind:a\x00b": true, "kind:m\xff": true,
	} {
		require.Equal(t, want, queue.UnlistedLimitName(name), "%q", name)
	}
}
