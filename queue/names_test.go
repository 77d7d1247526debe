package queue_test

import (
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestEnqueueRefusesControlCharactersInNames: a kind or queue name with a
// control character (an escape sequence, a newline that would add a row to
// a table, a tab, DEL, a C1 control) is refused before anything is written,
// naming the field; printable names, '/', '?' and '#' included, are not.
func TestEnqueueRefusesControlCharactersInNames(t *testing.T) {
	b := setup(t)
	for _, name := range []string{"k\x1b]52;c;ZXZpbA==\a", "k\nq  k  99", "k\tx", "k\x7f", "k\u009b2K", "\x00k"} {
		for _, field := range []string{"kind", "queue"} {
			in := queue.Insert{Kind: name}
			if field == "queue" {
				in = queue.Insert{Kind: "k", Opts: queue.InsertOpts{Queue: name}}
			}
			_, err := b.q.Enqueue(b.ctx, in.Kind, nil, in.Opts)
			var ve *queue.ValidationError
			require.ErrorAs(t, err, &ve, "%s %q", field, name)
			require.Equal(t, field, ve.Field)
			require.Contains(t, ve.Reason, "control character")
			require.NotContains(t, err.Error(), "\x1b", "the error quotes the name")
		}
	}
	n, err := b.db.Collection(queue.DefaultCollection).CountDocuments(b.ctx, bson.D{})
	require.NoError(t, err)
	require.Zero(t, n)
	for _, name := range []string{"mail/eu?x#1", "café ☕", "a b"} {
		_, err := b.q.Enqueue(b.ctx, name, nil, queue.InsertOpts{Queue: name})
		require.NoError(t, err, name)
	}
}

// TestPauseRefusesNamesEnqueueRefuses: pausing a queue whose name enqueue
// would refuse (not UTF-8, a control character) is refused and writes
// nothing; resuming takes any stored name, so that a queue another
// application paused can be resumed.
func TestPauseRefusesNamesEnqueueRefuses(t *testing.T) {
	b := setup(t)
	for _, name := range []string{"mail\xff", "mail\x1b[2K", "mail\n"} {
		_, err := b.q.Pause(b.ctx, name, "ops")
		require.Error(t, err, "%q", name)
		require.Contains(t, err.Error(), "queue name")
	}
	n, err := b.db.Collection(queue.DefaultQueuesCollection).CountDocuments(b.ctx, bson.D{})
	require.NoError(t, err)
	require.Zero(t, n, "a refused pause writes nothing")

	_, err = b.db.Collection(queue.DefaultQueuesCollection).InsertOne(b.ctx,
		bson.D{{Key: "_id", Value: "mail\x1b"}, {Key: "paused", Value: true}})
	require.NoError(t, err)
	changed, err := b.q.Resume(b.ctx, "mail\x1b", "ops")
	require.NoError(t, err)
	require.True(t, changed)
}

// TestWorkerFromTheFutureIsNotAlive: a registry document whose lastSeen is
// an hour ahead of the server's clock (another application's) is never
// listed alive, and is flagged; one a second ahead (a replica's clock) is
// alive.
func TestWorkerFromTheFutureIsNotAlive(t *testing.T) {
	b := setup(t)
	now := store.Of(b.q).ServerTime(b.ctx)
	_, err := b.db.Collection(queue.DefaultWorkersCollection).InsertMany(b.ctx, []any{
		bson.M{"_id": "future", "host": "h", "lastSeen": now.Add(time.Hour), "beatEveryMs": 1000},
		bson.M{"_id": "ahead", "host": "h", "lastSeen": now.Add(time.Second), "beatEveryMs": 1000},
	})
	require.NoError(t, err)
	alive, err := b.q.Workers(b.ctx, 0, false)
	require.NoError(t, err)
	require.Len(t, alive, 1)
	require.Equal(t, "ahead", alive[0].ID)
	require.False(t, alive[0].Future)
	alive, err = b.q.Workers(b.ctx, 24*time.Hour, false)
	require.NoError(t, err)
	require.Len(t, alive, 1, "not even within a long --ttl")
	all, err := b.q.Workers(b.ctx, 0, true)
	require.NoError(t, err)
	require.Len(t, all, 2)
	f := all[0]
	if f.ID != "future" {
		f = all[1]
	}
	require.True(t, f.Future)
	require.False(t, f.Alive)
	require.Less(t, f.Age, -50*time.Minute)
}

// TestSettingsOfAnotherAppReadFieldByField: a queues or limits document
// whose _id is not a string is listed as malformed, named by its id, and
// a stamp of another type reads as none, while a good one is read.
func TestSettingsOfAnotherAppReadFieldByField(t *testing.T) {
	b := setup(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	_, err := b.db.Collection(queue.DefaultQueuesCollection).InsertMany(b.ctx, []any{
		bson.D{{Key: "_id", Value: 7}, {Key: "paused", Value: true}, {Key: "capacity", Value: 3}},
		bson.D{{Key: "_id", Value: "q"}, {Key: "paused", Value: true}, {Key: "pausedAt", Value: at}, {Key: "pausedBy", Value: 5},
			{Key: "capacity", Value: 3}, {Key: "capacitySetAt", Value: "noon"}, {Key: "capacitySetBy", Value: "ops"}},
	})
	require.NoError(t, err)
	_, err = b.db.Collection(store.DefaultLimitsCollection).InsertOne(b.ctx, bson.D{{Key: "_id", Value: 8}, {Key: "limit", Value: 2}})
	require.NoError(t, err)

	states, err := b.q.QueueStates(b.ctx)
	require.NoError(t, err)
	require.Len(t, states, 2)
	byName := map[string]queue.QueueState{}
	for _, s := range states {
		byName[s.Queue] = s
	}
	require.Equal(t, "_id is a 32-bit integer, not a queue name", byName[`{"$numberInt":"7"}`].Malformed)
	require.Equal(t, queue.QueueState{Queue: "q", Paused: true, PausedAt: at}, byName["q"])

	caps, err := b.q.QueueCapacities(b.ctx)
	require.NoError(t, err)
	require.Len(t, caps, 2)
	for _, c := range caps {
		if c.Queue == "q" {
			require.Equal(t, queue.QueueCapacity{Queue: "q", Capacity: 3, SetBy: "ops"}, c)
		} else {
			require.Equal(t, "_id is a 32-bit integer, not a queue name", c.Malformed)
		}
	}
	limits, err := b.q.RunLimits(b.ctx)
	require.NoError(t, err)
	require.Len(t, limits, 1)
	require.Equal(t, "_id is a 32-bit integer, not a limit name", limits[0].Malformed)
}
