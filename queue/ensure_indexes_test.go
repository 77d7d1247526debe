package queue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TestEnqueueEnsuresTheIndexesItReliesOn: issue 10 scenario 11. A program
// that only enqueues (queue.New, then Enqueue) gets unique keys that hold,
// with no worker ever run.
func TestEnqueueEnsuresTheIndexesItReliesOn(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	ctx := context.Background()
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	first, err := q.Enqueue(ctx, "k", nil, queue.InsertOpts{UniqueKey: "once"})
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	// A second client, as a second process would have.
	q2, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	second, err := q2.Enqueue(ctx, "k", nil, queue.InsertOpts{UniqueKey: "once"})
	require.NoError(t, err)
	require.True(t, second.Duplicate)
	require.Equal(t, first.ID, second.ID)
	n, err := store.Of(q).Collection().CountDocuments(ctx, bson.M{})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// breakUniqueIndex inserts, as another app would, two unfinished jobs "a"
// and "b" with one unique key "twice": the unique index cannot be made.
func breakUniqueIndex(t *testing.T, q *queue.Client) {
	t.Helper()
	for _, id := range []string{"a", "b"} {
		_, err := store.Of(q).Collection().InsertOne(context.Background(), bson.D{
			{Key: "_id", Value: id}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "default"}, {Key: "args", Value: bson.D{}},
			{Key: "state", Value: "available"}, {Key: "runAt", Value: time.Now()}, {Key: "uniqueKey", Value: "twice"},
		})
		require.NoError(t, err)
	}
}

// TestEnsureIndexesRefusedNamesTheDuplicates: when documents already break
// the unique index, setting it up is refused with an error that says so
// and names them, and an enqueue that needs it fails rather than making a
// second job for a key.
func TestEnsureIndexesRefusedNamesTheDuplicates(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	ctx := context.Background()
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	breakUniqueIndex(t, q)
	err = q.EnsureIndexes(ctx)
	require.ErrorIs(t, err, queue.ErrSetupRefused)
	require.ErrorContains(t, err, `"twice" in 2 documents`)
	require.ErrorContains(t, err, "uniqueKey")

	_, err = q.Enqueue(ctx, "k", nil, queue.InsertOpts{UniqueKey: "other"})
	require.ErrorIs(t, err, queue.ErrSetupRefused)
	_, err = q.Enqueue(ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err, "a job without a unique key does not need the index")

	// Once the data is fixed, the next enqueue sets the index up.
	_, err = store.Of(q).Collection().DeleteOne(ctx, bson.M{"_id": "b"})
	require.NoError(t, err)
	r1, err := q.Enqueue(ctx, "k", nil, queue.InsertOpts{UniqueKey: "other"})
	require.NoError(t, err)
	r2, err := q.Enqueue(ctx, "k", nil, queue.InsertOpts{UniqueKey: "other"})
	require.NoError(t, err)
	require.True(t, r2.Duplicate)
	require.Equal(t, r1.ID, r2.ID)
}

// TestEnsureIndexesAcceptsTheSameIndexUnderAnotherName: an equivalent
// unique index made by hand (the driver's default name uniqueKey_1)
// serves; it is not a refusal.
func TestEnsureIndexesAcceptsTheSameIndexUnderAnotherName(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	ctx := context.Background()
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	_, err = store.Of(q).Collection().Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "uniqueKey", Value: 1}},
		Options: options.Index().SetUnique(true).SetSparse(true),
	})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(ctx))
	r1, err := q.Enqueue(ctx, "k", nil, queue.InsertOpts{UniqueKey: "x"})
	require.NoError(t, err)
	r2, err := q.Enqueue(ctx, "k", nil, queue.InsertOpts{UniqueKey: "x"})
	require.NoError(t, err)
	require.True(t, r2.Duplicate)
	require.Equal(t, r1.ID, r2.ID)
}

// TestFirstEnqueueWithIndexesInPlaceScansNothing: every enqueueing process
// sets the indexes up on its first enqueue; once they exist, that must cost
// a listIndexes, not the null-key pass (a find that scans the whole
// collection on devdb; it was an updateMany, 17 s at 100,000 jobs holding
// every other client).
func TestFirstEnqueueWithIndexesInPlaceScansNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbName := testdb.NewDB(t).Name()
	var mu sync.Mutex
	var commands []string
	// The scan for null keys: a find on uniqueKey (store.FoundIDs).
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		name := e.CommandName
		if f, ok := e.Command.Lookup("filter").DocumentOK(); ok && name == "find" && f.Lookup("uniqueKey").Type != 0 {
			name = "find uniqueKey"
		}
		mu.Lock()
		commands = append(commands, name)
		mu.Unlock()
	}}
	sent := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := commands
		commands = nil
		return out
	}
	mc, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(mon))
	require.NoError(t, err)
	t.Cleanup(func() { _ = mc.Disconnect(context.Background()) })
	db := mc.Database(dbName)

	first, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	_, err = first.Enqueue(ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	require.Contains(t, sent(), "find uniqueKey", "the first setup clears null keys before making the unique index")

	second, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	_, err = second.Enqueue(ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	got := sent()
	require.NotContains(t, got, "find uniqueKey", "with the indexes in place, a new client's first enqueue scanned for null keys: %v", got)
	require.Contains(t, got, "listIndexes")
}

// TestEnqueueWithoutItsIndexesReportsEveryJob: when the indexes a unique
// key or a bounded queue needs cannot be set up, EnqueueMany still returns
// one Result per job, each not inserted and holding its id, so that the
// same call again with those ids adds each job once when the setup works.
func TestEnqueueWithoutItsIndexesReportsEveryJob(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	ctx := context.Background()
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, q.SetCapacity(ctx, "bounded", 10, ""))
	breakUniqueIndex(t, q)
	batches := [][]queue.Insert{
		{{Kind: "k", Opts: queue.InsertOpts{UniqueKey: "u"}}, {Kind: "k"}},
		{{Kind: "k", Opts: queue.InsertOpts{Queue: "bounded"}}, {Kind: "k"}},
	}
	for i, ins := range batches {
		res, err := q.EnqueueMany(ctx, ins)
		require.ErrorIs(t, err, queue.ErrSetupRefused, "batch %d", i)
		var ee *queue.EnqueueError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, len(ins), ee.NotInserted)
		require.Len(t, res, len(ins))
		for _, r := range res {
			require.ErrorIs(t, r.Err, queue.ErrNotInserted)
			require.NotEmpty(t, r.ID)
		}
		batches[i] = withIDs(ins, res)
	}

	_, err = store.Of(q).Collection().DeleteOne(ctx, bson.M{"_id": "b"})
	require.NoError(t, err)
	for i, ins := range batches {
		res, err := q.EnqueueMany(ctx, ins)
		require.NoError(t, err, "batch %d", i)
		for j, r := range res {
			require.Equal(t, ins[j].Opts.ID, r.ID)
			require.False(t, r.Existed || r.Duplicate)
		}
	}
}
