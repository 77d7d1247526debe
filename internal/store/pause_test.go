package store_test

import (
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestPauseStopsClaims: a queue paused by another client is no longer
// claimed from, by Claim or ClaimBatch, once the claimer's cache of the
// paused queues is PauseRefresh old; its jobs stay available; the other
// queues are still served; resuming serves it again.
func TestPauseStopsClaims(t *testing.T) {
	b := setup(t)
	admin, err := queue.New(b.db, queue.Config{})
	require.NoError(t, err)
	for i := range 11 {
		qn := map[bool]string{true: "reports", false: "mail"}[i == 10]
		_, err := b.q.Enqueue(b.ctx, "k", bson.M{}, queue.InsertOpts{Queue: qn, Priority: map[string]int{"mail": 5}[qn]})
		require.NoError(t, err)
	}
	p := claimAll
	p.Queues = []string{"mail", "reports"}
	j := b.claim(t, p)
	require.Equal(t, "mail", j.Queue, "mail first: higher priority")

	changed, err := admin.Pause(b.ctx, "mail", "ops")
	require.NoError(t, err)
	require.True(t, changed)
	changed, err = admin.Pause(b.ctx, "mail", "someone else")
	require.NoError(t, err)
	require.False(t, changed, "pausing twice changes nothing")
	paused := time.Now()

	// The claimer read the queues before the pause: it may take mail's
	// jobs for up to PauseRefresh, then takes reports' instead.
	taken := 1
	var late []time.Duration // after the pause, when a mail job was claimed too late
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		start := time.Now()
		j, err := store.Of(b.q).Claim(b.ctx, p)
		require.NoError(c, err)
		require.NotNil(c, j, "a job is always there to claim")
		if j.Queue == "mail" {
			taken++
			if d := start.Sub(paused); d >= queue.PauseRefresh {
				late = append(late, d)
			}
		}
		assert.Equal(c, "reports", j.Queue)
	}, 30*time.Second, 200*time.Millisecond) // a liveness bound: the timing is checked below
	require.Empty(t, late, "mail jobs claimed more than PauseRefresh after the pause")
	require.Nil(t, b.claim(t, p), "only paused jobs are left")
	got, err := store.Of(b.q).ClaimBatch(b.ctx, p, 5)
	require.NoError(t, err)
	require.Empty(t, got, "a batch claim skips the paused queue too")
	n, err := store.Of(b.q).Collection().CountDocuments(b.ctx, bson.M{"queue": "mail", "state": "available"})
	require.NoError(t, err)
	require.EqualValues(t, 10-taken, n, "a paused queue's jobs stay available")
	require.Positive(t, n)

	states, err := b.q.QueueStates(b.ctx)
	require.NoError(t, err)
	require.Len(t, states, 1)
	require.Equal(t, "mail", states[0].Queue)
	require.True(t, states[0].Paused)
	require.Equal(t, "ops", states[0].PausedBy, "the first pause is kept")

	changed, err = admin.Resume(b.ctx, "mail", "ops")
	require.NoError(t, err)
	require.True(t, changed)
	changed, err = admin.Resume(b.ctx, "mail", "ops")
	require.NoError(t, err)
	require.False(t, changed, "resuming twice changes nothing")
	resumed := 0
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := store.Of(b.q).ClaimBatch(b.ctx, p, 5)
		require.NoError(c, err)
		resumed += len(got)
		assert.EqualValues(c, n, resumed)
	}, 30*time.Second, 10*time.Millisecond) // a liveness bound: on a loaded devdb one batch claim can take seconds
	states, err = b.q.QueueStates(b.ctx)
	require.NoError(t, err)
	require.Empty(t, states)

	_, err = admin.Pause(b.ctx, "", "")
	require.ErrorContains(t, err, "queue name is empty")
}

// TestMalformedQueuesDocumentsDoNotStopClaims: documents another
// application wrote in the queues collection with a paused field that is
// not a boolean, or an _id that is not a string, leave every queue
// running, and are logged once.
func TestMalformedQueuesDocumentsDoNotStopClaims(t *testing.T) {
	b := setup(t)
	core, logs := observer.New(zap.WarnLevel)
	q, err := queue.New(b.db, queue.Config{Logger: zap.New(core)})
	require.NoError(t, err)
	_, err = b.db.Collection(queue.DefaultQueuesCollection).InsertMany(b.ctx, []any{
		bson.M{"_id": "default", "paused": "yes"},
		bson.M{"_id": 7, "paused": true},
		bson.M{"_id": "other", "paused": nil},
		bson.M{"_id": "third"},
	})
	require.NoError(t, err)
	ids := enqueueN(t, b, 3)
	for i := range 2 {
		j, err := store.Of(q).Claim(b.ctx, claimAll)
		require.NoError(t, err)
		require.NotNil(t, j, "claim %d", i)
		require.Equal(t, ids[i], j.ID)
	}
	got, err := store.Of(q).ClaimBatch(b.ctx, claimAll, 2)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, 1, logs.FilterMessageSnippet("malformed").FilterField(zap.String("queue", "default")).Len(), "logged once: %v", logs.All())
	states, err := q.QueueStates(b.ctx)
	require.NoError(t, err)
	require.Len(t, states, 4)
	for _, s := range states {
		require.False(t, s.Paused, s.Queue)
		require.NotEmpty(t, s.Malformed, s.Queue)
	}

	// Pausing rewrites the document cleanly.
	changed, err := q.Pause(b.ctx, "default", "")
	require.NoError(t, err)
	require.True(t, changed)
	states, err = q.QueueStates(b.ctx)
	require.NoError(t, err)
	for _, s := range states {
		if s.Queue == "default" {
			require.Equal(t, queue.QueueState{Queue: "default", Paused: true, PausedAt: s.PausedAt}, s)
		}
	}
}
