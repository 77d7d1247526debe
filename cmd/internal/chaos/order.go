//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// The flash sale's share of the run: a bounded queue, saleQueue, of a small
// capacity (set with `docketctl capacity`) served by every worker, and a
// few products of little stock (one made with `docketctl product create`).
// Each wave sends order requests into the queue at once, from goroutines
// (queue.Client Enqueue and EnqueueMany) and `enqueue order` processes;
// the queue refuses what it has no room for. Some orders are sent twice
// with the same order id (two jobs: a client that retried its order), some
// requests are sent again with the same job id (a safe retry: the job is
// there), one names a product that does not exist and must end dead. The
// sale is paused while the first wave's requests arrive, so that the queue
// fills and exactly its capacity is admitted; it is resumed right after.
//
// A sampler reads the sale's jobs all through the run: never more
// unfinished than the capacity, every unfinished one holding a slot of its
// own, no finished one holding any. After the drain the products, the
// orders and the jobs are checked from the database.

const (
	saleQueue = "sale"
	// orderGhost is a product nobody created.
	orderGhost = "sale-ghost"
	// sampleEvery is the sampler's pause between two reads.
	sampleEvery = 50 * time.Millisecond
	// strandedSlotsMsg is what a reaper logs when it frees the slot of a
	// job that is not unfinished: in this run no other app writes jobs, so
	// it would mean that a finishing write of docket's left its slot.
	strandedSlotsMsg = "freed the capacity slots of jobs that were not unfinished (written by another app)"
)

// orderOutcome is what the queue answered a request.
type orderOutcome int

const (
	orderUnknown  orderOutcome = iota // the enqueue failed otherwise
	orderAdmitted                     // inserted
	orderExisted                      // a resend: its job was there already
	orderRefused                      // the queue was full
)

// orderReq is one order request of the run.
type orderReq struct {
	wave int
	job  string // the job's id, given by the run
	args handlers.OrderArgs
	via  string // "Enqueue", "EnqueueMany" or "enqueue order"
	// resend is a second request with the same job id, args and path,
	// sent after the first was answered.
	resend  bool
	outcome orderOutcome
}

// orderID is the order's id: its orderId, else its job's.
func (q *orderReq) orderID() string {
	if q.args.OrderID != "" {
		return q.args.OrderID
	}
	return q.job
}

// saleReadErr is a read of the sampler's that failed, and when.
type saleReadErr struct {
	at  time.Time
	err error
}

// orderLoad is the sale's state of the run, shared with the sampler.
type orderLoad struct {
	products []string
	initial  map[string]int64
	capacity int

	sampled
	reqs []*orderReq
	// samples is how many reads of the sale's jobs the sampler judged;
	// maxUnfinished and maxHeld the most unfinished jobs and slots held
	// it saw in one.
	samples, maxUnfinished, maxHeld int
}

// seedOrders bounds the sale queue with `docketctl capacity`, pauses it
// until the first wave's requests are in, and creates the products, one
// with `docketctl product create`. It runs before the Go client's first
// enqueue, so the capacity applies to it at once.
func (r *run) seedOrders() {
	ctx := context.Background()
	l := &r.orders
	l.capacity = r.cfg.SaleCapacity
	l.initial = map[string]int64{}
	r.ctl("capacity", saleQueue, strconv.Itoa(l.capacity))
	r.ctl("pause", saleQueue)
	for i := 1; i <= r.cfg.Products; i++ {
		id := fmt.Sprintf("sale-p%d", i)
		stock := int64(4 + r.intN(9))
		l.products = append(l.products, id)
		l.initial[id] = stock
		if i == 1 {
			r.ctl("product", "create", id, strconv.FormatInt(stock, 10))
			continue
		}
		if err := r.retry("create product "+id, func() error { return handlers.CreateProduct(ctx, r.db, id, stock) }); err != nil {
			r.fatalf("chaos: %v", err)
		}
	}
	var units []string
	for _, id := range l.products {
		units = append(units, fmt.Sprintf("%s %d units", id, l.initial[id]))
	}
	r.t.Logf("chaos: sale: queue %s of capacity %d, paused until wave 0's orders are in; %s", saleQueue, l.capacity, strings.Join(units, ", "))
}

