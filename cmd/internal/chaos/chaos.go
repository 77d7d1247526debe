//go:build linux

// Package chaos runs docket the way failure meets it in production: real
// worker processes on a real devdb process, SIGKILLed, SIGSTOPped past their
// leases and cut off from the database while a mixed load of transfers,
// friendships, racing renames, ledger transfers (and cancels), tree
// publishes and flash-sale orders into a bounded queue runs, the transfers
// under a concurrency limit, bursts of noop jobs under a rate limit and of
// record jobs under a partition limit per customer, workflows of step jobs
// (a chain, a fan-in, a diamond, a failing task, a task that runs anyway),
// readers read the trees' snapshots and a sampler reads the bounded queue,
// the limited kind, the rate-limited one and the partitioned one (per
// partition) all the while. Then it lets the queue drain and checks every
// job, every handler invariant (the ledger's, the trees', the sale's and
// the workflows' included), every snapshot read and sample, and that no
// worker wrote anything after it had lost a lease. On failure the last
// lines it logs are the seed and the failed checks.
//
// A run is driven by one seed: the same seed makes the same load and the
// same schedule of failures (the timing of processes still varies).
package chaos

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Config sizes a run.
type Config struct {
	// Seed drives the load and the failures. Defaults to the clock.
	Seed uint64
	// Jobs is about how many jobs the load enqueues (the sweepers may add
	// a few). Defaults to 200.
	Jobs int
	// Waves is how many batches the load is enqueued in, spread over the
	// run so that jobs keep arriving while processes fail. Defaults to 4.
	Waves int
	// Workers is how many worker processes run at once. Defaults to 4.
	Workers int
	// Outage is how long devdb is stopped. Defaults to a seeded 5–10 s.
	Outage time.Duration
	// Stall is how long the first stalled worker is SIGSTOPped; it must be
	// longer than the lease (2 s). Defaults to 4 s.
	Stall time.Duration
	// LongStallMax bounds the second stall, which lasts (at least Stall)
	// until every job the stopped worker held has been re-queued by the
	// reaper and finished by another worker, so that the stopped one
	// resumes in the middle of work that is already done. Defaults to 30 s.
	LongStallMax time.Duration
	// Drain bounds the wait for the queue to empty. Defaults to 2 min.
	Drain time.Duration
	// Users, Accounts and Comments size the seeded data. Default 12, 8, 40.
	Users, Accounts, Comments int
	// LedgerHot and LedgerCold are how many ledger accounts the ledger
	// transfers run between: a few hot ones, with little money and most of
	// the transfers, and more cold ones. Default 2 and 6.
	LedgerHot, LedgerCold int
	// Trees is how many trees the publishes spread over, Readers how many
	// goroutines read their snapshots all through the run, TreeKeep how
	// many published versions the workers' tree sweeper keeps. Default 3,
	// 2, 3.
	Trees, Readers, TreeKeep int
	// Products is how many products the orders buy from, each of a
	// seeded 4 to 12 units; SaleCapacity the capacity of the queue the
	// orders go to. Default 3 and 4.
	Products, SaleCapacity int
	// Replay says how to run this run again, in the first and last lines
	// it logs. Defaults to "DOCKET_CHAOS_SEED=<Seed>".
	Replay string
}

func (c Config) withDefaults() Config {
	c.Seed = cmp.Or(c.Seed, uint64(time.Now().UnixNano()))
	c.Jobs = cmp.Or(c.Jobs, 200)
	c.Waves = cmp.Or(c.Waves, 4)
	c.Workers = cmp.Or(c.Workers, 4)
	c.Stall = cmp.Or(c.Stall, 4*time.Second)
	c.LongStallMax = cmp.Or(c.LongStallMax, 30*time.Second)
	c.Drain = cmp.Or(c.Drain, 2*time.Minute)
	c.Users = cmp.Or(c.Users, 12)
	c.Accounts = cmp.Or(c.Accounts, 8)
	c.Comments = cmp.Or(c.Comments, 40)
	c.LedgerHot = cmp.Or(c.LedgerHot, 2)
	c.LedgerCold = cmp.Or(c.LedgerCold, 6)
	c.Trees = cmp.Or(c.Trees, 3)
	c.Readers = cmp.Or(c.Readers, 2)
	c.TreeKeep = cmp.Or(c.TreeKeep, 3)
	c.Products = cmp.Or(c.Products, 3)
	c.SaleCapacity = cmp.Or(c.SaleCapacity, 4)
	if c.Replay == "" {
		c.Replay = fmt.Sprintf("DOCKET_CHAOS_SEED=%d", c.Seed)
	}
	return c
}

