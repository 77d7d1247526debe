package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// insertNullKeyJob inserts an available job as another app's driver may
// write it, with uniqueKey: null.
func insertNullKeyJob(t *testing.T, coll *mongo.Collection, id string) error {
	t.Helper()
	now := time.Now()
	_, err := coll.InsertOne(context.Background(), bson.D{
		{Key: "_id", Value: id}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "default"}, {Key: "args", Value: bson.D{}},
		{Key: "state", Value: "available"}, {Key: "priority", Value: 0}, {Key: "runAt", Value: now},
		{Key: "attempt", Value: 0}, {Key: "maxAttempts", Value: 25}, {Key: "errors", Value: bson.A{}},
		{Key: "uniqueKey", Value: nil}, {Key: "createdAt", Value: now}, {Key: "updatedAt", Value: now},
	})
	return err
}

// TestNullUniqueKeyIsNoKey: issue 10 scenario 12. An explicit null
// uniqueKey means no key: it never stops docket from setting up its
// indexes, and it is cleared so that it does not block the next such job.
func TestNullUniqueKeyIsNoKey(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	ctx := context.Background()
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	coll := store.Of(q).Collection()

	// Before any index: two nulls from another app, then docket's first
	// enqueue (which sets the indexes up) with a key, and one without.
	require.NoError(t, insertNullKeyJob(t, coll, "n1"))
	require.NoError(t, insertNullKeyJob(t, coll, "n2"))
	r1, err := q.Enqueue(ctx, "k", nil, queue.InsertOpts{UniqueKey: "x"})
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	r2, err := q.Enqueue(ctx, "k", nil, queue.InsertOpts{UniqueKey: "x"})
	require.NoError(t, err)
	require.True(t, r2.Duplicate, "the unique index exists")
	require.Equal(t, r1.ID, r2.ID)

	// With the index: one more null is fine; a second one is refused by the
	// index until a pass clears the first.
	require.NoError(t, insertNullKeyJob(t, coll, "n3"))
	require.True(t, mongo.IsDuplicateKeyError(insertNullKeyJob(t, coll, "n4")))
	n, err := q.ClearNullUniqueKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, insertNullKeyJob(t, coll, "n4"))

	// Every job runs, and docket's own keys are untouched.
	seen := map[string]bool{}
	for {
		j, err := store.Of(q).Claim(ctx, claimAll)
		require.NoError(t, err)
		if j == nil {
			break
		}
		if j.ID != r1.ID {
			require.Empty(t, j.UniqueKey)
		}
		seen[j.ID] = true
		require.NoError(t, store.Of(q).Complete(ctx, store.LeaseOf(j)))
	}
	require.Len(t, seen, 6)
	done, err := q.Get(ctx, r1.ID)
	require.NoError(t, err)
	require.Equal(t, jobs.StateSucceeded, done.State)
	require.Equal(t, "x", done.FinishedUniqueKey)
}
