package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

type orderBundle struct {
	ctx context.Context
	db  *mongo.Database
	q   *queue.Client
}

func orderSetup(t *testing.T) *orderBundle {
	t.Helper()
	t.Parallel()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	return &orderBundle{ctx: context.Background(), db: db, q: q}
}

func (b *orderBundle) handler(t *testing.T, hook func(context.Context, string) error) jobs.Handler {
	t.Helper()
	reg := jobs.NewRegistry()
	require.NoError(t, handlers.Register(reg, handlers.Deps{DB: b.db, Queue: b.q, Hook: hook}))
	h, _, ok := reg.Lookup(handlers.OrderKind)
	require.True(t, ok)
	return h
}

// orderJob is an attempt of job id placing args, with its own lease.
func orderJob(id, lease string, args handlers.OrderArgs) *jobs.Job {
	raw, err := bson.Marshal(args)
	if err != nil {
		panic(err)
	}
	return &jobs.Job{ID: id, Kind: handlers.OrderKind, Attempt: 1, Args: raw, LeaseToken: lease}
}

// requireOrders checks the order kind's invariants for product p, created
// with stock initial: stock ≥ 0, stock + sold = initial, the product's
// orders are exactly the placed ones and sold their units. It returns the
// stock left.
func requireOrders(t *testing.T, ctx context.Context, db *mongo.Database, p string, initial int64) int64 {
	t.Helper()
	prod, err := handlers.ReadProduct(ctx, db, p)
	require.NoError(t, err)
	require.GreaterOrEqual(t, prod.Stock, int64(0), "oversold")
	require.Equal(t, initial, prod.Stock+prod.Sold, "stock + sold is the initial stock")
	sum, err := handlers.SummarizeOrders(ctx, db, p)
	require.NoError(t, err)
	require.Equal(t, prod.Sold, sum.UnitsPlaced, "sold = the units of the placed orders")
	require.Len(t, prod.Orders, sum.Placed, "one entry per placed order")
	for _, o := range prod.Orders {
		require.True(t, sum.PlacedIDs[o], "order %s took units but is not placed", o)
	}
	return prod.Stock
}

// TestOrderPlacesOnce: an order takes its units once, however many of its
// attempts run, in sequence or all at once (stalled attempts resuming
// together), and records itself placed.
func TestOrderPlacesOnce(t *testing.T) {
	b := orderSetup(t)
	require.NoError(t, handlers.CreateProduct(b.ctx, b.db, "tv", 5))
	h := b.handler(t, nil)
	args := handlers.OrderArgs{Product: "tv", Quantity: 2}
	require.NoError(t, h.Work(b.ctx, orderJob("j1", "l1", args)))
	require.NoError(t, h.Work(b.ctx, orderJob("j1", "l2", args)), "a retry of a placed order")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, h.Work(b.ctx, orderJob("j2", fmt.Sprint("l", i), args)))
		}()
	}
	wg.Wait()
	require.Equal(t, int64(1), requireOrders(t, b.ctx, b.db, "tv", 5))
	sum, err := handlers.SummarizeOrders(b.ctx, b.db, "tv")
	require.NoError(t, err)
	require.Equal(t, 2, sum.Placed)
}

// TestOrderKilledAfterTakingIsPlacedOnRetry: an attempt killed between its
// take and its record leaves the units taken; the retry records the order
// placed without taking again.
func TestOrderKilledAfterTakingIsPlacedOnRetry(t *testing.T) {
	b := orderSetup(t)
	require.NoError(t, handlers.CreateProduct(b.ctx, b.db, "tv", 5))
	killed := errors.New("killed")
	h := b.handler(t, func(_ context.Context, step string) error {
		if step == "order:take" {
			return killed
		}
		return nil
	})
	args := handlers.OrderArgs{Product: "tv", Quantity: 3, OrderID: "o1"}
	require.ErrorIs(t, h.Work(b.ctx, orderJob("j1", "l1", args)), killed)
	p, err := handlers.ReadProduct(b.ctx, b.db, "tv")
	require.NoError(t, err)
	require.Equal(t, int64(2), p.Stock)
	require.NoError(t, b.handler(t, nil).Work(b.ctx, orderJob("j1", "l2", args)))
	require.Equal(t, int64(2), requireOrders(t, b.ctx, b.db, "tv", 5))
}

// TestOrderSoldOut: an order for more than the stock is rejected, takes
// nothing, and stays rejected: a later attempt never buys.
func TestOrderSoldOut(t *testing.T) {
	b := orderSetup(t)
	require.NoError(t, handlers.CreateProduct(b.ctx, b.db, "tv", 1))
	h := b.handler(t, nil)
	big := handlers.OrderArgs{Product: "tv", Quantity: 2, OrderID: "big"}
	require.NoError(t, h.Work(b.ctx, orderJob("j1", "l1", big)))
	require.NoError(t, h.Work(b.ctx, orderJob("j2", "l1", handlers.OrderArgs{Product: "tv", Quantity: 1})))
	require.NoError(t, h.Work(b.ctx, orderJob("j1", "l2", big)), "a stalled attempt of the rejected order")
	require.Equal(t, int64(0), requireOrders(t, b.ctx, b.db, "tv", 1))
	sum, err := handlers.SummarizeOrders(b.ctx, b.db, "tv")
	require.NoError(t, err)
	require.Equal(t, 1, sum.Placed)
	require.Equal(t, 1, sum.Rejected)
}