// Result is what a run did.
type Result struct {
	Seed uint64
	// Jobs is every job in the collection at the end, by final state.
	Jobs, Succeeded, Dead, Cancelled int
	// Retried jobs took more than one attempt; MaxAttempt is the most.
	Retried, MaxAttempt int
	// Kills is how many workers were SIGKILLed, Stalls how many were
	// SIGSTOPped past their lease.
	Kills, Stalls int
	// OutlivedJobs were held by a stalled worker and finished by another
	// one before the stalled worker was resumed.
	OutlivedJobs int
	// Outage is how long devdb was down.
	Outage time.Duration
	// StalledJobs were held by a stalled worker when it was stopped.
	StalledJobs int
	// UnloggedFinishes are jobs whose final write was made by a worker
	// killed before it could log it.
	UnloggedFinishes int
	// Transfers done and cancelled.
	TxDone, TxCancelled int
	// OutageLogLines is the most warnings one worker logged while devdb
	// was down.
	OutageLogLines int
	// Ledger transfers posted, refused (insufficient funds) and cancelled
	// on request; compensated is how many cancels had to compensate
	// instead, abandoned how many postings the sweeper abandoned (and the
	// job posted again).
	LedgerPosted, LedgerRefused, LedgerCancelled, LedgerCompensated, LedgerAbandoned int
	// TreePublishes is how many versions were published; TreeReads how
	// many snapshot reads were checked to be one whole published version,
	// TreeReadsDown how many reads failed while devdb was down.
	TreePublishes, TreeReads, TreeReadsDown int
	// Order requests sent to the bounded sale queue of capacity
	// SaleCapacity: admitted (a job inserted), refused as the queue was
	// full, and resends that found their job there. Orders placed and
	// rejected (sold out), units sold. SaleSamples is how many reads of
	// the queue's jobs the sampler judged, SaleMaxHeld the most unfinished
	// jobs or slots held it saw at once.
	SaleCapacity, OrderRequests, OrderAdmitted, OrderRefused, OrderResentThere int
	OrdersPlaced, OrdersRejected                                               int
	UnitsSold                                                                  int64
	SaleSamples, SaleMaxHeld                                                   int
	// LimitJobs is how many jobs of the limited kind (limit.go) the run
	// enqueued; LimitSamples how many reads of them the sampler judged,
	// LimitMaxLive and LimitMaxHeld the most attempts holding a live lease
	// and the most run slots held it saw at once.
	LimitJobs, LimitSamples, LimitMaxLive, LimitMaxHeld int
	// RateJobs is how many jobs of the rate-limited kind (rate.go) the run
	// enqueued, RateClaims the attempts of them the sampler saw claimed,
	// RateMostPerPeriod the most claimed in one period of the rate, and
	// RateStarts the starts the rate reserved.
	RateJobs, RateClaims, RateMostPerPeriod int
	RateStarts                              int64
	// PartJobs is how many jobs of the partitioned kind (partition.go) the
	// run enqueued; PartSamples how many reads of them the sampler judged,
	// PartHotMaxLive the most attempts of the hot customer's partition
	// holding a live lease it saw at once, PartMaxHeld the most partition
	// slots held at once, Partitions how many partitions held slots.
	PartJobs, PartSamples, PartHotMaxLive, PartMaxHeld, Partitions int
	// Workflows is how many workflows the run inserted (workflow.go),
	// WorkflowTasks their tasks, WorkflowAttempts the attempts of them
	// whose handler started, WorkflowFencedEnds the attempts that recorded
	// their return of success besides the one the job records (their lease
	// was lost, or the reply to their end's record was, and the job ran
	// again).
	Workflows, WorkflowTasks, WorkflowAttempts, WorkflowFencedEnds int
	// Elapsed is the whole run, from devdb's start to the last check.
	Elapsed time.Duration
}

