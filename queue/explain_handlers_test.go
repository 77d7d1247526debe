package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// topK is why the sweepers' finds may sort: they page by _id over the
// documents their range on a flag or a timestamp selects, the ones whose
// sync or transfer stalled, so the SORT is a top-k of at most one batch
// over an index range, never over the collection. Paging by a keyset on
// (flag, _id) instead, with an index {syncing: 1, _id: 1} (and {state: 1,
// lastModified: 1, _id: 1} for transactions), would remove it.
const topK = "top-k sort of at most one batch of stalled documents, fed by an index range"

// TestExplainHandlerQueries: on a real MongoDB, the queries the handlers
// and the recovery passes run on users, comments, accounts and
// transactions use the indexes handlers.Setup creates, without a
// collection scan. The filters are written as recovery/ and handlers/ build
// them inline.
func TestExplainHandlerQueries(t *testing.T) {
	db := queue.RealMongoDB(t)
	ctx := context.Background()
	require.NoError(t, handlers.Setup(ctx, db))
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(ctx))

	now := time.Now().UTC()
	var users, comments, accounts, txs []any
	for i := range 2000 {
		u := bson.D{{Key: "_id", Value: fmt.Sprintf("u%04d", i)}, {Key: "name", Value: "n"}, {Key: "friends", Value: bson.A{}}}
		if i%50 == 0 {
			u = append(u, bson.E{Key: "syncing", Value: now.Add(-time.Duration(i) * time.Second)})
		}
		users = append(users, u)
		comments = append(comments, bson.D{{Key: "uid", Value: fmt.Sprintf("u%04d", i%200)}, {Key: "uname", Value: "n"}})
		accounts = append(accounts, bson.D{{Key: "_id", Value: fmt.Sprintf("a%04d", i)}, {Key: "balance", Value: int64(100)}, {Key: "pendingTransactions", Value: bson.A{}}})
		states := []string{"initial", "pending", "applied", "canceling", "done", "done", "done", "cancelled"}
		txs = append(txs, bson.D{{Key: "_id", Value: fmt.Sprintf("t%04d", i)}, {Key: "state", Value: states[i%len(states)]},
			{Key: "lastModified", Value: now.Add(-time.Duration(i) * time.Second)}})
	}
	for name, docs := range map[string][]any{handlers.UsersCollection: users, handlers.CommentsCollection: comments,
		handlers.AccountsCollection: accounts, handlers.TransactionsCollection: txs} {
		_, err := db.Collection(name).InsertMany(ctx, docs)
		require.NoError(t, err)
	}

	cutoff := now.Add(-time.Minute)
	unfinished := bson.A{}
	for _, s := range handlers.UnfinishedTxStates {
		unfinished = append(unfinished, s)
	}
	queue.CheckPlans(t, db, []queue.Explained{
		{Name: "rename sweeper find, first page", Index: "syncing", SortOK: topK, Cmd: bson.D{
			{Key: "find", Value: handlers.UsersCollection},
			{Key: "filter", Value: bson.D{{Key: "syncing", Value: bson.D{{Key: "$lt", Value: cutoff}}}}},
			{Key: "sort", Value: bson.D{{Key: "_id", Value: 1}}}, {Key: "limit", Value: 500},
			{Key: "projection", Value: bson.D{{Key: "syncing", Value: 1}}},
		}},
		{Name: "rename sweeper find, next page", Index: "syncing", SortOK: topK, Cmd: bson.D{
			{Key: "find", Value: handlers.UsersCollection},
			{Key: "filter", Value: bson.D{{Key: "syncing", Value: bson.D{{Key: "$lt", Value: cutoff}}}, {Key: "_id", Value: bson.D{{Key: "$gt", Value: "u0100"}}}}},
			{Key: "sort", Value: bson.D{{Key: "_id", Value: 1}}}, {Key: "limit", Value: 500},
			{Key: "projection", Value: bson.D{{Key: "syncing", Value: 1}}},
		}},
		{Name: "transfer recovery find", Index: "state_lastModified", SortOK: topK, Cmd: bson.D{
			{Key: "find", Value: handlers.TransactionsCollection},
			{Key: "filter", Value: bson.D{
				{Key: "state", Value: bson.D{{Key: "$in", Value: unfinished}}},
				{Key: "lastModified", Value: bson.D{{Key: "$lt", Value: cutoff}}},
			}},
			{Key: "sort", Value: bson.D{{Key: "_id", Value: 1}}}, {Key: "limit", Value: 500},
			{Key: "projection", Value: bson.D{{Key: "state", Value: 1}}},
		}},
		{Name: "rename comments sync", Index: "uid", Cmd: bson.D{
			{Key: "update", Value: handlers.CommentsCollection}, {Key: "updates", Value: bson.A{bson.D{
				{Key: "q", Value: bson.D{{Key: "uid", Value: "u0007"}, {Key: "$or", Value: bson.A{
					bson.D{{Key: "unameJob", Value: bson.D{{Key: "$exists", Value: false}}}},
					bson.D{{Key: "unameJob", Value: bson.D{{Key: "$lt", Value: "j"}}}},
				}}}},
				{Key: "u", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "uname", Value: "m"}}}}}, {Key: "multi", Value: true},
			}}},
		}},
		{Name: "user by id", Cmd: bson.D{
			{Key: "find", Value: handlers.UsersCollection}, {Key: "filter", Value: bson.D{{Key: "_id", Value: "u0007"}}},
		}},
		{Name: "transfer accounts load", Cmd: bson.D{
			{Key: "find", Value: handlers.AccountsCollection},
			{Key: "filter", Value: bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"a0001", "a0002"}}}}}},
		}},
		{Name: "transaction by id", Cmd: bson.D{
			{Key: "find", Value: handlers.TransactionsCollection}, {Key: "filter", Value: bson.D{{Key: "_id", Value: "t0001"}}},
		}},
		{Name: "recovery unique keys", Index: "uniqueKey", Cmd: bson.D{
			{Key: "find", Value: store.Of(q).Collection().Name()},
			{Key: "filter", Value: bson.D{{Key: "uniqueKey", Value: bson.D{{Key: "$in", Value: bson.A{"transfer:t0001", "transfer:t0002"}}}}}},
			{Key: "projection", Value: bson.D{{Key: "uniqueKey", Value: 1}}},
		}},
	})
}
