package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap/zaptest"
)

// EmailArgs is the args type the README's "From Go" snippet registers.
type EmailArgs struct {
	To string `bson:"to"`
}

// Kind implements jobs.Args.
func (EmailArgs) Kind() string { return "email" }

// TestReadmeFromGo runs the README's "From Go" snippets as they are
// written (issue 10 scenario 11), on a fresh database: the server's URI
// and the database's name are the test's, and "..." is a handler body.
// No worker has run before the enqueues: the client sets up what unique
// keys need.
func TestReadmeFromGo(t *testing.T) {
	t.Parallel()
	dbName := testdb.NewDB(t).Name()
	uri := testdb.URI()
	ctx := context.Background()
	logger := zaptest.NewLogger(t)
	sent := make(chan string, 1)

	// --- README: enqueue from Go ---
	client, _ := mongo.Connect(options.Client().ApplyURI(uri))
	q, _ := queue.New(client.Database(dbName), queue.Config{})
	res, err := q.Enqueue(ctx, "add-friend", handlers.AddFriendArgs{UserA: "u1", UserB: "u2"},
		queue.InsertOpts{Priority: 5, UniqueKey: "friends:u1:u2"})
	// res.ID; res.Duplicate is true when an unfinished job already held the key.
	// --- end ---
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	again, err := q.Enqueue(ctx, "add-friend", handlers.AddFriendArgs{UserA: "u1", UserB: "u2"},
		queue.InsertOpts{Priority: 5, UniqueKey: "friends:u1:u2"})
	require.NoError(t, err)
	require.True(t, again.Duplicate, "the README promises one job per unique key")
	require.Equal(t, res.ID, again.ID)

	// --- README: run your own kinds ---
	reg := jobs.NewRegistry()
	jobs.Register(reg, func(ctx context.Context, j *jobs.Job, a EmailArgs) error { sent <- a.To; return nil }, jobs.KindOptions{Timeout: time.Minute})
	w, _ := worker.New(q, reg, worker.Config{Concurrency: 10, Logger: logger})
	w.Start(ctx)
	defer w.Stop(context.Background()) // graceful: waits, then cancels; see Shutdown below
	// --- end ---

	email, err := q.Enqueue(ctx, EmailArgs{}.Kind(), EmailArgs{To: "a@example.com"}, queue.InsertOpts{})
	require.NoError(t, err)
	require.Equal(t, "a@example.com", <-sent)
	require.Eventually(t, func() bool {
		j, err := q.Get(ctx, email.ID)
		return err == nil && j.State == jobs.StateSucceeded
	}, 20*time.Second, 20*time.Millisecond)
}