// String is the one-line summary the README quotes.
func (r Result) String() string {
	return fmt.Sprintf("seed %d: %d jobs (%d succeeded, %d dead as expected, %d cancelled; %d retried, max attempt %d), "+
		"%d transfers done and %d cancelled, %d SIGKILLs, %d SIGSTOPs past the lease (%d jobs held, %d of them finished by another worker before SIGCONT), devdb down %s "+
		"(at most %d warnings per worker), %d finishes by killed workers before they logged; "+
		"ledger: %d posted, %d refused, %d cancelled, %d compensated, %d postings abandoned and posted again; "+
		"trees: %d versions published, %d snapshot reads each one whole published version (%d failed while devdb was down); "+
		"sale (capacity %d): %d order requests, %d admitted, %d refused as the queue was full, %d resends found their job there; "+
		"%d orders placed (%d units), %d rejected as sold out; %d samples of the queue, at most %d admitted and unfinished; "+
		"limit %s=%d: %d jobs, %d samples, at most %d running with a live lease and %d slots held; "+
		"rate %s=%s: %d jobs, %d attempts claimed, at most %d in one period, %d starts reserved; "+
		"partition %s=%d per %s: %d jobs, %d samples, %d partitions held slots, at most %d of %s's running with a live lease and %d slots held; "+
		"workflows: %d (%d tasks, %d attempts started, %d successes fenced out), none early, lost or succeeded twice; in %s",
		r.Seed, r.Jobs, r.Succeeded, r.Dead, r.Cancelled, r.Retried, r.MaxAttempt,
		r.TxDone, r.TxCancelled, r.Kills, r.Stalls, r.StalledJobs, r.OutlivedJobs, r.Outage.Round(100*time.Millisecond),
		r.OutageLogLines, r.UnloggedFinishes,
		r.LedgerPosted, r.LedgerRefused, r.LedgerCancelled, r.LedgerCompensated, r.LedgerAbandoned,
		r.TreePublishes, r.TreeReads, r.TreeReadsDown,
		r.SaleCapacity, r.OrderRequests, r.OrderAdmitted, r.OrderRefused, r.OrderResentThere,
		r.OrdersPlaced, r.UnitsSold, r.OrdersRejected, r.SaleSamples, r.SaleMaxHeld,
		limitKind, limitN, r.LimitJobs, r.LimitSamples, r.LimitMaxLive, r.LimitMaxHeld,
		rateKind, rateOf, r.RateJobs, r.RateClaims, r.RateMostPerPeriod, r.RateStarts,
		partKind, partN, partArg, r.PartJobs, r.PartSamples, r.Partitions, r.PartHotMaxLive, partHot, r.PartMaxHeld,
		r.Workflows, r.WorkflowTasks, r.WorkflowAttempts, r.WorkflowFencedEnds, r.Elapsed.Round(time.Second))
}

// Worker flags: leases short enough that a dead or stalled worker's jobs
// move on within seconds, sweepers that repair within seconds.
var workerFlags = []string{
	"--lease", "2s", "--heartbeat-interval", "500ms",
	"--reap-interval", "1s", "--reap-grace", "1ms", "--leader-ttl", "3s",
	"--rename-sweep-schedule", "@every 2s", "--rename-sweep-threshold", "3s",
	"--transfer-recovery-schedule", "@every 2s", "--transfer-recovery-threshold", "5s",
	"--retry-base", "100ms", "--retry-max", "2s", "--poll-max", "500ms",
	"--shutdown-timeout", "3s", "--mongo-timeout", "3s", "--log-format", "json",
	"--ledger-sweep-schedule", "@every 1s", "--ledger-abandon-after", "3s",
	"--tree-sweep-schedule", "@every 1s",
	"--queues", "default," + saleQueue,
	"--limits", fmt.Sprintf("kind:%s=%d", limitKind, limitN),
	"--rates", rateFlag(),
}

// run is the state of one chaos run.
type run struct {
	t   testing.TB
	cfg Config
	// rng draws the load and the director's pauses, killRng the killer's
	// pauses, victims and the concurrency of the workers started: two
	// sources, so that the same seed makes the same load whatever the
	// killer's timing.
	rng, killRng *rand.Rand
	dbx          *testdb.DevDB
	db           *mongo.Database
	q            *queue.Client
	env          []string

	workerBin, enqueueBin, ctlBin string

	mu      sync.Mutex
	procs   []*process // every worker ever started
	nextID  int
	res     Result
	stalls  []stallRecord
	outages [][2]time.Time

	cancelled map[string]bool // jobs the run cancelled
	openings  map[string]int64

	ledger ledgerLoad
	trees  treeLoad
	orders orderLoad
	limit  limitLoad
	rate   rateLoad
	part   partLoad
	wfs    []wfRecord // the workflows inserted

	failures []string // every failed check, in order, for the summary
}

// stallRecord is one SIGSTOP: the worker and the leases it held.
type stallRecord struct {
	p       *process
	held    map[string]jobs.Job // job id → the job as it held it
	stopped time.Time           // when it was SIGSTOPped
	resume  time.Time
}

