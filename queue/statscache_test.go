package queue_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TestStoredStatsRoundTrip: counts taken and stored read back the same,
// with who counted and when; the jobs that ended within the window are
// counted per minute, older ones not.
func TestStoredStatsRoundTrip(t *testing.T) {
	b := setup(t)
	_, err := b.q.StoredStats(b.ctx)
	require.ErrorIs(t, err, queue.ErrNoStoredStats)

	now := time.Now().UTC().Truncate(time.Millisecond)
	docs := []any{
		bson.M{"_id": "a1", "kind": "k", "queue": "a", "state": "available", "runAt": now.Add(-time.Minute)},
		bson.M{"_id": "a2", "kind": "j", "queue": "a", "state": "succeeded", "runAt": now, "finishedAt": now.Add(-10 * time.Minute)},
		bson.M{"_id": "a3", "kind": "j", "queue": "a", "state": "succeeded", "runAt": now, "finishedAt": now.Add(-3 * time.Hour)},
		bson.M{"_id": "b1", "kind": "k", "queue": "b", "state": "dead", "runAt": now, "finishedAt": now.Add(-5 * time.Minute)},
	}
	_, err = store.Of(b.q).Collection().InsertMany(b.ctx, docs)
	require.NoError(t, err)

	counted, err := b.q.CountStats(b.ctx)
	require.NoError(t, err)
	counted.By, counted.Term, counted.TermToken, counted.Every = "w1", 7, "tok", 15*time.Second
	stored, err := b.q.StoreStats(b.ctx, counted)
	require.NoError(t, err)
	require.True(t, stored)

	got, err := b.q.StoredStats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, "w1", got.By)
	require.EqualValues(t, 7, got.Term)
	require.Equal(t, "tok", got.TermToken)
	require.Equal(t, 15*time.Second, got.Every)
	require.True(t, got.CountedAt.Equal(counted.CountedAt))
	require.False(t, got.ReadAt.IsZero())
	require.Less(t, got.Age(), time.Minute)
	require.Zero(t, got.Unreadable)
	by := map[string]queue.QueueStats{}
	for _, qs := range got.Queues {
		by[qs.Queue] = qs
	}
	require.Equal(t, map[string]map[jobs.State]int64{"k": {"available": 1}, "j": {"succeeded": 2}}, by["a"].Counts)
	require.True(t, by["a"].OldestAvailable.Equal(now.Add(-time.Minute)))
	require.Equal(t, map[string]map[jobs.State]int64{"k": {"dead": 1}}, by["b"].Counts)
	require.Equal(t, map[time.Time]int64{now.Add(-10 * time.Minute).Truncate(time.Minute): 1}, got.Finished[jobs.StateSucceeded])
	require.Equal(t, map[time.Time]int64{now.Add(-5 * time.Minute).Truncate(time.Minute): 1}, got.Finished[jobs.StateDead])
}

// TestStoredStatsNewerWins: counts taken earlier (a leader that stalled,
// then resumed after another took over) do not replace counts taken later;
// counts taken later still replace them.
func TestStoredStatsNewerWins(t *testing.T) {
	b := setup(t)
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	newer := queue.StoredStats{CountedAt: t0, By: "new-leader", Term: 2,
		Queues: []queue.QueueStats{{Queue: "q", Counts: map[string]map[jobs.State]int64{"k": {"available": 5}}}}}
	older := queue.StoredStats{CountedAt: t0.Add(-time.Second), By: "stalled-leader", Term: 1,
		Queues: []queue.QueueStats{{Queue: "q", Counts: map[string]map[jobs.State]int64{"k": {"available": 99}}}}}

	stored, err := b.q.StoreStats(b.ctx, newer)
	require.NoError(t, err)
	require.True(t, stored)
	stored, err = b.q.StoreStats(b.ctx, older)
	require.NoError(t, err)
	require.False(t, stored, "the older counts are not stored")
	stored, err = b.q.StoreStats(b.ctx, newer)
	require.NoError(t, err)
	require.False(t, stored, "counts as old as the stored ones are not stored again")
	got, err := b.q.StoredStats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, "new-leader", got.By)
	require.EqualValues(t, 5, got.Queues[0].Counts["k"]["available"])

	later := newer
	later.CountedAt, later.By = t0.Add(time.Second), "new-leader-again"
	stored, err = b.q.StoreStats(b.ctx, later)
	require.NoError(t, err)
	require.True(t, stored)
	got, err = b.q.StoredStats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, "new-leader-again", got.By)
}

