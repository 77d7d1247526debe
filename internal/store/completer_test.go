package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TestBatchedCompletionGroupsOnlyCompletionsThatComeTogether: a lone
// completion (a trickle of jobs) is written at once, without waiting the
// linger for others; completions that come together are grouped into
// fewer writes than jobs.
func TestBatchedCompletionGroupsOnlyCompletionsThatComeTogether(t *testing.T) {
	b := setup(t)
	q, updates := updateCounted(t, b, true)
	const linger = 2 * time.Second
	bq := store.Of(q).WithBatchedCompletion(linger)

	enqueueN(t, b, 14)
	for range 2 {
		j := b.claim(t, claimAll)
		start := time.Now()
		require.NoError(t, bq.Complete(b.ctx, store.LeaseOf(j)))
		require.Less(t, time.Since(start), linger/2, "a lone completion waited for others")
		require.Equal(t, jobs.StateSucceeded, b.get(t, j.ID).State)
	}

	got, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 12)
	require.NoError(t, err)
	require.Len(t, got, 12)
	before := updates.Load()
	completeAtOnce(t, b, bq, got)
	require.LessOrEqual(t, updates.Load()-before, int64(6), "12 completions that came together took more writes than four alone and a group or two")
}

// TestBatchedCompletionWritesABatchClaimsJobsTogether: the jobs of one
// batch claim started together, so the first of them to complete does
// not go alone: with the completer idle, the completions of a batch of 6
// coming together are one write, where completions of unrelated jobs
// would each write at once until they pile up.
func TestBatchedCompletionWritesABatchClaimsJobsTogether(t *testing.T) {
	b := setup(t)
	q, updates := updateCounted(t, b, false)
	bq := store.Of(q).WithBatchedCompletion(200 * time.Millisecond)

	enqueueN(t, b, 6)
	got, err := bq.ClaimBatch(b.ctx, claimAll, 6) // through the completer's client: it learns the batch
	require.NoError(t, err)
	require.Len(t, got, 6)
	before := updates.Load()
	completeAtOnce(t, b, bq, got)
	require.Equal(t, int64(1), updates.Load()-before, "the batch's completions took more than one write")
}

// updateCounted returns b's queue through a client of its own, and the
// count of the update commands (and findAndModify when claims count too)
// that client sends.
func updateCounted(t *testing.T, b bundle, withClaims bool) (*queue.Client, *atomic.Int64) {
	t.Helper()
	var updates atomic.Int64
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "update" || (withClaims && e.CommandName == "findAndModify") {
			updates.Add(1)
		}
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(mon))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	q, err := queue.New(client.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	return q, &updates
}

// completeAtOnce completes every job of got through bq at the same time,
// and checks each succeeded.
func completeAtOnce(t *testing.T, b bundle, bq *store.Store, got []*jobs.Job) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(got))
	for i, j := range got {
		wg.Go(func() { errs[i] = bq.Complete(b.ctx, store.LeaseOf(j)) })
	}
	wg.Wait()
	for i, j := range got {
		require.NoError(t, errs[i])
		require.Equal(t, jobs.StateSucceeded, b.get(t, j.ID).State)
	}
}