// Run runs the chaos described by cfg against a devdb of its own, fails t
// on every broken promise, and returns what happened.
func Run(t testing.TB, cfg Config) Result {
	t.Helper()
	cfg = cfg.withDefaults()
	start := time.Now()
	t.Logf("chaos: seed %d (replay with %s), %d jobs, %d workers", cfg.Seed, cfg.Replay, cfg.Jobs, cfg.Workers)
	fmt.Fprintf(os.Stderr, "chaos: seed %d (replay with %s)\n", cfg.Seed, cfg.Replay)
	r := &run{
		t:         t,
		cfg:       cfg,
		rng:       rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		killRng:   rand.New(rand.NewPCG(cfg.Seed^0x5851f42d4c957f2d, cfg.Seed)),
		cancelled: map[string]bool{},
		openings:  map[string]int64{},
	}
	r.res.Seed = cfg.Seed
	// The worker command with test kinds added: the workflows' step
	// (workflow.go); otherwise exactly cmd/worker.
	r.workerBin = testdb.BuildBinary(t, "github.com/docketq/docket/cmd/internal/testworker", false)
	r.enqueueBin = testdb.BuildBinary(t, "github.com/docketq/docket/cmd/enqueue", false)
	r.ctlBin = testdb.BuildBinary(t, "github.com/docketq/docket/cmd/docketctl", false)
	r.dbx = testdb.StartDevDB(t, "")
	r.env = []string{"DOCKET_MONGO_URI=" + r.dbx.URI(), "DOCKET_DB=chaos"}

	client, err := mongo.Connect(options.Client().ApplyURI(r.dbx.URI()).SetServerSelectionTimeout(30 * time.Second))
	if err != nil {
		t.Fatalf("chaos: connect: %v", err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	r.db = client.Database("chaos")
	if r.q, err = queue.New(r.db, queue.Config{}); err != nil {
		t.Fatalf("chaos: %v", err)
	}
	t.Cleanup(r.cleanup)

	r.seedOrders() // first: the capacity applies to r.q's first enqueue
	const balance = 100_000
	r.enqueue("", "seed", "--users", strconv.Itoa(cfg.Users), "--accounts", strconv.Itoa(cfg.Accounts),
		"--balance", strconv.Itoa(balance), "--comments", strconv.Itoa(cfg.Comments), "--seed", strconv.FormatUint(cfg.Seed, 10))
	for i := 1; i <= cfg.Accounts; i++ {
		r.openings[fmt.Sprintf("a%d", i)] = balance
	}
	r.seedLedger()
	r.seedTrees()
	r.seedPartition() // before the workers: their first claims are under it
	stopReaders := r.startReaders()
	r.rate.since = time.Now()
	stopSampler := r.startSampler()
	for range cfg.Workers {
		r.startWorker()
	}

	stopKiller := make(chan struct{})
	killerDone := make(chan struct{})
	go r.killer(stopKiller, killerDone)

	// The director: waves of load, with a short stall, an outage and a
	// long stall between them, so that each meets running jobs. The short
	// stall resumes a worker while the new attempts of its jobs may still
	// run; the long one resumes it after they have finished them.
	stallAfter, outageAfter := 0, cfg.Waves/2
	if cfg.Waves == 1 {
		outageAfter = 0
	}
	perWave := max(cfg.Jobs/cfg.Waves, 1)
	stallDone, longDone := make(chan struct{}), make(chan struct{})
	longStarted := false
	startLong := func() { // it waits for the next jobs to run
		longStarted = true
		go func() {
			defer close(longDone)
			r.stall(true)
		}()
	}
	for w := range cfg.Waves {
		if w == stallAfter { // it waits for the wave's jobs to run
			go func() {
				defer close(stallDone)
				r.stall(false)
			}()
		}
		if w == outageAfter+1 {
			startLong()
		}
		r.wave(w, perWave)
		r.t.Logf("chaos: wave %d enqueued after %s", w, time.Since(start).Round(100*time.Millisecond))
		if t.Failed() {
			break
		}
		if w == outageAfter {
			<-stallDone // one fault at a time, so that each is judged alone
			r.sleep(500*time.Millisecond, 1500*time.Millisecond)
			r.outage()
		}
		r.sleep(time.Second, 2*time.Second)
	}
	<-stallDone
	if !longStarted && !t.Failed() {
		startLong()
	}
	if longStarted {
		<-longDone
	}

	// The faults end with the load, then the run waits for docket to
	// converge: a killer still SIGKILLing a worker every 1–3 s would keep
	// re-queueing the slowest jobs (a hot ledger posting on a loaded
	// machine outlasts the 2 s lease and the kills' spacing) without end.
	close(stopKiller)
	<-killerDone
	r.t.Logf("chaos: draining after %s", time.Since(start).Round(100*time.Millisecond))
	drained := r.drain()
	stopReaders()
	stopSampler()
	if !drained {
		return r.res
	}
	r.stopWorkers()
	r.check()
	r.res.Elapsed = time.Since(start)
	t.Logf("chaos: %s", r.res)
	return r.res
}

// sleep sleeps a random time in [lo, hi).
func (r *run) sleep(lo, hi time.Duration) {
	time.Sleep(r.between(lo, hi))
}

func (r *run) between(lo, hi time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return lo + time.Duration(r.rng.Int64N(int64(hi-lo)))
}

func (r *run) intN(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rng.IntN(n)
}

// killBetween and killIntN draw from the killer's source, so that the
// killer, which runs beside the director, does not change the load's draws.
func (r *run) killBetween(lo, hi time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return lo + time.Duration(r.killRng.Int64N(int64(hi-lo)))
}

func (r *run) killIntN(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.killRng.IntN(n)
}

// startWorker starts one more worker process with a concurrency of its own.
func (r *run) startWorker() *process {
	r.mu.Lock()
	r.nextID++
	id := fmt.Sprintf("chaos-w%02d", r.nextID)
	conc := 2 + r.killRng.IntN(4)
	r.mu.Unlock()
	args := append([]string{"--id", id, "--concurrency", strconv.Itoa(conc)}, workerFlags...)
	p, err := startProcess(r.workerBin, id, r.env, args)
	if err != nil {
		r.errorf("chaos: start worker %s: %v", id, err)
		return nil
	}
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	return p
}

// live returns the workers that are running and neither stalled nor being
// killed.
func (r *run) live() []*process {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*process
	for _, p := range r.procs {
		if !p.killed && !p.stalled && !p.stopped && !p.exited() {
			out = append(out, p)
		}
	}
	return out
}

// killer SIGKILLs a random live worker every 1–3 s and starts a
// replacement, until stop closes.
func (r *run) killer(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-stop:
			return
		case <-time.After(r.killBetween(time.Second, 3*time.Second)):
		}
		live := r.live()
		if len(live) == 0 {
			continue
		}
		p := live[r.killIntN(len(live))]
		r.mu.Lock()
		p.killed = true
		r.res.Kills++
		r.mu.Unlock()
		p.kill()
		r.startWorker()
	}
}

