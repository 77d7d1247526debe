package handlers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// The order kind: the flash sale's buy request. A product is
// {_id, stock, sold, orders: [order ids]}; an order takes quantity units
// of its stock, at most once, and is recorded in the orders collection as
// {_id: order id, product, quantity, status: placed | rejected, job, at}.
//
// How an order stays exact when its attempts stall or crash: taking the
// units is ONE write to the product, fenced on the order,
//
//	updateOne({_id: product, stock: {$gte: quantity}, orders: {$ne: order}},
//	          {$inc: {stock: -quantity, sold: quantity}, $push: {orders: order}})
//
// so the decrement and the record that this order took it are atomic: a
// second attempt of the order (a retry after a lost reply, a stalled one
// resumed after another finished the job) finds the order in the product
// and takes nothing. The orders document is a view written after that
// write: "placed" ($set) once the product holds the order, "rejected"
// ($setOnInsert, never over placed) when the stock is short. Stock only
// goes down (no order or docket command adds stock), so a stale attempt
// that saw the stock short can never find it long enough later: a
// rejection is final. To sell more, create a new product (a new round);
// adding stock to a product while its orders are in flight would let a
// stalled, rejected order buy after all.
//
// Invariants, checked from the database: stock ≥ 0; stock + sold is the
// initial stock; sold is the sum of the quantities of the placed orders,
// and the product's orders are exactly the placed ones.

// OrderKind is the job kind that places an order.
const OrderKind = "order"

// Collections of the order kind.
const (
	ProductsCollection = "products"
	OrdersCollection   = "orders"
)

// Order statuses.
const (
	OrderPlaced   = "placed"
	OrderRejected = "rejected"
)

// Limits of the order kind: a product lists every order that bought from
// it, so its stock bounds that list (each order takes at least one unit).
const (
	MaxOrderQuantity = 1000
	MaxProductStock  = 100_000
	MaxOrderIDBytes  = 64
)

// ErrUnknownProduct is wrapped by the permanent error of an order for a
// product that does not exist.
var ErrUnknownProduct = errors.New("product not found")

// ErrProductExists is returned by CreateProduct for an id already taken.
var ErrProductExists = errors.New("product already exists")

// OrderArgs are the args of an order job.
type OrderArgs struct {
	// OrderID is the order's id: the order is placed at most once however
	// often it is enqueued. Defaults to the job's id.
	OrderID string `bson:"orderId,omitempty"`
	// Product is the _id of the product bought.
	Product string `bson:"product"`
	// Quantity is how many units, 1 to MaxOrderQuantity.
	Quantity int64 `bson:"quantity"`
}

// Kind implements jobs.Args.
func (OrderArgs) Kind() string { return OrderKind }

// Validate implements jobs.Validator.
func (a OrderArgs) Validate() error {
	switch {
	case a.Product == "":
		return jobs.InvalidArgs("product", "must not be empty")
	case len(a.Product) > jobs.MaxNameBytes:
		return jobs.InvalidArgs("product", "%d bytes is over the %d-byte limit", len(a.Product), jobs.MaxNameBytes)
	case a.Quantity < 1 || a.Quantity > MaxOrderQuantity:
		return jobs.InvalidArgs("quantity", "%d must be from 1 to %d", a.Quantity, MaxOrderQuantity)
	case len(a.OrderID) > MaxOrderIDBytes:
		return jobs.InvalidArgs("orderId", "%d bytes is over the %d-byte limit", len(a.OrderID), MaxOrderIDBytes)
	}
	return nil
}

// Steps of an order, reported to Deps.Hook after each write.
const (
	stepOrderTake   = "order:take"   // the units taken from the product
	stepOrderRecord = "order:record" // the orders document written
)

// maxOrderRounds bounds one attempt: a round is lost only to another
// order that changed the product's stock between the read and the write.
const maxOrderRounds = 32

// orderReadHookKey is the context key of a test's hook, run by an order
// attempt between its read of the product and its take: where a stalled
// attempt stops.
type orderReadHookKey struct{}

func registerOrder(reg *jobs.Registry, d Deps) error {
	h := &orderHandler{d: d, products: d.DB.Collection(ProductsCollection), orders: d.DB.Collection(OrdersCollection), log: d.logger().Named("order")}
	return jobs.Register(reg, h.work, jobs.KindOptions{})
}

