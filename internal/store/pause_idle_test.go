package store_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// pauseReads returns a queue client on b's database whose reads of the
// queues collection (the paused queues) are counted, trusting what it read
// for refresh.
func pauseReads(t *testing.T, b bundle, refresh time.Duration) (*queue.Client, *atomic.Int64) {
	t.Helper()
	var reads atomic.Int64
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if coll, _ := e.Command.Lookup(e.CommandName).StringValueOK(); e.CommandName == "find" && coll == queue.DefaultQueuesCollection {
			reads.Add(1)
		}
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(mon))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	q, err := queue.New(client.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	store.SetPauseRefresh(store.Of(q), refresh)
	return q, &reads
}

// TestIdleClaimsReadNoPausedQueues: claims that find nothing, long after
// the paused queues were last read, do not read them again (an idle
// worker's polling costs its claims only), while nothing is paused.
func TestIdleClaimsReadNoPausedQueues(t *testing.T) {
	b := setup(t)
	q, reads := pauseReads(t, b, 20*time.Millisecond)
	for range 10 {
		j, err := store.Of(q).Claim(b.ctx, claimAll)
		require.NoError(t, err)
		require.Nil(t, j)
		got, err := store.Of(q).ClaimBatch(b.ctx, claimAll, 5)
		require.NoError(t, err)
		require.Empty(t, got)
		time.Sleep(30 * time.Millisecond) // past the refresh: the cache is stale
	}
	require.EqualValues(t, 1, reads.Load(), "only the first claim reads the paused queues")
}

// TestStaleClaimGivesBackAJobOfAQueuePausedSince: a claim made with a
// stale set of paused queues that takes a job of a queue paused since
// gives it back, uncounted, and claims from the queues still running; a
// batch claim gives back its whole batch and does the same.
func TestStaleClaimGivesBackAJobOfAQueuePausedSince(t *testing.T) {
	for _, k := range []int{1, 3} {
		t.Run(map[int]string{1: "claim", 3: "batch"}[k], func(t *testing.T) {
			b := setup(t)
			q, reads := pauseReads(t, b, 20*time.Millisecond)
			p := claimAll
			p.Queues = []string{"mail", "reports"}
			got, err := store.Of(q).ClaimBatch(b.ctx, p, k) // reads the paused queues: none
			require.NoError(t, err)
			require.Empty(t, got)

			_, err = b.q.Pause(b.ctx, "mail", "ops")
			require.NoError(t, err)
			mail, err := b.q.Enqueue(b.ctx, "k", bson.M{}, queue.InsertOpts{Queue: "mail", Priority: 5})
			require.NoError(t, err)
			reports, err := b.q.Enqueue(b.ctx, "k", bson.M{}, queue.InsertOpts{Queue: "reports"})
			require.NoError(t, err)
			time.Sleep(30 * time.Millisecond) // past the refresh: the cache is stale

			got, err = store.Of(q).ClaimBatch(b.ctx, p, k)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, reports.ID, got[0].ID, "the paused queue's job given back, the running queue's taken")
			require.GreaterOrEqual(t, reads.Load(), int64(2), "read again once the stale claim took a job")

			m, err := b.q.Get(b.ctx, mail.ID)
			require.NoError(t, err)
			require.Equal(t, jobs.StateAvailable, m.State)
			require.Zero(t, m.Attempt, "the given-back attempt is not counted")
			require.Empty(t, m.Errors)
		})
	}
}
