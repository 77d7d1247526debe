package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

func init() {
	subcommands["order"] = subcommand{"buy from a product (the flash sale): --product P [--quantity N] [--order-id ID]", orderCommand}
	ctlCommands["product"] = subcommand{"the order kind's products: `product create ID STOCK`, `product show ID` (stock, sold, orders)", ctlProduct}
	ctlCommands["capacity"] = subcommand{"bound a queue: `capacity QUEUE N` (enqueues past N unfinished jobs exit 3), `capacity QUEUE off`; alone, list the bounded queues", ctlCapacity}
}

// ctlCapacity sets, clears or lists the queues' capacities.
func ctlCapacity(fs *flag.FlagSet) func(*env, []string) error {
	by := fs.String("by", "", "who sets it, recorded with the capacity (default: user@host)")
	return func(e *env, rest []string) error {
		switch len(rest) {
		case 0:
			return listCapacities(e)
		case 2:
		default:
			return badInput("give a queue and a capacity (a number, or off): capacity QUEUE N")
		}
		q, val := rest[0], rest[1]
		if err := queueNames([]string{q}); err != nil {
			return err
		}
		if *by == "" {
			*by = operator()
		}
		if val == "off" {
			changed, err := e.q.ClearCapacity(e.ctx, q, *by)
			done := fmt.Sprintf("unbounded: enqueues are admitted again within %s", queue.CapacityRefresh)
			return e.reportChange(q, changed, err, done, "had no capacity")
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 || n > queue.MaxCapacity {
			return badInput("capacity %q: give a whole number from 0 to %d, or off", val, queue.MaxCapacity)
		}
		if err := e.q.SetCapacity(e.ctx, q, n, *by); err != nil {
			return err
		}
		used, err := e.q.Occupied(e.ctx, q)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s\tcapacity %d (%d admitted and unfinished now): enqueues past it are refused within %s\n", shown(q), n, used, queue.CapacityRefresh)
		return nil
	}
}

// listCapacities prints the bounded queues: capacity, admitted now, who set it.
func listCapacities(e *env) error {
	caps, err := e.q.QueueCapacities(e.ctx)
	if err != nil {
		return err
	}
	if len(caps) == 0 {
		fmt.Fprintln(e.stdout, "no queue has a capacity")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "queue\tcapacity\tadmitted\tset")
	for _, c := range caps {
		fmt.Fprintf(tw, "%s\t%s\n", shown(c.Queue), capacityNote(c))
	}
	return tw.Flush()
}

// capacityNote says how a queue's capacity reads in a table: capacity,
// admitted, set.
func capacityNote(c queue.QueueCapacity) string {
	if c.Malformed != "" {
		return "none\t-\tits queues document is malformed: " + shown(c.Malformed) + "; `docketctl capacity` rewrites it"
	}
	set := ""
	if !c.SetAt.IsZero() {
		set = c.SetAt.Format(time.RFC3339)
	}
	if c.SetBy != "" {
		set += " by " + shown(c.SetBy)
	}
	return fmt.Sprintf("%d\t%d\t%s", c.Capacity, c.Occupied, set)
}

var orderCommand = argsCommand(func(fs *flag.FlagSet, a *handlers.OrderArgs) {
	fs.StringVar(&a.Product, "product", "", "the product's id (required)")
	fs.Int64Var(&a.Quantity, "quantity", 1, "units to buy, 1 to "+strconv.Itoa(handlers.MaxOrderQuantity))
	fs.StringVar(&a.OrderID, "order-id", "", "the order's id: placed at most once, however often enqueued (default: the job's id)")
})

// ctlProduct creates and shows the order kind's products.
func ctlProduct(*flag.FlagSet) func(*env, []string) error {
	return func(e *env, rest []string) error {
		switch {
		case len(rest) == 3 && rest[0] == "create":
			stock, err := strconv.ParseInt(rest[2], 10, 64)
			if err != nil {
				return badInput("stock %q: give a whole number from 0 to %d", rest[2], handlers.MaxProductStock)
			}
			err = handlers.CreateProduct(e.ctx, e.db, rest[1], stock)
			if errors.Is(err, handlers.ErrProductExists) || (err != nil && !isServerTrouble(err)) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s\tstock %d\n", rest[1], stock)
			return nil
		case len(rest) == 2 && rest[0] == "show":
			p, err := handlers.ReadProduct(e.ctx, e.db, rest[1])
			if errors.Is(err, handlers.ErrUnknownProduct) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			sum, err := handlers.SummarizeOrders(e.ctx, e.db, rest[1])
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s\tstock %d\tsold %d\torders placed %d (%d units)\trejected %d\n",
				shown(p.ID), p.Stock, p.Sold, sum.Placed, sum.UnitsPlaced, sum.Rejected)
			return nil
		}
		return badInput("use: product create ID STOCK, or product show ID")
	}
}

// isServerTrouble reports whether err is the server failing rather than
// the input being wrong.
func isServerTrouble(err error) bool {
	var se mongo.ServerError
	return errors.Is(err, context.DeadlineExceeded) || mongo.IsTimeout(err) || mongo.IsNetworkError(err) || errors.As(err, &se)
}
