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
// an array of {name, n} in name order, an empty one when there are none,
// and a listing reads them back, any name as it is (a '.', as in a kind
// "email.send", is no field name every server takes; as a value it is
// stored like any other). Documents another app wrote with processLimits
// of other types, or elements that are not {name: string, n: a whole
// number from 1 to MaxLimit}, are listed, what cannot be read left out.
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
	require.Equal(t, `[{"name": "kind:email","n": {"$numberInt":"2"}},{"name": "kind:email.send","n": {"$numberInt":"4"}},{"name": "queue:reports","n": {"$numberInt":"3"}}]`,
		raw.Lookup("processLimits").String(), "an array in name order")
	raw, err = coll.FindOne(b.ctx, bson.M{"_id": "unlimited"}).Raw()
	require.NoError(t, err)
	require.Equal(t, "[]", raw.Lookup("processLimits").String(), "always an array")

	seen := time.Now()
	limit := func(name, n any) bson.D { return bson.D{{Key: "name", Value: name}, {Key: "n", Value: n}} }
	malformed := map[string]any{
		"a-string":   "kind:email=2",
		"a-document": bson.D{{Key: "kind:email", Value: 2}},
		"a-null":     nil,
		"values": bson.A{
			limit("kind:x", "x"), limit("kind:frac", 2.5), limit("kind:null", nil),
			limit("kind:zero", 0), limit("kind:neg", int64(-3)), limit("kind:huge", int64(1)<<62),
			limit("kind:big-double", 1e300), limit("kind:over", queue.MaxLimit+1), limit("kind:doc", bson.D{{Key: "n", Value: 2}}),
			limit(int32(5), 2), limit(nil, 2), bson.D{{Key: "n", Value: 2}}, "kind:bare", int32(3),
			limit("kind:whole-double", 5.0), limit("kind:long", int64(6)), limit("queue:\x1b[2Kq", int32(7)),
			limit("kind:long", int64(8)), limit("kind:a.b", 9),
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
		"unlimited": nil,
		"limited":   {"kind:email": 2, "kind:email.send": 4, "queue:reports": 3},
		"a-string":  nil, "a-document": nil, "a-null": nil,
		"values": {"kind:whole-double": 5, "kind:long": 6, "queue:\x1b[2Kq": 7, "kind:a.b": 9},
	}, got)
}
