package handlers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// TestEnqueueTransferResentAfterLostReply: on MongoDB a write's reply can
// be lost after the write was applied (a connection closed, a failover);
// the app cannot tell, and sends the request again. Here devdb loses the
// reply of one write in twenty; an app sends 30 transfer requests, each
// again until it succeeds, with the transaction id it chose. Each request
// must make one transaction and one job, however often it was sent, and
// once a worker has run them the money is conserved.
func TestEnqueueTransferResentAfterLostReply(t *testing.T) {
	db := testdb.FaultyDB(t, "--faults lostreply=0.1 --seed 7")
	ctx := context.Background()
	log := zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))
	q, err := queue.New(db, queue.Config{RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond, Logger: log})
	require.NoError(t, err)
	require.NoError(t, testdb.Retry(t.Logf, "ensure indexes", func() error { return q.EnsureIndexes(ctx) }))
	require.NoError(t, testdb.Retry(t.Logf, "set up the handlers", func() error { return handlers.Setup(ctx, db) }))
	opening := map[string]int64{"a": 10_000, "b": 10_000, "c": 10_000}
	require.NoError(t, testdb.RetryInsert(t.Logf, "open the accounts", func() error {
		_, err := db.Collection(handlers.AccountsCollection).InsertMany(ctx, []any{
			handlers.Account{ID: "a", Balance: 10_000, PendingTransactions: []string{}},
			handlers.Account{ID: "b", Balance: 10_000, PendingTransactions: []string{}},
			handlers.Account{ID: "c", Balance: 10_000, PendingTransactions: []string{}},
		}, options.InsertMany().SetOrdered(false))
		return err
	}))

	const requests = 30
	accounts := []string{"a", "b", "c"}
	resent := 0
	for i := range requests {
		from, to := accounts[i%3], accounts[(i+1)%3]
		sends := 0
		req := handlers.TransferRequest{TxID: fmt.Sprintf("req-%02d", i), From: from, To: to, Amount: int64(100 + i)}
		err := testdb.Retry(t.Logf, "transfer request", func() error {
			sends++
			txID, _, err := handlers.EnqueueTransferRequest(ctx, db, q, req)
			if err == nil {
				require.Equal(t, req.TxID, txID)
			}
			return err
		})
		require.NoError(t, err)
		resent += sends - 1
	}
	t.Logf("%d requests, %d sent again after a failure reply", requests, resent)
	require.Positive(t, resent, "no request met a lost reply: the test proves nothing (change the seed)")

	var txs []bson.M
	require.NoError(t, testdb.Retry(t.Logf, "read the transactions", func() error {
		cur, err := db.Collection(handlers.TransactionsCollection).Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
		if err != nil {
			return err
		}
		return cur.All(ctx, &txs)
	}))
	require.Equal(t, requests, len(txs), "one transaction per request")
	for i, tx := range txs {
		require.Equal(t, fmt.Sprintf("req-%02d", i), tx["_id"])
		var n int64
		require.NoError(t, testdb.Retry(t.Logf, "count a transaction's jobs", func() (err error) {
			n, err = store.Of(q).Collection().CountDocuments(ctx, bson.D{{Key: "kind", Value: handlers.TransferKind}, {Key: "args.txId", Value: tx["_id"]}})
			return err
		}))
		require.EqualValues(t, 1, n, "transaction %v has one job", tx["_id"])
	}
	runTransfers(t, db, q, log)
	checkMoneyInvariants(t, db, opening)
}

// runTransfers runs a worker, and the transfer recovery pass, until no
// transaction is unfinished.
func runTransfers(t *testing.T, db *mongo.Database, q *queue.Client, log *zap.Logger) {
	t.Helper()
	ctx := context.Background()
	reg := jobs.NewRegistry()
	require.NoError(t, handlers.Register(reg, handlers.Deps{DB: db, Queue: q, Logger: log}))
	w, err := worker.New(q, reg, worker.Config{Concurrency: 4, PollMax: 50 * time.Millisecond, Logger: log})
	require.NoError(t, err)
	w.Start(ctx)
	defer func() { require.NoError(t, w.Stop(ctx)) }()
	rec, err := handlers.NewTransferRecovery(db, q, handlers.TransferRecoveryConfig{Threshold: 2 * time.Second, Logger: log})
	require.NoError(t, err)
	unfinished := bson.D{{Key: "state", Value: bson.D{{Key: "$nin", Value: bson.A{handlers.TxDone, handlers.TxCancelled}}}}}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := rec.RunOnce(ctx)
		if testdb.Transient(err) {
			err = nil
		}
		assert.NoError(c, err)
		n, err := db.Collection(handlers.TransactionsCollection).CountDocuments(ctx, unfinished)
		assert.NoError(c, err)
		assert.Zero(c, n, "unfinished transactions")
	}, 60*time.Second, 100*time.Millisecond)
}

// TestEnqueueTransferRequestSentAgain: a request sent again with its TxID
// writes nothing new, whatever its transaction's state; one of the same
// TxID but another transfer is refused; a TxID that names a reversal is
// invalid.
func TestEnqueueTransferRequestSentAgain(t *testing.T) {
	b := transferSetup(t)
	opening := map[string]int64{"alice": 1_000, "bob": 0}
	b.open(t, opening)
	req := handlers.TransferRequest{TxID: "order-17", From: "alice", To: "bob", Amount: 250}
	txID, jobID, err := handlers.EnqueueTransferRequest(b.ctx, b.db, b.q, req)
	require.NoError(t, err)
	require.Equal(t, "order-17", txID)
	again, againJob, err := handlers.EnqueueTransferRequest(b.ctx, b.db, b.q, req)
	require.NoError(t, err)
	require.Equal(t, txID, again)
	require.Equal(t, jobID, againJob, "the resend finds the unfinished job")

	other := req
	other.Amount = 300
	_, _, err = handlers.EnqueueTransferRequest(b.ctx, b.db, b.q, other)
	require.ErrorIs(t, err, handlers.ErrTransactionExists)
	_, _, err = handlers.EnqueueTransferRequest(b.ctx, b.db, b.q, handlers.TransferRequest{TxID: handlers.ReversalID("x"), From: "alice", To: "bob", Amount: 1})
	require.ErrorIs(t, err, handlers.ErrInvalidTransfer)

	j := b.claim(t)
	require.Equal(t, jobID, j.ID)
	b.finish(t, j, b.handler(t, nil).Work(b.ctx, j))
	require.Equal(t, handlers.TxDone, b.tx(t, txID).State)
	again, againJob, err = handlers.EnqueueTransferRequest(b.ctx, b.db, b.q, req)
	require.NoError(t, err)
	require.Equal(t, txID, again)
	require.Equal(t, jobID, againJob, "a finished transfer's resend names the job that drove it")
	n, err := store.Of(b.q).Collection().CountDocuments(b.ctx, bson.D{})
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "no job is enqueued for a finished transfer")
	n, err = b.txs.CountDocuments(b.ctx, bson.D{})
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "one transaction")
	checkMoneyInvariants(t, b.db, opening)
}