// wave enqueues about n jobs of every kind, through the Go client and the
// enqueue command.
func (r *run) wave(w, n int) {
	ctx := context.Background()
	users := func() string { return fmt.Sprintf("u%d", 1+r.intN(min(8, r.cfg.Users))) }
	renamed := func() string { return fmt.Sprintf("u%d", 1+r.intN(min(5, r.cfg.Users))) }
	account := func() string { return fmt.Sprintf("a%d", 1+r.intN(r.cfg.Accounts)) }
	var total int64
	for _, b := range r.openings {
		total += b
	}

	nLedger, nTree, nOrder := n*3/20, max(n/10, r.cfg.Trees), n*3/20
	m := n - nLedger - nTree - nOrder
	nTransfers, nFriends := m*2/5, m*7/20
	nRenames := m - nTransfers - nFriends
	r.ledgerWave(ctx, w, nLedger)
	r.treeWave(ctx, w, nTree)
	r.orderWave(ctx, w, nOrder)
	r.rateWave(ctx, max(n*2/5, 20)) // beside the wave's n: a burst the rate spreads over seconds
	r.partWave(ctx, max(n/5, 16))   // beside the wave's n too: the hot customer's saturate
	r.workflowWave(ctx, w)          // beside the wave's n too: five workflows of step jobs
	if w > 0 {
		r.cancelLedger(ctx, w)
	}

	// Transfers through the Go client; one in ten asks for more money than
	// there is, and must end cancelled.
	for i := range nTransfers {
		from, to := account(), account()
		for to == from {
			to = account()
		}
		amount := int64(1 + r.intN(10_000))
		if r.intN(10) == 0 {
			amount = total + 1
		}
		if i%10 == 9 { // and some through the command, which prints the job's id first
			out := r.enqueue("", "transfer", "--from", from, "--to", to, "--amount", strconv.FormatInt(amount, 10))
			if f := strings.Fields(out); len(f) > 0 {
				r.limited(f[0])
			}
			continue
		}
		var id string
		err := r.retry("enqueue transfer", func() (err error) {
			_, id, err = handlers.EnqueueTransfer(ctx, r.db, r.q, from, to, amount)
			return err
		})
		if err != nil {
			r.errorf("chaos: enqueue transfer: %v", err)
			return
		}
		r.limited(id)
	}
	if w == 0 {
		r.badTransfers(ctx)
		r.cancelSome()
	}

	// Friendships: repeats (a small pool), reversed pairs, and a few with a
	// user who does not exist, which must end dead.
	var ins []queue.Insert
	var batch []string
	for i := range nFriends {
		a, b := users(), users()
		for b == a {
			b = users()
		}
		if i%25 == 24 {
			b = fmt.Sprintf("ghost%d", w)
		}
		args := handlers.AddFriendArgs{UserA: a, UserB: b}
		if i%3 == 0 {
			batch = append(batch, fmt.Sprintf(`{"kind": %q, "args": {"userA": %q, "userB": %q}}`, handlers.AddFriendKind, a, b))
		} else {
			ins = append(ins, queue.Insert{Kind: handlers.AddFriendKind, Args: args})
		}
		if r.intN(5) == 0 { // the same pair the other way round
			ins = append(ins, queue.Insert{Kind: handlers.AddFriendKind, Args: handlers.AddFriendArgs{UserA: b, UserB: a}})
		}
	}
	// Renames: several per user, racing each other.
	for i := range nRenames {
		u := renamed()
		name := fmt.Sprintf("%s-w%d-n%d", u, w, i)
		if i%3 == 0 {
			batch = append(batch, fmt.Sprintf(`{"kind": %q, "args": {"userId": %q, "newName": %q}}`, handlers.RenameKind, u, name))
		} else {
			ins = append(ins, queue.Insert{Kind: handlers.RenameKind, Args: handlers.RenameArgs{UserID: u, NewName: name}})
		}
	}
	// Interleave the two enqueuers so that renames of a user race.
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.enqueue(strings.Join(batch, "\n")+"\n", "batch")
	}()
	err := r.retry("enqueue friendships and renames", func() error {
		_, err := r.q.EnqueueMany(ctx, ins) // a second friendship or rename of the same is harmless
		return err
	})
	<-done
	if err != nil {
		r.errorf("chaos: enqueue: %v", err)
		return
	}
	r.enqueue("", "rename", "--user", renamed(), "--name", fmt.Sprintf("cli-w%d", w))
	r.enqueue("", "add-friend", "--user-a", users(), "--user-b", fmt.Sprintf("ghost-cli%d", w))
}