// ctl runs docketctl, which must succeed, and returns its standard output.
func (r *run) ctl(args ...string) string {
	r.t.Helper()
	out, stderr, code := r.command(r.ctlBin, "", args...)
	if code != 0 {
		r.fatalf("chaos: docketctl %s: exit %d: %s%s", strings.Join(args, " "), code, out, stderr)
	}
	return out
}

// orderWave sends n order requests (and the second requests of some of
// them) into the sale queue at once: one in three through `enqueue order`,
// the rest through the Go client, some in one EnqueueMany. One in four
// orders is sent again as a second job with the same order id; one in five
// Go requests is resent with its job id once answered. The second wave's
// first names a product that does not exist. Wave 0 finds the sale paused
// and resumes it once its requests are answered.
func (r *run) orderWave(ctx context.Context, w, n int) {
	l := &r.orders
	ghostWave := min(1, r.cfg.Waves-1)
	var reqs []*orderReq
	for i := range n {
		q := &orderReq{wave: w, job: fmt.Sprintf("order-w%d-%d", w, i), args: handlers.OrderArgs{
			Product:  l.products[r.intN(len(l.products))],
			Quantity: int64(1 + r.intN(3)),
		}}
		if r.intN(4) != 0 {
			q.args.OrderID = fmt.Sprintf("o-w%d-%d", w, i)
		}
		if w == ghostWave && i == 0 {
			q.args.Product = orderGhost
		}
		q.via = "Enqueue"
		switch r.intN(3) {
		case 0:
			q.via = "enqueue order"
		case 1:
			q.via = "EnqueueMany"
		}
		reqs = append(reqs, q)
		if r.intN(4) == 0 { // the client sends its order again
			again := &orderReq{wave: w, job: q.job + "-again", args: q.args, via: q.via}
			again.args.OrderID = q.orderID()
			if r.intN(2) == 0 {
				again.via = "enqueue order"
			}
			reqs = append(reqs, again)
		}
	}
	var resends []*orderReq
	for _, q := range reqs {
		if q.via != "enqueue order" && r.intN(5) == 0 {
			resends = append(resends, &orderReq{wave: w, job: q.job, args: q.args, via: "Enqueue", resend: true})
		}
	}
	l.mu.Lock()
	l.reqs = append(l.reqs, reqs...)
	l.reqs = append(l.reqs, resends...)
	l.mu.Unlock()

	// All at once: each process, each single Enqueue and the EnqueueMany
	// in a goroutine of its own; a resend after its first request.
	resendOf := map[string]*orderReq{}
	for _, q := range resends {
		resendOf[q.job] = q
	}
	var wg sync.WaitGroup
	var many []*orderReq
	for _, q := range reqs {
		switch q.via {
		case "EnqueueMany":
			many = append(many, q)
		case "enqueue order":
			wg.Go(func() { r.orderCommand(q) })
		default:
			wg.Go(func() {
				r.orderEnqueue(ctx, q)
				if again := resendOf[q.job]; again != nil {
					r.orderEnqueue(ctx, again)
				}
			})
		}
	}
	if len(many) > 0 {
		wg.Go(func() {
			r.orderEnqueueMany(ctx, many)
			for _, q := range many {
				if again := resendOf[q.job]; again != nil {
					r.orderEnqueue(ctx, again)
				}
			}
		})
	}
	wg.Wait()
	if w == 0 {
		r.ctl("resume", saleQueue)
	}
	count := map[orderOutcome]int{}
	l.mu.Lock()
	for _, q := range append(reqs, resends...) {
		count[q.outcome]++
	}
	l.mu.Unlock()
	r.t.Logf("chaos: sale: wave %d sent %d order requests (%d resent): %d admitted, %d refused, %d resends found their job there",
		w, len(reqs)+len(resends), len(resends), count[orderAdmitted], count[orderRefused], count[orderExisted])
}

func (r *run) setOutcome(q *orderReq, o orderOutcome) {
	r.orders.mu.Lock()
	q.outcome = o
	r.orders.mu.Unlock()
}

// orderEnqueue sends q with queue.Client.Enqueue.
// A request sent again after a failure reply (retry.go) that finds its job
// there was admitted by its earlier send, unless it is a resend.
func (r *run) orderEnqueue(ctx context.Context, q *orderReq) {
	r.orderEnqueueAfter(ctx, q, false)
}

