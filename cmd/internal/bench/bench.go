// Package bench measures docket against a MongoDB-protocol server: burn-down
// throughput with single and batch claims, commands per job, claim and
// enqueue-to-start latency, steady-state lag, idle cost, scaling over worker
// processes, how cost grows with the backlog (growth), and a raw
// findAndModify loop at the same concurrency as the baseline. Workers run as real processes: this binary re-executed as
// `bench worker`, which counts its commands with the driver's command
// monitor and reports them; the parent reads each one's CPU time and peak
// memory from its rusage.
package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/docketq/docket/configs"
	"github.com/docketq/docket/internal/testdb/devdbproc"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// DefaultJobs is the backlog of the default burn-downs: enough that each
// measures work rather than start-up (some 10–40 s on devdb), and
// DefaultSingleJobs that of the single burn-down, whose single claims run
// some 50–80 jobs/s there.
const (
	DefaultJobs       = 3000
	DefaultSingleJobs = 1600
)

// Options size the runs. The defaults take about 8 minutes on devdb on
// 2 quiet vCPUs.
type Options struct {
	MongoURI string
	Jobs     int
	// SingleJobs is the backlog of the single burn-down (0: Jobs): single
	// claims run a few tens of jobs/s on devdb, where Jobs would take
	// minutes.
	SingleJobs int
	// PartitionJobs is the backlog of each burn-down of the partitions run.
	PartitionJobs int
	Procs         int
	Concurrency   int
	ClaimBatch    int

	SteadyRate float64
	SteadyFor  time.Duration
	// SteadyClaimBatch is the claim batch that the steady-state run
	// compares the default configuration with.
	SteadyClaimBatch int

	// SpreadProcs, SpreadConcurrency and SpreadClaimBatch size the
	// batch4x10 run: many processes claiming batches from one queue.
	SpreadProcs       int
	SpreadConcurrency int
	SpreadClaimBatch  int

	IdleWarmup time.Duration
	IdleFor    time.Duration

	// FailoverProcs is how many worker processes the failover run starts.
	FailoverProcs int

	SleepJobs        int
	Sleep            time.Duration
	SleepConcurrency int
	SleepClaimBatch  int

	// LedgerTransfers is how many transfers each row of the ledger run
	// makes (defaults to a quarter of Jobs, from 8 to
	// DefaultLedgerTransfers); LedgerHot and LedgerCold are its accounts
	// (default DefaultLedgerHot, DefaultLedgerCold); LedgerConcurrency is
	// its jobs at once per worker process (default 4).
	LedgerTransfers, LedgerHot, LedgerCold, LedgerConcurrency int

	// LimitJobs is the backlog of the limits run's binding burn-down;
	// LimitFor, when set, measures it for that long rather than until it
	// is drained (a backlog of thousands runs for minutes at 50 jobs/s).
	LimitJobs int
	LimitFor  time.Duration

	// The heartbeats run: HeartbeatJobs jobs of HeartbeatSleep each, all at
	// once on one process, with a lease and heartbeat interval of their own.
	HeartbeatJobs     int
	HeartbeatSleep    time.Duration
	HeartbeatLease    time.Duration
	HeartbeatInterval time.Duration

	// The growth run: GrowthBacklogs are its backlogs, GrowthRetained the
	// finished jobs its last point keeps beside a backlog of
	// GrowthRetainedBacklog (0: no such point), GrowthWindow how long each
	// point is measured at most, GrowthBudget the time the whole run stops
	// itself within.
	GrowthBacklogs        []int
	GrowthRetained        int
	GrowthRetainedBacklog int
	GrowthWindow          time.Duration
	GrowthBudget          time.Duration

	// Rate is the rate limit of the rate run, held by RateProcs worker
	// processes and counted over RateFor.
	Rate      queue.Rate
	RateProcs int
	RateFor   time.Duration

	// The workflows run: WorkflowJobs tasks in a fan-out, a fan-in and a
	// layered DAG, WorkflowChain in a chain, each beside a plain
	// burn-down of as many jobs.
	WorkflowJobs, WorkflowChain int
	// WorkflowShapes are the shapes the workflows run measures (nil: all).
	WorkflowShapes []string

	Runs []string
	JSON bool
}