type orderHandler struct {
	d                Deps
	products, orders *mongo.Collection
	log              *zap.Logger
}

func (h *orderHandler) work(ctx context.Context, job *jobs.Job, args OrderArgs) error {
	order := args.OrderID
	if order == "" {
		order = job.ID
		if len(order) > MaxOrderIDBytes {
			return jobs.Permanent(fmt.Errorf("order: the job's id, the order's id by default, is %d bytes, over the %d-byte limit: give orderId", len(order), MaxOrderIDBytes))
		}
	}
	for round := range maxOrderRounds {
		p, err := readProduct(ctx, h.products, args.Product)
		if err != nil {
			return err
		}
		if p.has(order) {
			return h.record(ctx, job, order, args, OrderPlaced)
		}
		if f, ok := ctx.Value(orderReadHookKey{}).(func()); ok {
			f()
		}
		if p.Stock < args.Quantity {
			return h.record(ctx, job, order, args, OrderRejected)
		}
		res, err := h.products.UpdateOne(ctx,
			bson.D{
				{Key: "_id", Value: args.Product},
				{Key: "stock", Value: bson.D{{Key: "$gte", Value: args.Quantity}}},
				{Key: "orders", Value: bson.D{{Key: "$ne", Value: order}}},
			},
			bson.D{
				{Key: "$inc", Value: bson.D{{Key: "stock", Value: -args.Quantity}, {Key: "sold", Value: args.Quantity}}},
				{Key: "$push", Value: bson.D{{Key: "orders", Value: order}}},
			})
		if err != nil {
			// The write may have been applied with its reply lost: the
			// next attempt finds the order in the product.
			return fmt.Errorf("order %q: take %d of %q: %w", order, args.Quantity, args.Product, err)
		}
		if err := h.d.step(ctx, stepOrderTake); err != nil {
			return err
		}
		if res.MatchedCount == 1 {
			return h.record(ctx, job, order, args, OrderPlaced)
		}
		h.log.Debug("the product changed under the order; reading it again", zap.String("order", order), zap.Int("round", round))
	}
	return fmt.Errorf("order %q: product %q changed under it %d times; retrying", order, args.Product, maxOrderRounds)
}

// record writes the orders document of order: placed over anything,
// rejected only where there is none.
func (h *orderHandler) record(ctx context.Context, job *jobs.Job, order string, args OrderArgs, status string) error {
	t := time.Now().UTC()
	fields := bson.D{{Key: "product", Value: args.Product}, {Key: "quantity", Value: args.Quantity}, {Key: "job", Value: job.ID}, {Key: "at", Value: t}}
	var update bson.D
	if status == OrderPlaced {
		update = bson.D{
			{Key: "$set", Value: bson.D{{Key: "status", Value: OrderPlaced}}},
			{Key: "$setOnInsert", Value: fields},
		}
	} else {
		update = bson.D{{Key: "$setOnInsert", Value: append(fields, bson.E{Key: "status", Value: OrderRejected})}}
	}
	_, err := h.orders.UpdateOne(ctx, bson.D{{Key: "_id", Value: order}}, update, options.UpdateOne().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) {
		// Two attempts upserted at once; the other inserted it. Again,
		// now as an update.
		_, err = h.orders.UpdateOne(ctx, bson.D{{Key: "_id", Value: order}}, update, options.UpdateOne().SetUpsert(true))
	}
	if err != nil {
		return fmt.Errorf("order %q: record it %s: %w", order, status, err)
	}
	if err := h.d.step(ctx, stepOrderRecord); err != nil {
		return err
	}
	h.log.Debug("order settled", zap.String("order", order), zap.String("status", status), zap.String("product", args.Product))
	return nil
}

// Product is a product of the order kind, as stored.
type Product struct {
	ID string
	// Stock is the units left; Sold the units taken by placed orders.
	Stock, Sold int64
	// Orders are the ids of the orders that took units.
	Orders []string
}

func (p *Product) has(order string) bool {
	for _, o := range p.Orders {
		if o == order {
			return true
		}
	}
	return false
}