// TestStoredStatsMalformed: a counts document another application wrote
// is read as far as it can be (entries that cannot be read are counted,
// not shown), or refused with ErrStoredStatsMalformed when it has no time
// of counting; a leader's counts replace a document without one.
func TestStoredStatsMalformed(t *testing.T) {
	b := setup(t)
	coll := b.db.Collection(queue.DefaultStatsCollection)
	at := time.Now().UTC().Truncate(time.Minute)
	put := func(doc bson.D) {
		t.Helper()
		_, err := coll.ReplaceOne(b.ctx, bson.M{"_id": "counts"}, doc, options.Replace().SetUpsert(true))
		require.NoError(t, err)
	}

	put(bson.D{{Key: "_id", Value: "counts"}, {Key: "countedAt", Value: at}, {Key: "by", Value: 12}, {Key: "tookMs", Value: "x"},
		{Key: "queues", Value: bson.A{
			"not a document",
			bson.M{"queue": 3},
			bson.M{"queue": "q", "oldestAvailable": "yesterday", "counts": bson.A{
				bson.M{"kind": "k", "state": "available", "n": int32(4)},
				bson.M{"kind": "k", "state": "dead", "n": "many"},
				bson.M{"kind": "k", "state": "running", "n": -1},
				bson.M{"kind": bson.A{1}, "state": "running", "n": 1},
				7,
			}},
			bson.M{"queue": "r", "counts": "none"},
		}},
		{Key: "finished", Value: bson.A{
			bson.M{"state": "succeeded", "minute": at.Add(-time.Minute), "n": int64(3)},
			bson.M{"state": "succeeded", "minute": "then", "n": 1},
			bson.M{"state": "dead", "minute": at.Add(-48 * time.Hour), "n": 1},
			nil,
		}},
	})
	got, err := b.q.StoredStats(b.ctx)
	require.NoError(t, err)
	require.Empty(t, got.By)
	require.Zero(t, got.Took)
	require.Len(t, got.Queues, 2)
	require.Equal(t, map[string]map[jobs.State]int64{"k": {"available": 4}}, got.Queues[0].Counts)
	require.True(t, got.Queues[0].OldestAvailable.IsZero())
	require.Empty(t, got.Queues[1].Counts)
	require.Equal(t, map[time.Time]int64{at.Add(-time.Minute): 3}, got.Finished[jobs.StateSucceeded])
	require.Empty(t, got.Finished[jobs.StateDead], "outside the window")
	require.Equal(t, 9, got.Unreadable)

	for _, doc := range []bson.D{
		{{Key: "_id", Value: "counts"}, {Key: "countedAt", Value: "now"}, {Key: "queues", Value: bson.A{bson.M{"queue": "q"}}}},
		{{Key: "_id", Value: "counts"}, {Key: "queues", Value: 5}},
		{{Key: "_id", Value: "counts"}, {Key: "countedAt", Value: bson.A{1, 2}}},
	} {
		put(doc)
		_, err := b.q.StoredStats(b.ctx)
		require.ErrorIs(t, err, queue.ErrStoredStatsMalformed)
		stored, err := b.q.StoreStats(b.ctx, queue.StoredStats{CountedAt: at, By: "w1"})
		require.NoError(t, err)
		require.True(t, stored, "a leader's counts replace a document with no time of counting: %v", doc)
		got, err := b.q.StoredStats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, "w1", got.By)
	}
}

// TestStoredStatsReadIsBounded: reading the stored counts is one find of
// one document and a hello, and no command on the jobs collection,
// however many jobs there are.
func TestStoredStatsReadIsBounded(t *testing.T) {
	b := setup(t)
	const n = 5000
	docs := make([]any, 0, 1000)
	for i := range n {
		docs = append(docs, bson.M{"_id": fmt.Sprintf("j%05d", i), "kind": "k", "queue": "q", "state": "available", "runAt": time.Now()})
		if len(docs) == cap(docs) {
			_, err := store.Of(b.q).Collection().InsertMany(b.ctx, docs)
			require.NoError(t, err)
			docs = docs[:0]
		}
	}
	counted, err := b.q.CountStats(b.ctx)
	require.NoError(t, err)
	_, err = b.q.StoreStats(b.ctx, counted)
	require.NoError(t, err)

	q, cmds := monitoredQueue(t, b.db)
	got, err := q.StoredStats(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, n, got.Queues[0].Counts["k"]["available"])
	require.Equal(t, []string{"hello", "find " + queue.DefaultStatsCollection}, cmds())
}

// monitoredQueue returns a client of db whose commands are recorded as
// "name collection" (or the name alone).
func monitoredQueue(t *testing.T, db *mongo.Database) (*queue.Client, func() []string) {
	t.Helper()
	client, cmds := testdb.Monitored(t)
	q, err := queue.New(client.Database(db.Name()), queue.Config{})
	require.NoError(t, err)
	return q, cmds
}