// orderEnqueueAfter is orderEnqueue; failed says an earlier send of q met
// a failure reply.
func (r *run) orderEnqueueAfter(ctx context.Context, q *orderReq, failed bool) {
	var res queue.Result
	sends := 0
	err := r.retry("enqueue order "+q.job, func() (err error) {
		sends++
		res, err = r.q.Enqueue(ctx, handlers.OrderKind, q.args, queue.InsertOpts{ID: q.job, Queue: saleQueue})
		return err
	})
	switch {
	case errors.Is(err, queue.ErrQueueFull):
		var full *queue.QueueFullError
		if !errors.As(err, &full) || full.Queue != saleQueue || full.Capacity != r.orders.capacity {
			r.errorf("chaos: order %s refused with %v; want a *queue.QueueFullError for %s, capacity %d", q.job, err, saleQueue, r.orders.capacity)
		}
		r.setOutcome(q, orderRefused)
	case err != nil:
		r.errorf("chaos: enqueue order %s: %v", q.job, err)
	case res.ID != q.job:
		r.errorf("chaos: enqueue order %s: the result names job %s", q.job, res.ID)
	case res.Existed && (q.resend || (sends == 1 && !failed)):
		r.setOutcome(q, orderExisted)
	default:
		r.setOutcome(q, orderAdmitted)
	}
}

// errAgain marks a result of EnqueueMany whose job was sent again alone.
var errAgain = errors.New("sent again")

// orderEnqueueMany sends qs with one queue.Client.EnqueueMany: the refused
// ones are told apart per job.
func (r *run) orderEnqueueMany(ctx context.Context, qs []*orderReq) {
	ins := make([]queue.Insert, len(qs))
	for i, q := range qs {
		ins[i] = queue.Insert{Kind: handlers.OrderKind, Args: q.args, Opts: queue.InsertOpts{ID: q.job, Queue: saleQueue}}
	}
	res, err := r.q.EnqueueMany(ctx, ins)
	if transient(err) && len(res) == len(qs) {
		// A failure reply (retry.go): the jobs not known to be there are
		// sent again, one by one.
		r.t.Logf("chaos: enqueue %d orders met a failure reply, the jobs not there sent again: %v", len(qs), err)
		for i, q := range qs {
			if res[i].Err != nil && !errors.Is(res[i].Err, queue.ErrQueueFull) {
				r.orderEnqueueAfter(ctx, q, true)
				res[i] = queue.Result{ID: q.job, Err: errAgain}
			}
		}
		err = errAgain // the error's shape is not judged: it was the failure's
	}
	if len(res) != len(qs) {
		r.errorf("chaos: enqueue %d orders: %d results: %v", len(qs), len(res), err)
		return
	}
	refused := 0
	for i, q := range qs {
		switch rs := res[i]; {
		case errors.Is(rs.Err, queue.ErrQueueFull):
			if !errors.Is(rs.Err, queue.ErrNotInserted) {
				r.errorf("chaos: order %s refused with %v, which does not wrap queue.ErrNotInserted", q.job, rs.Err)
			}
			refused++
			r.setOutcome(q, orderRefused)
		case errors.Is(rs.Err, errAgain): // its outcome is its send's again
		case rs.Err != nil:
			r.errorf("chaos: enqueue order %s (EnqueueMany): %v", q.job, rs.Err)
		case rs.ID != q.job || rs.Existed:
			r.errorf("chaos: enqueue order %s (EnqueueMany): the result is %+v", q.job, rs)
		default:
			r.setOutcome(q, orderAdmitted)
		}
	}
	var ee *queue.EnqueueError
	switch {
	case errors.Is(err, errAgain):
	case refused == 0 && err != nil:
		r.errorf("chaos: enqueue %d orders: %v", len(qs), err)
	case refused > 0 && (!errors.As(err, &ee) || ee.Refused != refused || !errors.Is(err, queue.ErrQueueFull)):
		r.errorf("chaos: enqueue %d orders: %d refused, but the error is %v", len(qs), refused, err)
	}
}

