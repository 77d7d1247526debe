package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/cmd/internal/cli"
	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestFlashSale: a product with S units, a queue "sale" of capacity C set
// by `docketctl capacity`, two worker processes, and 8 concurrent enqueuer
// goroutines each running `enqueue order` processes, N ≫ C requests in
// all. The queue is paused for the first half of the burst (so it fills
// and must refuse), then resumed. Throughout, a sampler counts the sale's
// admitted, unfinished jobs from the database: never more than C.
// Afterwards: every request either exited 0 with its job's id or exited 3
// with "queue sale is full (capacity C)"; no oversell (stock ≥ 0, stock +
// sold = S, the placed orders' units are the units sold); every admitted
// order was placed or rejected as sold out.
func TestFlashSale(t *testing.T) {
	t.Parallel()
	const (
		stock     = 20
		capacity  = 5
		enqueuers = 8
		perProc   = 16 // N = 128 requests
	)
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	ctx := context.Background()
	tries := 0
	must(t, "create the product", func() error {
		tries++
		if err := handlers.CreateProduct(ctx, db, "tv", stock); tries == 1 || !errors.Is(err, handlers.ErrProductExists) {
			return err
		}
		return nil // an earlier try's, its reply lost
	})
	ctlBin, enqBin := ctlBinary(t), enqueueBinary(t)
	op := &operator{t: t, bin: ctlBin, db: db}
	ctl := func(args ...string) string {
		t.Helper()
		out, stderr, code := op.run(args...)
		require.Equal(t, 0, code, stderr)
		return out
	}
	if out := ctl("capacity", "sale", fmt.Sprint(capacity)); !op.resent {
		require.Contains(t, out, "capacity 5")
	}
	ctl("pause", "sale")
	for i := range 2 {
		startWorker(t, db, fmt.Sprintf("worker-%d", i), append(fastWorker, "--queues", "sale", "--concurrency", "2")...)
	}

	// The sampler: admitted and unfinished, as jobs (available or running)
	// and as slots held.
	var samples, maxJobs, maxSlots atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	stopSampler := sync.OnceFunc(func() { close(stop); <-sampled })
	t.Cleanup(stopSampler) // before the database goes, should the test fail
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			n, err := store.Of(q).Collection().CountDocuments(ctx, bson.M{"queue": "sale", "state": bson.M{"$in": bson.A{jobs.StateAvailable, jobs.StateRunning}}})
			if testdb.Transient(err) {
				continue // a failure reply: the next sample reads again
			}
			if err != nil {
				t.Error(err)
				return
			}
			s, err := q.Occupied(ctx, "sale")
			if testdb.Transient(err) {
				continue
			}
			if err != nil {
				t.Error(err)
				return
			}
			samples.Add(1)
			for _, m := range []struct {
				max *atomic.Int64
				v   int64
			}{{&maxJobs, n}, {&maxSlots, int64(s)}} {
				if m.v > m.max.Load() {
					m.max.Store(m.v)
				}
			}
		}
	}()

	type outcome struct {
		order          string
		stdout, stderr string
		code           int
	}
	var mu sync.Mutex
	var outcomes []outcome
	burst := func(phase int) {
		var wg sync.WaitGroup
		for e := range enqueuers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perProc / 2 {
					order := fmt.Sprintf("p%d-e%d-%d", phase, e, i)
					// A request that met a failure reply is run again
					// with the id it printed, as an app does.
					buyer := &operator{t: t, bin: enqBin, db: db}
					out, stderr, code := buyer.run("order", "--product", "tv", "--queue", "sale", "--order-id", order)
					mu.Lock()
					outcomes = append(outcomes, outcome{order, out, stderr, code})
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	burst(1) // paused: C admitted, the rest refused
	admittedWhilePaused := 0
	for _, o := range outcomes {
		if o.code == 0 {
			admittedWhilePaused++
		}
	}
	require.Equal(t, capacity, admittedWhilePaused, "a paused queue of capacity C admits exactly C")
	ctl("resume", "sale")
	burst(2) // workers free capacity as they finish orders

	// Every admitted order finishes.
	var admitted, refused []outcome
	for _, o := range outcomes {
		switch o.code {
		case 0:
			admitted = append(admitted, o)
		case cli.ExitQueueFull:
			refused = append(refused, o)
			require.Contains(t, o.stderr, fmt.Sprintf("enqueue order: queue sale is full (capacity %d)", capacity), o.order)
			require.Empty(t, o.stdout, "%s: a refused request prints no id", o.order)
		default:
			t.Fatalf("order %s: exit %d: %s", o.order, o.code, o.stderr)
		}
	}
	require.Len(t, outcomes, enqueuers*perProc)
	require.GreaterOrEqual(t, len(refused), len(outcomes)/2-capacity, "the requests past the capacity while paused were shed")
	for _, o := range admitted {
		waitJob(t, q, strings.TrimSpace(o.stdout), 2*time.Minute, "succeeded", inState(jobs.StateSucceeded))
	}
	stopSampler()

	t.Logf("flash sale: %d requests, %d admitted, %d refused; %d samples, at most %d admitted unfinished jobs and %d slots held (capacity %d)",
		len(outcomes), len(admitted), len(refused), samples.Load(), maxJobs.Load(), maxSlots.Load(), capacity)
	require.GreaterOrEqual(t, samples.Load(), int64(50), "the sampler ran through the sale")
	require.LessOrEqual(t, maxJobs.Load(), int64(capacity), "admitted unfinished jobs never exceeded the capacity")
	require.LessOrEqual(t, maxSlots.Load(), int64(capacity))
	require.Equal(t, int64(capacity), maxJobs.Load(), "the queue was seen full")

	n := count(t, store.Of(q).Collection(), bson.M{"queue": "sale"})
	require.EqualValues(t, len(admitted), n, "a job per admitted request, none for a refused one")
	var p *handlers.Product
	must(t, "read the product", func() (err error) { p, err = handlers.ReadProduct(ctx, db, "tv"); return err })
	require.GreaterOrEqual(t, p.Stock, int64(0), "no oversell")
	require.EqualValues(t, stock, p.Stock+p.Sold)
	var sum handlers.OrderSummary
	must(t, "summarize the orders", func() (err error) { sum, err = handlers.SummarizeOrders(ctx, db, "tv"); return err })
	require.Equal(t, p.Sold, sum.UnitsPlaced, "orders = units sold")
	require.Len(t, p.Orders, sum.Placed)
	require.Equal(t, len(admitted), sum.Placed+sum.Rejected, "every admitted order placed or rejected")
	if len(admitted) >= stock {
		require.Zero(t, p.Stock, "enough orders were admitted to sell out")
	}
	var used int
	must(t, "read the capacity used", func() (err error) { used, err = q.Occupied(ctx, "sale"); return err })
	require.Zero(t, used, "finished orders hold no capacity")
	out := ctl("product", "show", "tv")
	require.Contains(t, out, fmt.Sprintf("sold %d", p.Sold))
}