var allRuns = []string{"single", "raw", "default", "batch", "batch4x10", "steady", "idle", "idle4", "idle8", "heartbeats", "failover", "scaling",
	"ledger", "limits", "rate", "workflows",
}

// optInRuns are runs made only when --runs names them: growth takes its
// whole budget (10 minutes by default), partitions burns down a real
// backlog three times (about 10 minutes on devdb).
var optInRuns = []string{"growth", "partitions"}

// Main is the bench command. `bench worker ...` is a worker process of a
// run.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "worker" {
		return runWorker(args[1:], stdout, stderr)
	}
	var o Options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.MongoURI, "mongo-uri", "", "server to measure (default: start a devdb of its own)")
	fs.IntVar(&o.Jobs, "jobs", DefaultJobs, "no-op jobs per burn-down (single's: --single-jobs)")
	fs.IntVar(&o.SingleJobs, "single-jobs", DefaultSingleJobs, "no-op jobs of the single burn-down (0: --jobs)")
	fs.IntVar(&o.PartitionJobs, "partition-jobs", 20_000, "no-op jobs per burn-down of the partitions run")
	fs.IntVar(&o.Procs, "procs", 2, "worker processes in burn-downs and steady state")
	fs.IntVar(&o.Concurrency, "concurrency", 20, "jobs at once per worker process (the raw loop runs procs x this goroutines)")
	fs.IntVar(&o.ClaimBatch, "claim-batch", 20, "claim batch of the batch burn-down")
	fs.Float64Var(&o.SteadyRate, "steady-rate", 20, "jobs enqueued per second in steady state")
	fs.DurationVar(&o.SteadyFor, "steady-for", 20*time.Second, "how long steady state enqueues (long enough for a p99 of some 400 jobs per configuration)")
	fs.IntVar(&o.SteadyClaimBatch, "steady-claim-batch", 1, "claim batch that steady state compares the default configuration with")
	fs.IntVar(&o.SpreadProcs, "spread-procs", 4, "worker processes of the batch4x10 run")
	fs.IntVar(&o.SpreadConcurrency, "spread-concurrency", 10, "jobs at once per worker process in the batch4x10 run")
	fs.IntVar(&o.SpreadClaimBatch, "spread-claim-batch", 10, "claim batch of the batch4x10 run")
	fs.DurationVar(&o.IdleWarmup, "idle-warmup", 10*time.Second, "empty-queue time before idle is measured")
	fs.DurationVar(&o.IdleFor, "idle-for", 30*time.Second, "how long idle is measured (long enough for the maintenance passes of the default schedules)")
	fs.IntVar(&o.FailoverProcs, "failover-procs", 3, "worker processes of the failover run")
	fs.IntVar(&o.SleepJobs, "sleep-jobs", 100, "jobs per scaling run")
	fs.DurationVar(&o.Sleep, "sleep", 100*time.Millisecond, "how long a scaling job's handler sleeps")
	fs.IntVar(&o.SleepConcurrency, "sleep-concurrency", 1, "jobs at once per worker process in scaling runs")
	fs.IntVar(&o.SleepClaimBatch, "sleep-claim-batch", 1, "claim batch of the scaling runs")
	fs.IntVar(&o.LimitJobs, "limit-jobs", limitBindingJobs, "backlog of the limits run's binding burn-down")
	fs.DurationVar(&o.LimitFor, "limit-for", 0, "measure the limits run's binding burn-down this long rather than until drained (0: until drained)")
	fs.IntVar(&o.LedgerTransfers, "ledger-transfers", DefaultLedgerTransfers, "transfers per row of the ledger run (ledger and two-phase, hot and cold)")
	fs.IntVar(&o.LedgerHot, "ledger-hot", DefaultLedgerHot, "accounts of the ledger run's hot rows")
	fs.IntVar(&o.LedgerCold, "ledger-cold", DefaultLedgerCold, "accounts of the ledger run's cold rows")
	fs.IntVar(&o.LedgerConcurrency, "ledger-concurrency", 4, "jobs at once per worker process in the ledger run")
	fs.IntVar(&o.HeartbeatJobs, "heartbeat-jobs", 500, "jobs of the heartbeats run, all running at once on one process")
	fs.DurationVar(&o.HeartbeatSleep, "heartbeat-sleep", 30*time.Second, "how long each job of the heartbeats run sleeps")
	fs.DurationVar(&o.HeartbeatLease, "heartbeat-lease", 15*time.Second, "worker lease of the heartbeats run (shorter than the default, so that a job sees several intervals)")
	fs.DurationVar(&o.HeartbeatInterval, "heartbeat-every", 5*time.Second, "heartbeat interval of the heartbeats run")
	backlogs := fs.String("growth-backlogs", DefaultGrowthBacklogs, "backlogs of no-op jobs the growth run measures, in order")
	fs.IntVar(&o.GrowthRetained, "growth-retained", DefaultGrowthRetained, "succeeded jobs kept in the collection at the growth run's last point (0: no such point)")
	fs.IntVar(&o.GrowthRetainedBacklog, "growth-retained-backlog", DefaultGrowthRetainedBacklog, "the backlog beside the retained jobs")
	fs.DurationVar(&o.GrowthWindow, "growth-window", DefaultGrowthWindow, "how long the growth run measures each system at each point, at most (less once drained)")
	fs.DurationVar(&o.GrowthBudget, "growth-budget", DefaultGrowthBudget, "the time the growth run stops itself within: points that no longer fit are skipped, and said so")
	rate := fs.String("rate", "20/s burst 5", "rate limit of the rate run (N/PERIOD [burst B])")
	fs.IntVar(&o.RateProcs, "rate-procs", 3, "worker processes of the rate run")
	fs.DurationVar(&o.RateFor, "rate-for", time.Minute, "how long the rate run counts starts, after a 5 s warm-up")
	fs.IntVar(&o.WorkflowJobs, "workflow-jobs", 300, "tasks of the workflows run's fan-out, fan-in and layered DAG")
	fs.IntVar(&o.WorkflowChain, "workflow-chain", 100, "tasks of the workflows run's chain, which runs one at a time")
	shapes := fs.String("workflow-shapes", strings.Join(workflowShapeNames, ","), "shapes of the workflows run, of "+strings.Join(workflowShapeNames, ","))
	runs := fs.String("runs", strings.Join(allRuns, ","), "runs to make, of "+strings.Join(allRuns, ",")+" (the default), and "+strings.Join(optInRuns, ","))
	fs.BoolVar(&o.JSON, "json", false, "print the results as JSON instead of a table")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	for _, r := range strings.Split(*runs, ",") {
		if !slices.Contains(allRuns, r) && !slices.Contains(optInRuns, r) {
			fmt.Fprintf(stderr, "bench: --runs: unknown run %q\n", r)
			return 2
		}
		o.Runs = append(o.Runs, r)
	}
	if o.Jobs < 1 || o.SingleJobs < 0 || o.Procs < 1 || o.Concurrency < 1 || o.ClaimBatch < 1 || o.SteadyRate <= 0 || o.SleepJobs < 1 || o.SleepConcurrency < 1 || o.SleepClaimBatch < 1 || o.SteadyClaimBatch < 1 || o.FailoverProcs < 2 || o.HeartbeatJobs < 1 || o.HeartbeatSleep <= 0 ||
		o.SpreadProcs < 1 || o.SpreadConcurrency < 1 || o.SpreadClaimBatch < 1 {
		fmt.Fprintln(stderr, "bench: sizes and rates must be positive (and --failover-procs at least 2)")
		return 2
	}
	var err error
	if o.Rate, err = queue.ParseRate(*rate); err != nil || o.RateProcs < 1 || o.RateFor <= 0 {
		fmt.Fprintf(stderr, "bench: --rate, --rate-procs, --rate-for: %v\n", err)
		return 2
	}
	if o.WorkflowShapes, err = parseShapes(*shapes); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	if o.GrowthBacklogs, err = parseBacklogs(*backlogs); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	if o.GrowthRetained < 0 || o.GrowthRetainedBacklog < 1 || o.GrowthWindow <= 0 || o.GrowthBudget <= 0 {
		fmt.Fprintln(stderr, "bench: --growth-window, --growth-budget and --growth-retained-backlog must be positive, --growth-retained not negative")
		return 2
	}

	res, err := Run(context.Background(), o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	if o.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
	} else {
		res.writeTable(stdout)
	}
	return 0
}