// orderCommand sends q with `enqueue order`: exit 0 printing the job's id,
// or exit 3 saying the queue is full.
func (r *run) orderCommand(q *orderReq) {
	args := []string{"order", "--product", q.args.Product, "--quantity", strconv.FormatInt(q.args.Quantity, 10),
		"--queue", saleQueue, "--id", q.job}
	if q.args.OrderID != "" {
		args = append(args, "--order-id", q.args.OrderID)
	}
	out, stderr, code := r.command(r.enqueueBin, "", args...)
	full := fmt.Sprintf("enqueue order: queue %s is full (capacity %d)", saleQueue, r.orders.capacity)
	switch {
	case code == 0 && strings.TrimSpace(out) == q.job:
		r.setOutcome(q, orderAdmitted)
	case code == 3 && strings.Contains(stderr, full) && out == "":
		r.setOutcome(q, orderRefused)
	default:
		r.errorf("chaos: enqueue %s: exit %d, stdout %q, stderr %q; want exit 0 printing %s, or exit 3 with %q",
			strings.Join(args, " "), code, out, stderr, q.job, full)
	}
}

// startSampler starts the sampler of the sale's jobs, of the limited
// kind's (limit.go), the rate-limited one's (rate.go) and the partitioned
// one's (partition.go); the function it returns stops it. A run that stops
// early stops it in its cleanup, before devdb goes.
func (r *run) startSampler() func() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			r.sampleSale(context.Background())
			r.sampleLimit(context.Background())
			r.sampleRate(context.Background())
			r.samplePart(context.Background())
			select {
			case <-stop:
				return
			case <-time.After(sampleEvery):
			}
		}
	})
	stopNow := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	r.t.Cleanup(stopNow)
	return stopNow
}

// sampleSale reads the sale's jobs, in one query, and judges what it read:
// at most the capacity unfinished, each unfinished job holding a slot of
// the queue's (one in [0, capacity), no two the same), no finished job
// holding one.
func (r *run) sampleSale(ctx context.Context) {
	l := &r.orders
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var docs []struct {
		ID    string     `bson:"_id"`
		State jobs.State `bson:"state"`
		Slot  *string    `bson:"capacitySlot"`
	}
	if err := r.findJobs(ctx, &docs, bson.M{"queue": saleQueue}); err != nil {
		l.readFailed(err)
		return
	}
	unfinished, held := 0, map[string]string{}
	for _, d := range docs {
		if !d.State.Finished() {
			unfinished++
		}
		switch {
		case d.Slot == nil && !d.State.Finished():
			l.problem("job %s is %s and holds no slot of the queue's capacity", d.ID, d.State)
		case d.Slot == nil:
		case d.State.Finished():
			l.problem("job %s is %s and still holds slot %s", d.ID, d.State, *d.Slot)
		case held[*d.Slot] != "":
			l.problem("jobs %s and %s both hold slot %s", held[*d.Slot], d.ID, *d.Slot)
		default:
			held[*d.Slot] = d.ID
			k, err := strconv.Atoi(strings.TrimPrefix(*d.Slot, saleQueue+"/"))
			if !strings.HasPrefix(*d.Slot, saleQueue+"/") || err != nil || k < 0 || k >= l.capacity {
				l.problem("job %s holds slot %q, not one of %s/0 to %s/%d", d.ID, *d.Slot, saleQueue, saleQueue, l.capacity-1)
			}
		}
	}
	if unfinished > l.capacity {
		l.problem("a sample read %d unfinished jobs in the queue, over its capacity %d", unfinished, l.capacity)
	}
	l.mu.Lock()
	l.samples++
	l.maxUnfinished = max(l.maxUnfinished, unfinished)
	l.maxHeld = max(l.maxHeld, len(held))
	l.mu.Unlock()
}

