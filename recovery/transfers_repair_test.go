package recovery_test

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestRecoveryUndoesLateWritesOfAZombieAttempt: an attempt that stalled
// past its lease resumes and re-applies a transfer that the live attempt
// already finished (done) or rolled back (cancelled). Recovery must undo
// exactly those writes, and leave a live transfer's markers alone.
func TestRecoveryUndoesLateWritesOfAZombieAttempt(t *testing.T) {
	b := transferSetup(t)
	acct := func(id string, bal int64) bson.D {
		return bson.D{{Key: "_id", Value: id}, {Key: "balance", Value: bal}, {Key: "pendingTransactions", Value: bson.A{}}}
	}
	b.insert(t, handlers.AccountsCollection, acct("a1", 1000), acct("a2", 1000), acct("a3", 1000))
	// t1: a1 → a2, 100, done: a1 900, a2 1100 before the zombie.
	txID, _, err := handlers.EnqueueTransfer(b.ctx, b.db, b.q, "a1", "a2", 100)
	require.NoError(t, err)
	j := b.claim(t)
	require.NoError(t, b.h.Work(b.ctx, j))
	require.NoError(t, b.q.Complete(b.ctx, queue.LeaseOf(j)))
	var tx handlers.Transaction
	require.NoError(t, b.db.Collection(handlers.TransactionsCollection).FindOne(b.ctx, bson.M{"_id": txID}).Decode(&tx))
	require.Equal(t, handlers.TxDone, tx.State)

	// The zombie debits and credits again, as its stale step would.
	accounts := b.db.Collection(handlers.AccountsCollection)
	zombie := func(id string, delta int64, tx string) {
		_, err := accounts.UpdateOne(b.ctx, bson.M{"_id": id, "pendingTransactions": bson.M{"$ne": tx}},
			bson.M{"$inc": bson.M{"balance": delta}, "$push": bson.M{"pendingTransactions": tx}})
		require.NoError(t, err)
	}
	zombie("a1", -100, txID)
	zombie("a2", 100, txID)
	// A live transfer's marker: pending, its job at work. Left alone.
	_, err = b.db.Collection(handlers.TransactionsCollection).InsertOne(b.ctx, bson.M{
		"_id": "live", "source": "a3", "destination": "a2", "value": int64(50), "state": "pending",
		"owner": "some-job", "lastModified": time.Now(),
	})
	require.NoError(t, err)
	zombie("a3", -50, "live")

	rec := b.recovery(t, recovery.TransferRecoveryConfig{Threshold: time.Hour})
	_, err = rec.RunOnce(b.ctx)
	require.NoError(t, err)
	_, err = rec.RunOnce(context.Background()) // a second pass changes nothing
	require.NoError(t, err)

	want := map[string]struct {
		balance int64
		pending []string
	}{"a1": {900, nil}, "a2": {1100, nil}, "a3": {950, []string{"live"}}}
	for id, w := range want {
		var a handlers.Account
		require.NoError(t, accounts.FindOne(b.ctx, bson.M{"_id": id}).Decode(&a))
		require.Equal(t, w.balance, a.Balance, "account %s", id)
		require.ElementsMatch(t, w.pending, a.PendingTransactions, "account %s", id)
	}
}