// badTransfers writes transactions that can never apply, as a careless
// app would, and gives each a job: each must end cancelled with a reason,
// its job succeeded.
func (r *run) badTransfers(ctx context.Context) {
	for i, tx := range []bson.D{
		{{Key: "source", Value: "a1"}, {Key: "destination", Value: "a2"}, {Key: "value", Value: 5.5}},
		{{Key: "source", Value: "a1"}, {Key: "destination", Value: "a2"}, {Key: "value", Value: "100"}},
		{{Key: "source", Value: "a1"}, {Key: "destination", Value: "nope"}, {Key: "value", Value: int64(100)}},
		{{Key: "source", Value: "a2"}, {Key: "destination", Value: "a1"}, {Key: "value", Value: int64(-100)}},
	} {
		id := fmt.Sprintf("bad-tx-%d", i)
		doc := append(bson.D{{Key: "_id", Value: id}, {Key: "state", Value: handlers.TxInitial}, {Key: "lastModified", Value: time.Now()}}, tx...)
		err := r.retry("insert transaction "+id, func() error {
			_, err := r.db.Collection(handlers.TransactionsCollection).InsertOne(ctx, doc)
			return err
		})
		if err != nil {
			r.errorf("chaos: insert transaction: %v", err)
			return
		}
		var res queue.Result
		err = r.retry("enqueue transfer "+id, func() (err error) {
			res, err = r.q.Enqueue(ctx, handlers.TransferKind, handlers.TransferArgs{TxID: id},
				queue.InsertOpts{UniqueKey: handlers.TransferUniqueKey(id)})
			return err
		})
		if err != nil {
			r.errorf("chaos: enqueue transfer: %v", err)
			continue
		}
		r.limited(res.ID)
	}
}

// cancelSome enqueues delayed jobs and cancels them with docketctl.
func (r *run) cancelSome() {
	var ids []string
	for range 2 {
		out := r.enqueue("", "job", "--kind", handlers.NoopArgs{}.Kind(), "--args", "{}", "--delay", "1h")
		ids = append(ids, strings.TrimSpace(out))
	}
	out, stderr, code := r.command(r.ctlBin, "", append([]string{"cancel"}, ids...)...)
	// A cancel sent again after a failure reply finds the jobs its first
	// send cancelled "already finished": what counts is their state.
	for _, id := range ids {
		if code == 0 {
			break
		}
		var j *jobs.Job
		err := r.retry("read "+id, func() (err error) {
			j, err = r.q.Get(context.Background(), id)
			return err
		})
		if err != nil || j.State != jobs.StateCancelled {
			r.errorf("chaos: docketctl cancel: exit %d: %s%s", code, out, stderr)
			break
		}
	}
	for _, id := range ids {
		r.cancelled[id] = true
	}
}