// checkOrders checks the sale from the database after the drain:
//   - what the sampler saw, and that it sampled; no read of it failed but
//     around the outage;
//   - while the sale was paused (wave 0) exactly its capacity of jobs was
//     admitted;
//   - every admitted request has its job, an order of the sale as sent;
//     a refused one has none; the queue holds no other job; no slot is
//     held, and no reaper had to free a slot a finishing write left;
//   - per product: stock ≥ 0, stock + sold = the initial stock, sold = the
//     units of its placed orders, its orders = exactly its placed orders,
//     none twice; every orders document is an admitted order, as sent,
//     rejected only with less stock left than it asked for; every order
//     whose job succeeded is placed or rejected; the order for a product
//     that does not exist is not recorded (its job ends dead: checkJob).
func (r *run) checkOrders(all []jobs.Job) {
	ctx := context.Background()
	l := &r.orders
	l.mu.Lock()
	defer l.mu.Unlock()
	r.res.SaleCapacity, r.res.SaleSamples, r.res.SaleMaxHeld = l.capacity, l.samples, max(l.maxUnfinished, l.maxHeld)
	for _, p := range l.problems {
		r.errorf("chaos: sale: the sampler saw it: %s", p)
	}
	if l.samples == 0 {
		r.errorf("chaos: sale: no sample of the queue succeeded during the run")
	}
	for _, e := range l.errs {
		if strings.Contains(e.err.Error(), "try again") || r.duringOutage(e.at) || transient(e.err) {
			continue
		}
		r.errorf("chaos: sale: a sample failed while devdb was up: %v", e.err)
	}

	// The requests: which jobs must be there, and which not.
	admitted := map[string]*orderReq{} // job id → its first request
	refused := map[string]bool{}
	wave0, sent0 := map[string]bool{}, map[string]bool{}
	for _, q := range l.reqs {
		if q.wave == 0 && q.outcome != orderUnknown {
			sent0[q.job] = true
		}
		r.res.OrderRequests++
		switch q.outcome {
		case orderAdmitted:
			r.res.OrderAdmitted++
			if admitted[q.job] != nil {
				r.errorf("chaos: sale: job %s was admitted twice: the second request should have found it there", q.job)
			}
			admitted[q.job] = q
			if q.wave == 0 {
				wave0[q.job] = true
			}
		case orderExisted:
			r.res.OrderResentThere++
		case orderRefused:
			r.res.OrderRefused++
			refused[q.job] = true
		}
	}
	for _, q := range l.reqs {
		if q.outcome == orderExisted && admitted[q.job] == nil {
			r.errorf("chaos: sale: resent job %s was found there, but no request admitted it", q.job)
		}
	}
	if want := min(l.capacity, len(sent0)); len(wave0) != want {
		r.errorf("chaos: sale: %d of the %d jobs sent while the sale was paused (wave 0) were admitted; want exactly %d (its capacity %d)", len(wave0), len(sent0), want, l.capacity)
	}
	byID := map[string]*jobs.Job{}
	for i := range all {
		j := &all[i]
		byID[j.ID] = j
		if j.Queue == saleQueue && admitted[j.ID] == nil {
			r.errorf("chaos: sale: job %s (%s) is in the queue, but no request of the run was admitted as it", j.ID, j.Kind)
		}
	}
	for id := range refused {
		if admitted[id] == nil && byID[id] != nil {
			r.errorf("chaos: sale: job %s exists (%s), but every request for it was refused as the queue was full", id, byID[id].State)
		}
	}
	orderJobs := map[string][]*jobs.Job{} // order id → its jobs
	for _, id := range slices.Sorted(maps.Keys(admitted)) {
		q, j := admitted[id], byID[id]
		if j == nil {
			r.errorf("chaos: sale: job %s was admitted (%s) but is not in the collection", id, q.via)
			continue
		}
		var a handlers.OrderArgs
		if err := bson.Unmarshal(j.Args, &a); err != nil || j.Kind != handlers.OrderKind || j.Queue != saleQueue || a != q.args {
			r.errorf("chaos: sale: job %s is %s in queue %s with args %s (%v); the run sent an order %+v to %s", id, j.Kind, j.Queue, j.Args, err, q.args, saleQueue)
			continue
		}
		orderJobs[q.orderID()] = append(orderJobs[q.orderID()], j)
	}
	held, err := store.Of(r.q).Collection().CountDocuments(ctx, bson.M{"capacitySlot": bson.M{"$exists": true}})
	if err != nil || held != 0 {
		r.errorf("chaos: sale: %d jobs still hold a capacity slot after the drain (%v)", held, err)
	}
	if n, err := r.q.Occupied(ctx, saleQueue); err != nil || n != 0 {
		r.errorf("chaos: sale: Occupied(%s) = %d, %v after the drain; want 0", saleQueue, n, err)
	}
	for _, p := range r.procs {
		for _, line := range parseLog(p.out.String()) {
			if line.Msg == strandedSlotsMsg {
				r.errorf("chaos: sale: worker %s's reaper freed slots of jobs that were not unfinished at %s: a finishing write left its slot", p.id, line.TS)
			}
		}
	}

	// The orders documents.
	var orders []struct {
		ID       string `bson:"_id"`
		Product  string `bson:"product"`
		Quantity int64  `bson:"quantity"`
		Status   string `bson:"status"`
		Job      string `bson:"job"`
	}
	r.readAll(ctx, "the orders", r.db.Collection(handlers.OrdersCollection), &orders)
	placed := map[string]map[string]bool{} // product → its placed orders
	units := map[string]int64{}
	recorded := map[string]bool{}
	stock := map[string]int64{}
	products := map[string]*handlers.Product{}
	for _, id := range l.products {
		p, err := handlers.ReadProduct(ctx, r.db, id)
		if err != nil {
			r.errorf("chaos: sale: read product %s: %v", id, err)
			continue
		}
		products[id], stock[id] = p, p.Stock
	}
	for _, o := range orders {
		recorded[o.ID] = true
		js := orderJobs[o.ID]
		if len(js) == 0 {
			r.errorf("chaos: sale: order %s is recorded %s, but no admitted job is that order", o.ID, o.Status)
			continue
		}
		var a handlers.OrderArgs
		_ = bson.Unmarshal(js[0].Args, &a)
		if o.Product != a.Product || o.Quantity != a.Quantity || !slices.ContainsFunc(js, func(j *jobs.Job) bool { return j.ID == o.Job }) {
			r.errorf("chaos: sale: order %s is recorded as %d of %s by job %s; its jobs %v asked %d of %s", o.ID, o.Quantity, o.Product, o.Job, jobIDs(js), a.Quantity, a.Product)
		}
		switch o.Status {
		case handlers.OrderPlaced:
			r.res.OrdersPlaced++
			if placed[o.Product] == nil {
				placed[o.Product] = map[string]bool{}
			}
			placed[o.Product][o.ID] = true
			units[o.Product] += o.Quantity
		case handlers.OrderRejected:
			r.res.OrdersRejected++
			if s, ok := stock[o.Product]; ok && s >= o.Quantity {
				r.errorf("chaos: sale: order %s for %d of %s was rejected, yet %d are left in stock (stock only goes down)", o.ID, o.Quantity, o.Product, s)
			}
		default:
			r.errorf("chaos: sale: order %s has status %q", o.ID, o.Status)
		}
	}
	for order, js := range orderJobs {
		for _, j := range js {
			if j.State == jobs.StateSucceeded && !recorded[order] {
				r.errorf("chaos: sale: order job %s succeeded, but its order %s is neither placed nor rejected", j.ID, order)
			}
		}
	}
	for _, id := range l.products {
		p := products[id]
		if p == nil {
			continue
		}
		r.res.UnitsSold += p.Sold
		if p.Stock < 0 {
			r.errorf("chaos: sale: product %s is oversold: stock %d", id, p.Stock)
		}
		if p.Stock+p.Sold != l.initial[id] {
			r.errorf("chaos: sale: product %s: stock %d + sold %d = %d; it was created with %d", id, p.Stock, p.Sold, p.Stock+p.Sold, l.initial[id])
		}
		if p.Sold != units[id] {
			r.errorf("chaos: sale: product %s sold %d units; its placed orders are for %d", id, p.Sold, units[id])
		}
		seen := map[string]bool{}
		for _, o := range p.Orders {
			if seen[o] {
				r.errorf("chaos: sale: product %s lists order %s twice: it was placed twice", id, o)
			}
			seen[o] = true
			if !placed[id][o] {
				r.errorf("chaos: sale: product %s lists order %s, which is not recorded placed for it", id, o)
			}
		}
		for o := range placed[id] {
			if !seen[o] {
				r.errorf("chaos: sale: order %s is recorded placed for %s, which does not list it", o, id)
			}
		}
	}
	if recorded[orderGhostOrder(l.reqs)] {
		r.errorf("chaos: sale: the order for %s, a product that does not exist, was recorded", orderGhost)
	}
}

// orderGhostOrder is the order id of the request for orderGhost, "" when
// there was none.
func orderGhostOrder(reqs []*orderReq) string {
	for _, q := range reqs {
		if q.args.Product == orderGhost {
			return q.orderID()
		}
	}
	return ""
}

func jobIDs(js []*jobs.Job) []string {
	ids := make([]string, len(js))
	for i, j := range js {
		ids[i] = j.ID
	}
	return ids
}