// Run makes the runs o names and returns their results; progress goes to
// log.
func Run(ctx context.Context, o Options, log io.Writer) (*Results, error) {
	res := &Results{Options: o, Server: "given"}
	uri := o.MongoURI
	if uri == "" {
		dir, err := os.MkdirTemp("", "docket-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		bin, err := devDBBinary()
		if err != nil {
			return nil, err
		}
		srv, err := devdbproc.Start(bin, "127.0.0.1:0", dir, time.Minute)
		if err != nil {
			return nil, err
		}
		defer func() { _ = srv.Stop() }()
		uri = srv.URI()
		res.Server = "devdb"
	}
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return nil, errors.New(configs.Redact(err.Error(), uri))
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	b := &bencher{o: o, uri: uri, client: client, log: log, stamp: time.Now().Format("150405")}
	start := time.Now()

	for _, r := range o.Runs {
		fmt.Fprintf(log, "bench: %s...\n", r)
		t := time.Now()
		var err error
		switch r {
		case "single":
			res.Single, err = b.burnDown(ctx, "single", cmp.Or(o.SingleJobs, o.Jobs), o.Procs, o.Concurrency, 1, "noop", nil)
		case "batch":
			res.Batch, err = b.burnDown(ctx, "batch", o.Jobs, o.Procs, o.Concurrency, o.ClaimBatch, "noop", nil)
		case "raw":
			res.Raw, err = b.rawLoop(ctx)
		case "default":
			res.Default, err = b.burnDown(ctx, "default", o.Jobs, o.Procs, o.Concurrency, defaultClaimBatch, "noop", nil)
		case "batch4x10":
			res.Batch4x10, err = b.burnDown(ctx, "batch4x10", o.Jobs, o.SpreadProcs, o.SpreadConcurrency, o.SpreadClaimBatch, "noop", nil)
		case "steady":
			res.Steady, res.SteadyCompare, err = b.steadyPair(ctx)
		case "idle":
			res.Idle, err = b.idle(ctx, "idle", 1)
		case "idle8":
			res.Idle8, err = b.idle(ctx, "idle8", 8)
		case "idle4":
			res.Idle4, err = b.idle(ctx, "idle4", 4)
		case "heartbeats":
			res.Heartbeats, err = b.heartbeats(ctx)
		case "failover":
			res.Failover, err = b.failover(ctx)
		case "ledger":
			res.Ledger, err = b.ledger(ctx)
		case "growth":
			res.Growth, err = b.growth(ctx)
		case "limits":
			res.Limits, err = b.limits(ctx)
		case "rate":
			res.Rate, err = b.rate(ctx)
		case "partitions":
			res.Partitions, err = b.partitions(ctx)
		case "workflows":
			res.Workflows, err = b.workflows(ctx)
		case "scaling":
			for _, p := range []int{1, 2, 4} {
				var s *BurnDown
				s, err = b.burnDown(ctx, fmt.Sprintf("scaling%d", p), o.SleepJobs, p, o.SleepConcurrency, o.SleepClaimBatch,
					"bench-sleep", SleepArgs{Ms: int(o.Sleep / time.Millisecond)})
				if err != nil {
					break
				}
				res.Scaling = append(res.Scaling, s)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r, err)
		}
		fmt.Fprintf(log, "bench: %s took %s\n", r, time.Since(t).Round(100*time.Millisecond))
	}
	res.Took = time.Since(start).Round(100 * time.Millisecond).String()
	res.derive()
	return res, nil
}

type bencher struct {
	o      Options
	uri    string
	client *mongo.Client
	log    io.Writer
	stamp  string
	// window, when set, ends a burn-down after that long, its jobs/s
	// counted over the jobs completed by then.
	window time.Duration
}

// freshDB returns an empty database for one run: devdb's claims scan the
// whole collection, so runs must not see each other's jobs.
func (b *bencher) freshDB(ctx context.Context, name string) (*mongo.Database, *queue.Client, error) {
	db := b.client.Database("bench_" + b.stamp + "_" + name)
	if err := db.Drop(ctx); err != nil {
		return nil, nil, err
	}
	q, err := queue.New(db, queue.Config{})
	if err != nil {
		return nil, nil, err
	}
	return db, q, q.EnsureIndexes(ctx)
}

func (b *bencher) enqueue(ctx context.Context, q *queue.Client, n int, kind string, args any) error {
	for i := 0; i < n; i += 500 {
		ins := make([]queue.Insert, min(500, n-i))
		for k := range ins {
			ins[k] = queue.Insert{Kind: kind, Args: args}
		}
		if _, err := q.EnqueueMany(ctx, ins); err != nil {
			return err
		}
	}
	return nil
}

// startWorkers starts procs worker processes on db and waits until all have
// set up.
func (b *bencher) startWorkers(db string, procs, concurrency, claimBatch int) ([]*proc, error) {
	var ps []*proc
	for range procs {
		p, err := startWorker(workerOpts{uri: b.uri, db: db, concurrency: concurrency, claimBatch: claimBatch}, b.log)
		if err != nil {
			stopAll(ps)
			return nil, err
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		if err := p.waitReady(time.Minute); err != nil {
			stopAll(ps)
			return nil, err
		}
	}
	return ps, nil
}

func stopAll(ps []*proc) ([]usage, error) {
	us := make([]usage, len(ps))
	var errs []error
	for i, p := range ps {
		var err error
		us[i], err = p.stop()
		errs = append(errs, err)
	}
	return us, errors.Join(errs...)
}

func completed(ps []*proc) int64 {
	var n int64
	for _, p := range ps {
		n += p.snapshot().Completed
	}
	return n
}

// burnDown enqueues n jobs, then runs procs worker processes until every
// job has been completed.
func (b *bencher) burnDown(ctx context.Context, name string, n, procs, concurrency, claimBatch int, kind string, args any) (*BurnDown, error) {
	return b.burnDownLimited(ctx, name, n, procs, concurrency, claimBatch, kind, args, nil)
}

// burnDownLimited is burnDown with the concurrency limits of limits set
// before the workers start.
func (b *bencher) burnDownLimited(ctx context.Context, name string, n, procs, concurrency, claimBatch int, kind string, args any, limits map[string]int) (*BurnDown, error) {
	return b.burnDownWith(ctx, name, n, procs, concurrency, claimBatch, limits, func(ctx context.Context, q *queue.Client) error {
		return b.enqueue(ctx, q, n, kind, args)
	})
}

// burnDownWith is burnDownLimited with the n jobs inserted by insert, on
// the run's fresh database, before the workers start.
func (b *bencher) burnDownWith(ctx context.Context, name string, n, procs, concurrency, claimBatch int, limits map[string]int, insert func(context.Context, *queue.Client) error) (*BurnDown, error) {
	db, q, err := b.freshDB(ctx, name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Drop(context.Background()) }()
	for limit, max := range limits {
		if err := q.SetLimit(ctx, limit, max, "bench"); err != nil {
			return nil, err
		}
	}
	if len(limits) > 0 {
		// A limit is set long before a backlog in practice: measure that,
		// not its first seconds, when claims read its run slots each time
		// (queue/runload.go).
		time.Sleep(2*queue.LimitRefresh + 100*time.Millisecond)
	}
	if err := insert(ctx, q); err != nil {
		return nil, err
	}
	ps, err := b.startWorkers(db.Name(), procs, concurrency, claimBatch)
	if err != nil {
		return nil, err
	}
	n, elapsed, err := b.awaitCompleted(ps, n)
	if err != nil {
		return nil, err
	}
	us, err := stopAll(ps)
	if err != nil {
		return nil, err
	}
	js, err := finishedJobs(ctx, q)
	if err != nil {
		return nil, err
	}
	starts, _, span := stampTimes(js)
	if b.window == 0 { // a run cut at its window counts what it did within it
		elapsed = span.duration(elapsed)
	}
	r := &BurnDown{Name: name, Jobs: n, Procs: procs, Concurrency: concurrency, ClaimBatch: claimBatch,
		Seconds: elapsed.Seconds(), JobsPerSec: float64(n) / elapsed.Seconds()}
	r.addUsage(us)
	r.StartP50, r.StartP99 = pct(starts, 50), pct(starts, 99)
	return r, nil
}

// awaitCompleted waits until the worker processes ps report n jobs
// completed, or, with b.window, until the window ends, and returns the jobs
// completed and how long that took as the reports tell (to within
// reportEvery). Past 10 minutes it stops them and fails.
func (b *bencher) awaitCompleted(ps []*proc, n int) (int, time.Duration, error) {
	start := time.Now()
	for completed(ps) < int64(n) {
		if b.window > 0 && time.Since(start) >= b.window {
			return int(completed(ps)), time.Since(start), nil
		}
		if time.Since(start) > 10*time.Minute {
			stopAll(ps)
			return 0, 0, fmt.Errorf("%d of %d jobs completed after 10 min", completed(ps), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return n, time.Since(start), nil
}

// jobTimes returns, for every finished job, enqueue-to-start and
// enqueue-to-finish in ms. A claim sets heartbeatAt; jobs shorter than the
// heartbeat interval keep it.
func jobTimes(ctx context.Context, q *queue.Client) (start, finish []float64, err error) {
	js, err := finishedJobs(ctx, q)
	if err != nil {
		return nil, nil, err
	}
	start, finish, _ = stampTimes(js)
	return start, finish, nil
}

// stampTimes is jobTimes of the jobs js, and the span of their stamps.
func stampTimes(js []jobs.Job) (start, finish []float64, span burnSpan) {
	for _, j := range js {
		span.add(&j)
		if j.HeartbeatAt != nil {
			start = append(start, ms(j.HeartbeatAt.Sub(j.CreatedAt)))
		}
		if j.FinishedAt != nil {
			finish = append(finish, ms(j.FinishedAt.Sub(j.CreatedAt)))
		}
	}
	return start, finish, span
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pct is the p-th percentile of xs (nearest rank), 0 for none.
func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// devDBBinary returns the devdb binary the bench runs: the one named by
// DOCKET_DEVDB_BIN, or else the devdb beside the bench binary (make bench
// builds both into bin/).
func devDBBinary() (string, error) {
	if bin := os.Getenv("DOCKET_DEVDB_BIN"); bin != "" {
		return bin, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("bench: find devdb: %w", err)
	}
	bin := filepath.Join(filepath.Dir(self), "devdb")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("bench: no devdb beside the bench binary (%w): run make bench, which builds both, or set DOCKET_DEVDB_BIN or --mongo-uri", err)
	}
	return bin, nil
}

// limits measures concurrency limits: a burn-down of no-op jobs under a
// limit that does not bind, beside the same without a limit, in the same
// run; and sleeping jobs under a limit that binds, against what the limit
// allows (limit × 1 s / sleep).
func (b *bencher) limits(ctx context.Context) (*LimitsBench, error) {
	var r LimitsBench
	var err error
	if r.Free, err = b.burnDown(ctx, "limit-none", b.o.Jobs, b.o.Procs, b.o.Concurrency, defaultClaimBatch, "noop", nil); err != nil {
		return nil, err
	}
	if r.NotBinding, err = b.burnDownLimited(ctx, "limit-loose", b.o.Jobs, b.o.Procs, b.o.Concurrency, defaultClaimBatch, "noop", nil,
		map[string]int{queue.KindLimit("noop"): queue.MaxLimit}); err != nil {
		return nil, err
	}
	r.Limit, r.SleepMs = limitBinding, int(limitSleep/time.Millisecond)
	backlog := b.o.LimitJobs
	if backlog <= 0 {
		backlog = limitBindingJobs
	}
	b.window = b.o.LimitFor
	r.Binding, err = b.burnDownLimited(ctx, "limit-binding", backlog, 2, 10, defaultClaimBatch, "bench-sleep", SleepArgs{Ms: r.SleepMs},
		map[string]int{queue.KindLimit("bench-sleep"): limitBinding})
	b.window = 0
	if err != nil {
		return nil, err
	}
	r.Allowed = float64(limitBinding) * float64(time.Second) / float64(limitSleep)
	return &r, nil
}

// The binding limit's run: limitBindingJobs jobs of limitSleep each under a
// limit of limitBinding, run by 2 processes of 10 slots (4 times what the
// limit lets run).
const (
	limitBinding     = 5
	limitSleep       = 100 * time.Millisecond
	limitBindingJobs = 300
)
