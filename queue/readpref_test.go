package queue_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// readPrefOf returns the read preference coll was built with. The driver
// has no accessor for it; the field is read as the driver declares it, and
// the test fails if a driver upgrade renames it.
func readPrefOf(t *testing.T, coll *mongo.Collection) readpref.Mode {
	t.Helper()
	f := reflect.ValueOf(coll).Elem().FieldByName("readPreference")
	require.True(t, f.IsValid(), "mongo.Collection has no readPreference field any more: update this test")
	require.False(t, f.IsNil())
	return (*readpref.ReadPref)(unsafe.Pointer(f.Pointer())).Mode()
}

// secondaryPreferredDB returns db's database through a client whose URI
// says readPreference=secondaryPreferred.
func secondaryPreferredDB(t *testing.T, db *mongo.Database) *mongo.Database {
	t.Helper()
	uri := testdb.URI()
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	} else if !strings.HasSuffix(uri, "/") {
		sep = "/?"
	}
	client, err := mongo.Connect(options.Client().ApplyURI(uri + sep + "readPreference=secondaryPreferred"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client.Database(db.Name())
}

// TestQueueReadsFromPrimary: a readPreference in the user's URI applies to
// the user's collections but not to the jobs collection, whose reads are
// read-your-own-write reads.
func TestQueueReadsFromPrimary(t *testing.T) {
	db := secondaryPreferredDB(t, testdb.NewDB(t))
	require.Equal(t, readpref.SecondaryPreferredMode, readPrefOf(t, db.Collection("users")), "the URI's preference applies elsewhere")
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	require.Equal(t, readpref.PrimaryMode, readPrefOf(t, store.Of(q).Collection()))
}

// TestQueueReadsItsOwnWritesWithSecondaryPreferredURI: through a client
// whose URI prefers secondaries, the queue still sees what it just wrote:
// a unique key's holder, a batch claim's stamped jobs, a job's state. On
// devdb (one server) this cannot fail for the read preference; against a
// replica set named by DOCKET_TEST_MONGO_URI it can.
func TestQueueReadsItsOwnWritesWithSecondaryPreferredURI(t *testing.T) {
	db := secondaryPreferredDB(t, testdb.NewDB(t))
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, q.EnsureIndexes(ctx))

	for range 20 {
		first, err := q.Enqueue(ctx, "k", map[string]int{"n": 1}, queue.InsertOpts{UniqueKey: "one"})
		require.NoError(t, err)
		again, err := q.Enqueue(ctx, "k", map[string]int{"n": 2}, queue.InsertOpts{UniqueKey: "one"})
		require.NoError(t, err)
		require.True(t, again.Duplicate, "the second enqueue did not see the first")
		require.Equal(t, first.ID, again.ID)

		claimed, err := store.Of(q).ClaimBatch(ctx, store.ClaimParams{Owner: "w", Queues: []string{jobs.DefaultQueue}, Kinds: []string{"k"}, Lease: time.Minute}, 5)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, first.ID, claimed[0].ID)
		got, err := q.Get(ctx, first.ID)
		require.NoError(t, err)
		require.Equal(t, jobs.StateRunning, got.State)
		require.NoError(t, store.Of(q).Complete(ctx, store.LeaseOf(claimed[0])))
	}
}