// enqueue runs the enqueue command, which must succeed, and returns its
// standard output.
func (r *run) enqueue(stdin string, args ...string) string {
	r.t.Helper()
	out, stderr, code := r.command(r.enqueueBin, stdin, args...)
	if code != 0 {
		r.errorf("chaos: enqueue %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	return out
}

// stall SIGSTOPs a worker that holds jobs for longer than its lease, then
// SIGCONTs it, recording the leases it held. A long stall lasts until every
// job the worker held has been finished by another worker (bounded by
// LongStallMax): the reaper must re-queue them, another worker must run
// them to the end, and only then does the stalled one resume, in the
// middle of its handlers, its heartbeats not yet told that its leases are
// gone.
func (r *run) stall(long bool) {
	ctx := context.Background()
	// Wait for a worker with running jobs.
	var victim *process
	deadline := time.Now().Add(20 * time.Second)
	for victim == nil && time.Now().Before(deadline) {
		owners := map[string]bool{}
		var running []jobs.Job
		_ = r.findJobs(ctx, &running, bson.M{"state": jobs.StateRunning}) // none read: no victim yet
		for _, j := range running {
			owners[j.Owner] = true
		}
		r.mu.Lock()
		for _, p := range r.procs {
			if owners[p.id] && !p.killed && !p.exited() {
				victim = p
				victim.stalled = true
				break
			}
		}
		r.mu.Unlock()
		if victim == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if victim == nil {
		r.t.Logf("chaos: no worker held a job for 20 s; no stall")
		return
	}
	_ = victim.cmd.Process.Signal(syscall.SIGSTOP)
	rec := stallRecord{p: victim, held: map[string]jobs.Job{}, stopped: time.Now()}
	var held []jobs.Job
	_ = r.findJobs(ctx, &held, bson.M{"state": jobs.StateRunning, "owner": victim.id}) // none read: none counted
	for _, j := range held {
		rec.held[j.ID] = j
	}
	time.Sleep(r.cfg.Stall)
	outlived := 0
	if long {
		outlived = r.waitOutlived(ctx, victim, rec.held)
		r.t.Logf("chaos: long stall of %s: %d of the %d jobs it held finished by other workers before SIGCONT",
			victim.id, outlived, len(rec.held))
	}
	rec.resume = time.Now()
	_ = victim.cmd.Process.Signal(syscall.SIGCONT)
	r.mu.Lock()
	victim.stalled = false
	r.stalls = append(r.stalls, rec)
	r.res.Stalls++
	r.res.StalledJobs += len(rec.held)
	r.res.OutlivedJobs += outlived
	r.mu.Unlock()
}

// waitOutlived waits, at most LongStallMax in all, until every job of held
// is finished by an attempt other than the one the stopped worker p holds,
// and returns how many are.
func (r *run) waitOutlived(ctx context.Context, p *process, held map[string]jobs.Job) int {
	deadline := time.Now().Add(r.cfg.LongStallMax - r.cfg.Stall)
	for {
		done := 0
		for id, h := range held {
			j, err := r.q.Get(ctx, id)
			if err == nil && j.State.Finished() && (j.Owner != p.id || j.Attempt != h.Attempt) {
				done++
			}
		}
		if done == len(held) || time.Now().After(deadline) {
			return done
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// outage stops devdb, waits, and starts it again on the same data
// directory and port.
func (r *run) outage() {
	d := r.cfg.Outage
	if d == 0 {
		d = r.between(5*time.Second, 10*time.Second)
	}
	down := time.Now()
	r.dbx.Stop()
	time.Sleep(d)
	r.dbx.Restart()
	up := time.Now()
	r.mu.Lock()
	r.outages = append(r.outages, [2]time.Time{down, up})
	r.res.Outage += up.Sub(down)
	r.mu.Unlock()
}

// drain waits until nothing is left to do: no job available or running, no
// unfinished transaction, no user whose comments are being synced.
func (r *run) drain() bool {
	ctx := context.Background()
	deadline := time.Now().Add(r.cfg.Drain)
	var last string
	var jobsDone time.Time
	for time.Now().Before(deadline) {
		// A blocked job, and a finished one whose dependents are not yet
		// told of its outcome, are open too: the settle that releases a
		// workflow's task may be the leader's pass, after a worker's own
		// settle met a failure reply (queue/deps.go).
		open, err1 := store.Of(r.q).Collection().CountDocuments(ctx, openJobs)
		txs, err2 := r.db.Collection(handlers.TransactionsCollection).CountDocuments(ctx,
			bson.M{"state": bson.M{"$nin": bson.A{handlers.TxDone, handlers.TxCancelled}}})
		syncing, err3 := r.db.Collection(handlers.UsersCollection).CountDocuments(ctx, bson.M{"syncing": bson.M{"$exists": true}})
		var unsettled int64
		var err4 error
		if open == 0 { // the ledger's sweeper settles it once no job posts
			if jobsDone.IsZero() {
				// The sweeper's commit follows the last posting: it gets
				// its own 30 s.
				jobsDone = time.Now()
				r.t.Logf("chaos: every job finished after %s of draining", time.Since(deadline.Add(-r.cfg.Drain)).Round(100*time.Millisecond))
				deadline = later(deadline, jobsDone.Add(ledgerSettle))
			}
			unsettled, err4 = r.ledgerUnsettled(ctx)
		}
		if err1 == nil && err2 == nil && err3 == nil && err4 == nil && open == 0 && txs == 0 && syncing == 0 && unsettled == 0 {
			return true
		}
		last = fmt.Sprintf("%d jobs open, %d transactions unfinished, %d users syncing, %d ledger accounts or transactions not settled by the sweeper (errors: %v %v %v %v)",
			open, txs, syncing, unsettled, err1, err2, err3, err4)
		time.Sleep(500 * time.Millisecond)
	}
	r.errorf("chaos: the queue did not drain in %s (the ledger's sweeper gets at least %s once every job has finished): %s", r.cfg.Drain, ledgerSettle, last)
	r.dumpOpen()
	if !jobsDone.IsZero() {
		r.dumpLedger(ctx)
	}
	return false
}

// ledgerSettle is how long the drain waits for the ledger's sweeper to
// commit and cache every posting once every job has finished, at least.
const ledgerSettle = 30 * time.Second

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// openJobs matches the jobs the drain waits for: unfinished (blocked
// included), or finished with their dependents not told yet.
var openJobs = bson.M{"$or": bson.A{
	bson.M{"state": bson.M{"$in": bson.A{jobs.StateAvailable, jobs.StateRunning, jobs.StateBlocked}}},
	bson.M{store.DependentsDueField: bson.M{"$exists": true}},
}}

// dumpOpen logs up to 10 of the jobs the drain counts open: unfinished, or
// finished with their dependents not told yet.
func (r *run) dumpOpen() {
	cur, err := store.Of(r.q).Collection().Find(context.Background(), openJobs, options.Find().SetLimit(10).SetProjection(bson.M{"args": 0}))
	if err != nil {
		return
	}
	var open []bson.M
	_ = cur.All(context.Background(), &open)
	for _, j := range open {
		r.t.Logf("open job: %v", j)
	}
}

// stopWorkers SIGTERMs every worker still running; each must exit 0. A
// worker that exited by itself during the run is a failure: workers ride
// out every fault.
func (r *run) stopWorkers() {
	r.mu.Lock()
	procs := append([]*process(nil), r.procs...)
	r.mu.Unlock()
	for _, p := range procs {
		if p.killed {
			continue
		}
		if p.exited() {
			r.errorf("chaos: worker %s exited by itself (status %d); its last lines:\n%s", p.id, p.exitCode(), tail(p.out.String(), 20))
			continue
		}
		// A replacement started a moment ago may not have installed its
		// signal handler yet, and SIGTERM's default action would kill it:
		// wait for it to say it runs (it handles signals from then on).
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !p.exited(); time.Sleep(20 * time.Millisecond) {
			if out := p.out.String(); strings.Contains(out, `"worker started"`) || strings.Contains(out, "not reachable") {
				break
			}
		}
		r.mu.Lock()
		p.stopped = true
		r.mu.Unlock()
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		if !p.stopped {
			continue
		}
		select {
		case <-p.done:
			if c := p.exitCode(); c != 0 {
				r.errorf("chaos: worker %s exited %d after SIGTERM:\n%s", p.id, c, tail(p.out.String(), 20))
			}
		case <-time.After(30 * time.Second):
			r.errorf("chaos: worker %s did not exit within 30 s of SIGTERM", p.id)
		}
	}
}

// errorf fails the run, recording the failure for the summary that
// cleanup prints last.
func (r *run) errorf(format string, args ...any) {
	r.t.Helper()
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.failures = append(r.failures, msg)
	r.mu.Unlock()
	r.t.Error(msg)
}

// fatalf is errorf, then stops the test.
func (r *run) fatalf(format string, args ...any) {
	r.t.Helper()
	r.errorf(format, args...)
	r.t.FailNow()
}

// cleanup kills what is left and, on failure, prints the workers' last
// lines, then, as the very last lines (a CI log cut to its tail keeps
// them), the seed and the failed checks.
func (r *run) cleanup() {
	r.mu.Lock()
	procs := append([]*process(nil), r.procs...)
	r.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
	if !r.t.Failed() {
		return
	}
	for _, p := range procs {
		r.t.Logf("chaos: last lines of worker %s:\n%s", p.id, clip(tail(p.out.String(), 6), 300))
	}
	r.mu.Lock()
	failures := append([]string(nil), r.failures...)
	r.mu.Unlock()
	const shown = 10
	var b strings.Builder
	fmt.Fprintf(&b, "chaos: FAILED, seed %d (replay with %s): %d failed checks", r.cfg.Seed, r.cfg.Replay, len(failures))
	for i, f := range failures {
		if i == shown {
			fmt.Fprintf(&b, "\n  ... and %d more (above)", len(failures)-shown)
			break
		}
		fmt.Fprintf(&b, "\n  %d. %s", i+1, clip(f, 500))
	}
	if len(failures) == 0 {
		b.WriteString(" here (the test failed elsewhere: see above)")
	}
	r.t.Log(b.String())
}

// clip cuts every line of s to at most n bytes.
func clip(s string, n int) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if len(l) > n {
			lines[i] = l[:n] + "…"
		}
	}
	return strings.Join(lines, "\n")
}