// readProduct reads product id field by field: a missing product or a
// field of another type (another app's document) fails the order
// permanently, naming it, before any write.
func readProduct(ctx context.Context, coll *mongo.Collection, id string) (*Product, error) {
	raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, jobs.Permanent(fmt.Errorf("product %q: %w", id, ErrUnknownProduct))
	}
	if err != nil {
		return nil, fmt.Errorf("read product %q: %w", id, err)
	}
	return decodeProduct(id, raw)
}

func decodeProduct(id string, raw bson.Raw) (*Product, error) {
	bad := func(format string, a ...any) error {
		return jobs.Permanent(fmt.Errorf("product %q is not an order kind's product: "+format, append([]any{id}, a...)...))
	}
	p := &Product{ID: id}
	v := raw.Lookup("stock")
	if v.Type != bson.TypeInt32 && v.Type != bson.TypeInt64 {
		return nil, bad("stock is %s %s, not an integer", v.Type, v)
	}
	p.Stock, _ = v.AsInt64OK()
	switch v := raw.Lookup("sold"); v.Type {
	case 0:
	case bson.TypeInt32, bson.TypeInt64:
		p.Sold, _ = v.AsInt64OK()
	default:
		return nil, bad("sold is %s %s, not an integer", v.Type, v)
	}
	switch v := raw.Lookup("orders"); v.Type {
	case 0:
	case bson.TypeArray:
		vals, err := v.Array().Values()
		if err != nil {
			return nil, bad("orders: %v", err)
		}
		for i, o := range vals {
			s, ok := o.StringValueOK()
			if !ok {
				return nil, bad("orders[%d] is %s, not an order id", i, o.Type)
			}
			p.Orders = append(p.Orders, s)
		}
	default:
		return nil, bad("orders is %s, not an array", v.Type)
	}
	return p, nil
}

// CreateProduct adds a product with stock units for orders to buy.
func CreateProduct(ctx context.Context, db *mongo.Database, id string, stock int64) error {
	switch {
	case id == "":
		return errors.New("product: the id must not be empty")
	case len(id) > jobs.MaxNameBytes:
		return fmt.Errorf("product: the id is %d bytes, over the %d-byte limit", len(id), jobs.MaxNameBytes)
	case stock < 0 || stock > MaxProductStock:
		return fmt.Errorf("product %q: stock %d must be from 0 to %d", id, stock, MaxProductStock)
	}
	_, err := db.Collection(ProductsCollection).InsertOne(ctx, bson.D{
		{Key: "_id", Value: id}, {Key: "stock", Value: stock}, {Key: "sold", Value: int64(0)}, {Key: "orders", Value: bson.A{}},
	})
	if mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("product %q: %w", id, ErrProductExists)
	}
	if err != nil {
		return fmt.Errorf("create product %q: %w", id, err)
	}
	return nil
}

// ReadProduct returns product id as stored.
func ReadProduct(ctx context.Context, db *mongo.Database, id string) (*Product, error) {
	return readProduct(ctx, db.Collection(ProductsCollection), id)
}

// OrderSummary counts the orders of one product by status.
type OrderSummary struct {
	Placed, Rejected int
	// UnitsPlaced is the sum of the placed orders' quantities.
	UnitsPlaced int64
	// PlacedIDs are the ids of the placed orders.
	PlacedIDs map[string]bool
}

// SummarizeOrders reads the orders documents of product.
func SummarizeOrders(ctx context.Context, db *mongo.Database, product string) (OrderSummary, error) {
	s := OrderSummary{PlacedIDs: map[string]bool{}}
	cur, err := db.Collection(OrdersCollection).Find(ctx, bson.D{{Key: "product", Value: product}})
	if err != nil {
		return s, fmt.Errorf("read the orders of %q: %w", product, err)
	}
	defer closeCursor(ctx, cur)
	for cur.Next(ctx) {
		status, _ := cur.Current.Lookup("status").StringValueOK()
		switch status {
		case OrderPlaced:
			s.Placed++
			q, _ := cur.Current.Lookup("quantity").AsInt64OK()
			s.UnitsPlaced += q
			id, _ := cur.Current.Lookup("_id").StringValueOK()
			s.PlacedIDs[id] = true
		case OrderRejected:
			s.Rejected++
		}
	}
	return s, cur.Err()
}