// TestOrderRefusesBadInputBeforeWriting: args out of range fail
// validation; an unknown product or one another app wrote in another
// shape fails the job permanently, naming the field, writing nothing.
func TestOrderRefusesBadInputBeforeWriting(t *testing.T) {
	b := orderSetup(t)
	for _, a := range []handlers.OrderArgs{
		{Product: "", Quantity: 1},
		{Product: "tv", Quantity: 0},
		{Product: "tv", Quantity: handlers.MaxOrderQuantity + 1},
		{Product: "tv", Quantity: 1, OrderID: string(make([]byte, 65))},
	} {
		require.Error(t, a.Validate(), "%+v", a)
	}
	_, err := b.q.Enqueue(b.ctx, handlers.OrderKind, handlers.OrderArgs{Product: "tv"}, queue.InsertOpts{})
	require.NoError(t, err, "the queue does not validate args; the handler and the CLI do")
	require.Error(t, handlers.CreateProduct(b.ctx, b.db, "x", -1))
	require.NoError(t, handlers.CreateProduct(b.ctx, b.db, "x", 1))
	require.ErrorIs(t, handlers.CreateProduct(b.ctx, b.db, "x", 1), handlers.ErrProductExists)

	h := b.handler(t, nil)
	err = h.Work(b.ctx, orderJob("j1", "l1", handlers.OrderArgs{Product: "nope", Quantity: 1}))
	require.ErrorIs(t, err, handlers.ErrUnknownProduct)
	require.True(t, jobs.IsPermanent(err))
	for name, doc := range map[string]bson.D{
		"stock":  {{Key: "_id", Value: "s"}, {Key: "stock", Value: "5"}},
		"sold":   {{Key: "_id", Value: "s"}, {Key: "stock", Value: int32(5)}, {Key: "sold", Value: "x"}},
		"orders": {{Key: "_id", Value: "s"}, {Key: "stock", Value: int32(5)}, {Key: "orders", Value: "x"}},
	} {
		_, err := b.db.Collection(handlers.ProductsCollection).DeleteOne(b.ctx, bson.M{"_id": "s"})
		require.NoError(t, err)
		_, err = b.db.Collection(handlers.ProductsCollection).InsertOne(b.ctx, doc)
		require.NoError(t, err)
		err = h.Work(b.ctx, orderJob("j1", "l1", handlers.OrderArgs{Product: "s", Quantity: 1}))
		require.True(t, jobs.IsPermanent(err), name)
		require.ErrorContains(t, err, name+" is", name)
		var got bson.D
		require.NoError(t, b.db.Collection(handlers.ProductsCollection).FindOne(b.ctx, bson.M{"_id": "s"}).Decode(&got))
		require.Equal(t, doc, got, "%s: nothing written", name)
	}
	n, err := b.db.Collection(handlers.OrdersCollection).CountDocuments(b.ctx, bson.M{})
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestOrderNeverOversells: 40 orders of 1 to 3 units race for 30 units:
// the stock never goes below zero and the placed orders sold it exactly.
func TestOrderNeverOversells(t *testing.T) {
	b := orderSetup(t)
	require.NoError(t, handlers.CreateProduct(b.ctx, b.db, "tv", 30))
	h := b.handler(t, nil)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range 40 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			args := handlers.OrderArgs{Product: "tv", Quantity: int64(1 + i%3)}
			ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
			defer cancel()
			require.NoError(t, h.Work(ctx, orderJob(fmt.Sprint("j", i), "l", args)))
		}()
	}
	wg.Wait()
	left := requireOrders(t, b.ctx, b.db, "tv", 30)
	require.Less(t, left, int64(3), "orders of 1 unit were still coming: the stock sold down")
}

// TestOrderStalledBetweenReadAndTake: an attempt stalls after reading the
// product (order not taken, stock enough); meanwhile another attempt of
// the same order places it. The stalled one resumes with what it read and
// must not take the units a second time.
func TestOrderStalledBetweenReadAndTake(t *testing.T) {
	b := orderSetup(t)
	require.NoError(t, handlers.CreateProduct(b.ctx, b.db, "tv", 5))
	h := b.handler(t, nil)
	args := handlers.OrderArgs{Product: "tv", Quantity: 2, OrderID: "o1"}
	stalled, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	ctx := handlers.WithAfterOrderRead(b.ctx, func() {
		once.Do(func() {
			close(stalled)
			<-resume
		})
	})
	done := make(chan error, 1)
	go func() { done <- h.Work(ctx, orderJob("j1", "stale", args)) }()
	<-stalled
	require.NoError(t, h.Work(b.ctx, orderJob("j1", "fresh", args)))
	close(resume)
	require.NoError(t, <-done)
	require.Equal(t, int64(3), requireOrders(t, b.ctx, b.db, "tv", 5))
}
