package queue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
)

// disturbingClient is a queue client on b's database whose first update
// of each job in ids is preceded by another process cancelling that job:
// the job's state changes between the action's read and its write.
func disturbingClient(t *testing.T, b bundle, ids ...string) *queue.Client {
	t.Helper()
	var mu sync.Mutex
	pending := map[string]bool{}
	for _, id := range ids {
		pending[id] = true
	}
	mon := &event.CommandMonitor{Started: func(ctx context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "update" {
			return
		}
		id, _ := e.Command.Lookup("updates", "0", "q", "_id").StringValueOK()
		mu.Lock()
		disturb := pending[id]
		delete(pending, id)
		mu.Unlock()
		if disturb {
			_, err := b.db.Collection(queue.DefaultCollection).UpdateOne(ctx, bson.M{"_id": id}, bson.M{"$set": bson.M{"state": "cancelled"}})
			require.NoError(t, err)
		}
	}}
	return b.monitoredBy(t, mon)
}

// Why Retry left a job alone is a sentinel a caller tests with errors.Is:
// a state docket does not know (another app's document), and a state that
// another process changed between Retry's read and its write, in a plain
// and in a bounded queue.
func TestRetryLeftAloneErrorsAreSentinels(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetCapacity(b.ctx, "small", 5, ""))
	for id, q := range map[string]string{"weird": "default", "plain": "default", "bounded": "small"} {
		state := "dead"
		if id == "weird" {
			state = "\x1b[31mpaused"
		}
		_, err := b.db.Collection(queue.DefaultCollection).InsertOne(b.ctx, bson.D{{Key: "_id", Value: id}, {Key: "kind", Value: "k"},
			{Key: "queue", Value: q}, {Key: "state", Value: state}, {Key: "runAt", Value: time.Now()},
			{Key: "attempt", Value: 3}, {Key: "maxAttempts", Value: 3}, {Key: "args", Value: bson.D{}}})
		require.NoError(t, err)
	}
	q := disturbingClient(t, b, "plain", "bounded")
	res, err := q.Retry(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID("weird"), queue.StringJobID("plain"), queue.StringJobID("bounded")}})
	require.NoError(t, err)
	require.Len(t, res, 3)
	for _, r := range res {
		switch r.ID {
		case "weird":
			require.ErrorIs(t, r.Err, queue.ErrUnknownState)
			require.NotContains(t, r.Err.Error(), "\x1b", "another app's state is quoted")
		default:
			require.ErrorIs(t, r.Err, queue.ErrStateChanged, r.ID)
			require.Equal(t, "cancelled", string(b.get(t, r.ID).State), "left as the other process made it")
		}
	}
}

// Delete without force leaves an unfinished job alone with ErrNotFinished;
// a state another app wrote, of any bytes, is quoted in the error, which
// an operator's terminal shows.
func TestDeleteQuotesAStateItDoesNotKnow(t *testing.T) {
	b := setup(t)
	_, err := b.db.Collection(queue.DefaultCollection).InsertOne(b.ctx, bson.D{{Key: "_id", Value: "odd"}, {Key: "kind", Value: "k"},
		{Key: "queue", Value: "default"}, {Key: "state", Value: "\x1b]0;owned\x07"}, {Key: "args", Value: bson.D{}}})
	require.NoError(t, err)
	res, err := b.q.Delete(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID("odd")}}, false)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.ErrorIs(t, res[0].Err, queue.ErrNotFinished)
	require.NotContains(t, res[0].Err.Error(), "\x1b")
	require.NotContains(t, res[0].Err.Error(), "\x07")
}
