package queue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// cancelAtGetMore returns a queue of db on a client of its own, and run,
// which calls f with a context cancelled when f's read sends its first
// getMore (its caller stops reading there) and reports whether a
// killCursors reached the server after it.
func cancelAtGetMore(t *testing.T, db *mongo.Database) (q *queue.Client, run func(f func(ctx context.Context)) bool) {
	t.Helper()
	var mu sync.Mutex
	var cancel context.CancelFunc
	var cancelled, killed bool
	mon := &event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			mu.Lock()
			defer mu.Unlock()
			if e.CommandName == "getMore" && cancel != nil && !cancelled {
				cancelled = true
				cancel()
			}
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			mu.Lock()
			defer mu.Unlock()
			if e.CommandName == "killCursors" && cancelled {
				killed = true
			}
		},
	}
	client, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(mon))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	q, err = queue.New(client.Database(db.Name()), queue.Config{})
	require.NoError(t, err)
	run = func(f func(ctx context.Context)) bool {
		ctx, c := context.WithCancel(context.Background())
		defer c()
		mu.Lock()
		cancel, cancelled, killed = c, false, false
		mu.Unlock()
		f(ctx)
		mu.Lock()
		defer mu.Unlock()
		cancel = nil
		require.True(t, cancelled, "the read needed a getMore")
		return killed
	}
	return q, run
}

// TestReadsStoppedByTheirCallerCloseTheirCursor: a read whose caller's
// context ends between two batches (a dashboard request cancelled, a
// deadline) still sends killCursors, so that its cursor does not stay open
// on the server until the server's cursor timeout (ten minutes on
// MongoDB); cur.Close with the ended context sent none.
func TestReadsStoppedByTheirCallerCloseTheirCursor(t *testing.T) {
	b := setup(t)
	now := time.Now().UTC()
	docs := make([]any, 0, 300)
	for i := range 300 {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("j%03d", i)}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "default"},
			{Key: "state", Value: jobs.StateSucceeded}, {Key: "runAt", Value: now}, {Key: "finishedAt", Value: now}})
	}
	_, err := b.db.Collection("jobs").InsertMany(b.ctx, docs)
	require.NoError(t, err)
	q, run := cancelAtGetMore(t, b.db)
	for name, read := range map[string]func(ctx context.Context){
		"List":     func(ctx context.Context) { _, _, _ = q.List(ctx, queue.JobFilter{}, "", 250) },
		"Retry":    func(ctx context.Context) { _, _ = q.Retry(ctx, queue.JobFilter{}) },
		"Overview": func(ctx context.Context) { _, _, _ = q.Overview(ctx, now.Add(-time.Hour), jobs.StateSucceeded) },
	} {
		require.True(t, run(read), "%s killed no cursor after its caller's context ended", name)
	}
}
