package handlers_test

import (
	"context"
	"math"
	"testing"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ownClientTxs is b's transactions collection through a client of its
// own. devdb (FerretDB v1) answers an insert of a NaN by closing the
// connection; the driver then clears that client's connection pool, and
// every operation of it that is checking out a connection at that moment
// fails ("connection pool ... was cleared"). On testdb's shared client
// those are other parallel tests' operations (TestTransferCannotApply's
// missing-value case once failed so, in its setup's EnsureIndexes).
func ownClientTxs(t *testing.T, b *transferBundle) *mongo.Collection {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c.Database(b.db.Name()).Collection(handlers.TransactionsCollection)
}

// The NaN case of TestTransferCannotApply inserts its transaction so that
// a server that closes the connection over it (devdb; MongoDB stores NaN)
// disturbs no operation of testdb's shared client, which the parallel
// tests share: a loop of commands on the shared client meanwhile meets no
// error.
func TestTransferNaNInsertLeavesTheSharedClientAlone(t *testing.T) {
	b := transferSetup(t)
	txs := ownClientTxs(t, b)
	stop := make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		defer close(failed)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := b.db.RunCommand(b.ctx, bson.D{{Key: "ping", Value: 1}}).Err(); err != nil {
				failed <- err
				return
			}
		}
	}()
	for range 20 {
		_, _ = b.tryInsertTxIn(txs, "alice", "bob", math.NaN())
	}
	close(stop)
	require.NoError(t, <-failed, "a command of the shared client failed while NaN transactions were inserted")
}
