package docket

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docketq/docket/internal/clientengine"
	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/docketq/docket/worker"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
)

// Client inserts jobs and, once started, works them. Create it with
// NewClient; it is safe for concurrent use.
type Client struct {
	cfg Config
	eng engine // cfg mapped onto the engine's components
	db  *mongo.Database
	q   *queue.Client
	reg *jobs.Registry
	log *zap.Logger

	// q and elector, for docket's own tools (internal/clientengine).
	engineHandle

	elector *leadership.Elector

	mu          sync.Mutex
	unregister  func()                // leaves the workers registry; set by Start
	argsOpts    map[string]InsertOpts // the InsertOpts() of each kind's args type, for AddHandler's kinds
	maintenance []recovery.Task
	started     bool
	stopped     bool
	w           *worker.Worker
	sched       *recovery.Scheduler
	stopElect   context.CancelFunc
	elected     chan struct{}

	// Observing the pool (events.go, subscribe.go, middleware.go, extend.go).
	events     *eventHub
	middleware []jobs.Middleware
	// insertMiddleware wraps Insert and InsertMany (insert.go).
	insertMiddleware []InsertMiddleware
	observers        []worker.Observer       // AddObserver's
	runs             []func(context.Context) // RunWhileStarted's
	stopRun          context.CancelFunc
	running          sync.WaitGroup
}

// maintenanceStopWait bounds how long Stop waits for a maintenance pass
// that was running when it stopped the schedule: every maintenance write
// is fenced, so abandoning a pass is safe.
const maintenanceStopWait = 5 * time.Second

// ErrNotStarted is returned by Stop on a client that was never started.
var ErrNotStarted = errors.New("docket: client not started")

// ErrSetupRefused is wrapped by the error of a Start, or of an insert
// that needs the jobs collection's indexes, when the server refuses to
// create them for what the collection holds (two unfinished jobs with one
// unique key, written by another app): the error names the documents.
var ErrSetupRefused = queue.ErrSetupRefused

// ErrJobsCancelled is wrapped by the error of a Stop that had to cancel
// running jobs: its context ended, or Config.ShutdownTimeout passed,
// before they finished. The error is a *JobsCancelledError saying how many.
var ErrJobsCancelled = errors.New("docket: stop cancelled running jobs")

// JobsCancelledError is the error of a Stop whose wait ended before the
// running jobs finished: it cancelled Count of them. Their handlers were
// told (their context's cause is worker.ErrShutdown); those that returned
// gave their jobs back, to run again.
type JobsCancelledError struct {
	// Count is how many jobs were running when Stop cancelled them.
	Count int
}

// Error says how many jobs Stop cancelled.
func (e *JobsCancelledError) Error() string {
	return fmt.Sprintf("docket: stop cancelled %d running job(s): its wait ended before they finished", e.Count)
}

// Is makes errors.Is(err, ErrJobsCancelled) hold.
func (e *JobsCancelledError) Is(target error) bool { return target == ErrJobsCancelled }

// NewClient returns a client of the jobs in db. It checks cfg and connects
// nothing: inserting ensures the jobs collection's indexes on first use, and
// Start ensures them before it runs anything.
func NewClient(db *mongo.Database, cfg Config) (*Client, error) {
	if db == nil {
		return nil, errors.New("docket: NewClient: db must not be nil")
	}
	cfg.Logger = cmp.Or(cfg.Logger, zap.NewNop())
	if cfg.ID == "" {
		cfg.ID = worker.NewID()
	}
	log := cfg.Logger.With(zap.String("worker", cfg.ID))
	eng, err := cfg.engine(log)
	if err != nil {
		return nil, fmt.Errorf("docket: %w", err)
	}
	if err := cfg.validateParts(); err != nil {
		return nil, fmt.Errorf("docket: %w", err)
	}
	elector, err := leadership.New(db.Collection(leadership.DefaultCollection),
		leadership.Config{ID: cfg.ID, TTL: cfg.LeaderTTL, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("docket: %w", err)
	}
	q, err := queue.New(db, eng.queue)
	if err != nil {
		return nil, fmt.Errorf("docket: %w", err)
	}
	return &Client{cfg: cfg, eng: eng, db: db, q: q, engineHandle: clientengine.NewHandle(q, elector, eng.reaper), reg: jobs.NewRegistry(), log: log, elector: elector, argsOpts: map[string]InsertOpts{},
		events: newEventHub(log)}, nil
}

// Leadership is this client's part in the election of the one process
// that runs maintenance (the reaper, retention, periodic jobs, the
// application's AddMaintenance passes).
type Leadership interface {
	// IsLeader reports whether this process leads now.
	IsLeader() bool
}

// Leadership returns this client's part in the leader election, which it
// takes once started.
func (c *Client) Leadership() Leadership { return elected{c.elector} }

// IsLeader reports whether this client leads the maintenance now: false
// before Start and after Stop.
func (c *Client) IsLeader() bool { return c.Leadership().IsLeader() }

// elected is the client's elector as a Leadership: IsLeader only, so no
// type assertion reaches the election's engine (docketprom reaches its
// term through internal/clientengine).
type elected struct{ e *leadership.Elector }

func (e elected) IsLeader() bool { _, ok := e.e.Leading(); return ok }

// ID returns the id that names this process in job documents, logs and the
// leader election (Config.ID, or the one made for it).
func (c *Client) ID() string { return c.cfg.ID }

// engineHandle is the name under which a Client embeds the Handle that
// docket's own tools reach its queue client by.
type engineHandle = clientengine.Handle

// Registry returns the kinds the client works. Add to it with AddHandler,
// MustAddHandler or Registry().Add before Start: once the client started,
// an Add fails, as the pool runs only the kinds registered when it started.
func (c *Client) Registry() *jobs.Registry { return c.reg }

// AddHandler registers fn for the kind its args type names, with the
// kind's options (its timeout). Args that do not decode, or that fail
// their Validate, send the job to the dead state with the reason; an error
// that wraps jobs.Permanent does too; any other error retries with
// backoff. After Start it fails: the pool runs only the kinds registered
// when it started.
//
// What an insert of the kind takes by default (queue, priority, attempts)
// comes from T's InsertOpts() (ArgsWithInsertOpts) alone, so that every
// process inserts the kind alike. opts' MaxAttempts, Queue and Priority are
// refused unless T declares the same: the error names the method to add.
func AddHandler[T jobs.Args](c *Client, fn func(ctx context.Context, job *jobs.Job, args T) error, opts jobs.KindOptions) error {
	var zero T
	declared, hasOpts := argsAs[ArgsWithInsertOpts](zero)
	var d InsertOpts
	if hasOpts {
		d = declared.InsertOpts()
	}
	if err := checkKindDefaults(zero, hasOpts, d, opts); err != nil {
		return err
	}
	//lint:ignore SA1019 the deprecated insert defaults are checked above and cleared here
	opts.MaxAttempts, opts.Queue, opts.Priority = 0, "", 0
	if err := jobs.Register(c.reg, fn, opts); err != nil {
		return err
	}
	if hasOpts {
		c.mu.Lock()
		c.argsOpts[zero.Kind()] = d
		c.mu.Unlock()
	}
	return nil
}

// checkKindDefaults refuses the insert defaults opts sets that args'
// type does not declare (d, when hasOpts), saying what to write instead.
func checkKindDefaults(args jobs.Args, hasOpts bool, d InsertOpts, opts jobs.KindOptions) error {
	//lint:ignore SA1019 reads the deprecated insert defaults to refuse them
	queue, priority, maxAttempts := opts.Queue, opts.Priority, opts.MaxAttempts
	fields := []struct {
		set, equal    bool
		lit, declared string
	}{
		{queue != "", queue == d.Queue, fmt.Sprintf("Queue: %q", queue), fmt.Sprintf("Queue %q", d.Queue)},
		{priority != 0, priority == d.Priority, fmt.Sprintf("Priority: %d", priority), fmt.Sprintf("Priority %d", d.Priority)},
		{maxAttempts != 0, maxAttempts == d.MaxAttempts, fmt.Sprintf("MaxAttempts: %d", maxAttempts), fmt.Sprintf("MaxAttempts %d", d.MaxAttempts)},
	}
	var lits, conflicts []string
	for _, f := range fields {
		if f.set && !f.equal {
			lits = append(lits, f.lit)
			conflicts = append(conflicts, f.declared)
		}
	}
	if len(lits) == 0 {
		return nil
	}
	why := fmt.Sprintf("docket: AddHandler %q: jobs.KindOptions %s: insert defaults must be the same in every process, one that inserts without this handler too, so they come from the args type alone",
		args.Kind(), strings.Join(lits, ", "))
	typ := reflect.TypeOf(args).Name()
	if !hasOpts {
		return fmt.Errorf("%s: leave them zero in KindOptions and declare them on %s:\n\tfunc (%s) InsertOpts() docket.InsertOpts { return docket.InsertOpts{%s} }",
			why, typ, typ, strings.Join(lits, ", "))
	}
	return fmt.Errorf("%s: leave them zero in KindOptions (%s.InsertOpts() declares %s), and set in %s.InsertOpts() what every insert should take",
		why, typ, strings.Join(conflicts, ", "), typ)
}

// MustAddHandler is AddHandler that panics on error, for a program's main.
func MustAddHandler[T jobs.Args](c *Client, fn func(ctx context.Context, job *jobs.Job, args T) error, opts jobs.KindOptions) {
	if err := AddHandler(c, fn, opts); err != nil {
		panic(err)
	}
}

// AddMaintenance adds passes the application's kinds need (a sweep that
// finds stalled handler data and enqueues jobs to finish it, say), run on
// their schedules by the elected process only, beside the reaper. A
// recovery.Task is a Run method (robfig/cron's Job) with its cron spec
// (Schedule); a tick that comes while the last Run still runs is skipped.
// Call it before Start.
func (c *Client) AddMaintenance(tasks ...recovery.Task) error {
	return c.beforeStart("AddMaintenance after Start", func() error {
		if slices.Contains(tasks, nil) {
			return errors.New("docket: AddMaintenance: nil task")
		}
		c.maintenance = append(c.maintenance, tasks...)
		return nil
	})
}

// kindQueue is the queue a job of kind goes to when its insert names none.
// c.mu is held.
func (c *Client) kindQueue(kind string) string {
	if q := c.argsOpts[kind].Queue; q != "" {
		return q
	}
	return jobs.DefaultQueue
}

// warnUnserved logs each registered kind whose queue no worker of this
// client serves: its jobs wait for another process that does. c.mu is held.
func (c *Client) warnUnserved() {
	for _, kind := range c.reg.Kinds() {
		if q := c.kindQueue(kind); !slices.Contains(c.eng.worker.Queues, q) {
			c.log.Warn("a registered kind's queue is one no worker of this client serves: its jobs run only in a process that serves it (Config.Queues)",
				zap.String("kind", kind), zap.String("queue", q), zap.Strings("queues_served", c.eng.worker.Queues))
		}
	}
}

// Start ensures the jobs collection's indexes, runs Config.Setup, then
// starts the pool, the leader election and the maintenance schedule, and
// returns. It fails, with nothing started, when the server cannot be
// reached or refuses the set-up (errors.Is(err, ErrSetupRefused));
// it may then be called again. It refuses a client with no handler: one
// that only inserts never needs to start.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.stopped:
		return errors.New("docket: Start after Stop")
	case c.started:
		return errors.New("docket: Start called twice")
	case len(c.reg.Kinds()) == 0:
		return errors.New("docket: Start: no handler registered (a client that only inserts need not start)")
	}
	periodicJobs, err := c.periodicEngineJobs()
	if err != nil {
		return fmt.Errorf("docket: start: %w", err)
	}
	if err := c.q.EnsureIndexes(ctx); err != nil {
		return fmt.Errorf("docket: start: %w", err)
	}
	if c.cfg.Setup != nil {
		if err := c.cfg.Setup(ctx); err != nil {
			return fmt.Errorf("docket: start: set-up: %w", err)
		}
	}
	// Before the pool runs a job, so they hold from its first claim.
	if err := c.applyBounds(ctx); err != nil {
		return fmt.Errorf("docket: start: %w", err)
	}

	w, err := worker.New(c.q, c.reg, c.workerConfig())
	if err != nil {
		return fmt.Errorf("docket: %w", err)
	}
	reaper, err := recovery.NewReaper(c.q, c.eng.reaper)
	if err != nil {
		return fmt.Errorf("docket: %w", err)
	}
	periodic, err := recovery.NewPeriodicEnqueuer(c.db, c.q, periodicJobs, c.log)
	if err != nil {
		return fmt.Errorf("docket: %w", err)
	}
	elector := c.elector
	// The counts docketctl stats and the dashboard read.
	counter, err := recovery.NewStatsCounter(c.q, elector, c.cfg.ID, recovery.StatsCounterConfig{Logger: c.log})
	if err != nil {
		return fmt.Errorf("docket: %w", err)
	}
	// Every process schedules the maintenance; only the elected one runs
	// it, so its cost does not grow with the number of processes.
	var tasks []recovery.Task
	for _, t := range append([]recovery.Task{reaper, periodic, counter}, c.maintenance...) {
		tasks = append(tasks, recovery.LeaderOnly(elector, t))
	}
	sched, err := recovery.NewScheduler(c.log, tasks...)
	if err != nil {
		return fmt.Errorf("docket: %w", err)
	}

	electing, stopElect := context.WithCancel(context.Background())
	c.elected = make(chan struct{})
	go func() { defer close(c.elected); elector.Run(electing) }()
	c.stopElect = stopElect
	c.w, c.sched, c.started = w, sched, true
	c.reg.Seal("added after Start: the client's pool runs only the kinds registered when it started")
	c.warnUnserved()
	w.Start(context.Background())
	sched.Start()
	c.unregister = register(c.q, c.eng.worker, w, c.reg.Kinds(), c.log)
	c.startRuns()
	return nil
}

// Stop stops gracefully in two stages: it stops claiming and scheduling
// maintenance at once, gives the leadership up (another process takes the
// maintenance over without waiting for the lease), and waits for running
// jobs to finish. When ctx ends, or Config.ShutdownTimeout passes,
// first, it cancels the jobs still running; handlers that return give their
// jobs back. A handler that ignores its cancellation keeps its job until
// the lease expires: call ReleaseAbandoned just before the process exits to
// give such jobs back at once.
//
// When it had to cancel jobs, Stop returns a *JobsCancelledError saying how
// many (errors.Is(err, ErrJobsCancelled)); the client is stopped all the
// same. A second Stop does nothing more and returns nil.
func (c *Client) Stop(ctx context.Context) error {
	return c.stop(ctx, false)
}

// StopAndCancel stops as Stop does, but cancels running jobs at once; as
// that is what it was asked, it returns no JobsCancelledError.
func (c *Client) StopAndCancel(ctx context.Context) error {
	return c.stop(ctx, true)
}

func (c *Client) stop(ctx context.Context, cancelJobs bool) error {
	c.mu.Lock()
	if !c.started {
		c.mu.Unlock()
		return ErrNotStarted
	}
	first := !c.stopped
	c.stopped = true
	c.mu.Unlock()

	var maintenanceDone <-chan struct{}
	if first {
		maintenanceDone = c.sched.Stop()
		c.stopElect() // resigns: another process leads at once
		<-c.elected
	}
	var err error
	if cancelJobs {
		err = c.w.StopAndCancel(ctx)
	} else {
		err = c.w.Stop(ctx)
	}
	if first {
		c.stopRuns()
	}
	if maintenanceDone != nil {
		select {
		case <-maintenanceDone:
		case <-time.After(maintenanceStopWait):
			c.log.Warn("a maintenance pass was still running at stop; its fenced writes are safe to abandon")
		}
	}
	if first {
		// Out of the registry once its jobs are done: until then the reaper
		// knows it alive.
		c.unregister()
	}
	if n := c.w.CancelledAtStop(); err == nil && first && !cancelJobs && n > 0 {
		return &JobsCancelledError{Count: n}
	}
	return err
}

// Run starts the client, waits for SIGINT or SIGTERM (or ctx's end), then
// stops gracefully, as Stop does, within Config.ShutdownTimeout; a
// second signal cancels the running jobs at once. It returns Start's error,
// or Stop's (a *JobsCancelledError when the jobs did not all finish in
// time). It is a program's main loop (asynq's Run): one that exits after it
// may call ReleaseAbandoned first.
func (c *Client) Run(ctx context.Context) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := c.Start(ctx); err != nil {
		return err
	}
	select {
	case sig := <-sigs:
		c.log.Info("stopping: waiting for running jobs; signal again to cancel them",
			zap.String("signal", sig.String()), zap.Duration("shutdown_timeout", c.eng.worker.ShutdownTimeout))
	case <-ctx.Done():
		c.log.Info("stopping: the context ended; waiting for running jobs",
			zap.Duration("shutdown_timeout", c.eng.worker.ShutdownTimeout))
	}
	// ctx may have ended: the graceful wait is the shutdown timeout's.
	stopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go func() {
		select {
		case <-sigs:
			c.log.Info("second signal: cancelling running jobs")
			cancel()
		case <-stopCtx.Done():
		}
	}()
	return c.Stop(stopCtx)
}

// pool returns the client's worker pool, nil before Start.
func (c *Client) pool() *worker.Worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w
}

// Running returns how many jobs the client's pool runs now (0 before
// Start).
func (c *Client) Running() int {
	w := c.pool()
	if w == nil {
		return 0
	}
	return w.Running()
}

// PoolStats returns the pool's own counts: stuck handlers given up on, and
// jobs given back unstarted (zero before Start).
func (c *Client) PoolStats() worker.Stats {
	w := c.pool()
	if w == nil {
		return worker.Stats{}
	}
	return w.Stats()
}

// ReleaseAbandoned gives back, after Stop, the jobs whose handlers ignored
// their cancellation and still run, and returns how many. Call it only
// right before the process exits: another worker may start such a job at
// once, while its handler here runs on until the exit (its writes to the
// job fail, fenced). A process that goes on running lets the leases expire
// instead, as Stop arranges.
func (c *Client) ReleaseAbandoned(ctx context.Context) int {
	w := c.pool()
	if w == nil {
		return 0
	}
	return w.ReleaseAbandoned(ctx)
}

// applyBounds sets the configured capacities and limits.
func (c *Client) applyBounds(ctx context.Context) error {
	setBy := "config:" + c.cfg.ID
	for _, name := range sortedKeys(c.cfg.Capacities) {
		n, _ := capacityValue(c.cfg.Capacities[name]) // checked setBy NewClient
		if err := c.q.SetCapacity(ctx, name, n, setBy); err != nil {
			return fmt.Errorf("capacities.%s: %w", name, err)
		}
		c.log.Info("queue capacity set from the configuration", zap.String("queue", name), zap.Int("capacity", n))
	}
	for _, name := range sortedKeys(c.cfg.Limits) {
		n, _ := limitValue(c.cfg.Limits[name])
		if err := c.q.SetLimit(ctx, name, n, setBy); err != nil {
			return fmt.Errorf("limits.%s: %w", name, err)
		}
		c.log.Info("concurrency limit set from the configuration", zap.String("limit", name), zap.Int("n", n))
	}
	for _, name := range slices.Sorted(maps.Keys(c.cfg.PartitionLimits)) {
		pl := c.cfg.PartitionLimits[name]
		if err := c.q.SetPartitionLimit(ctx, name, pl.By, pl.N, setBy); err != nil {
			return fmt.Errorf("partition limits.%s: %w", name, err)
		}
		c.log.Info("partition limit set from the configuration", zap.String("limit", name), zap.Stringer("partition", pl))
	}
	if err := store.Of(c.q).SetRates(ctx, c.cfg.Rates, setBy); err != nil {
		return fmt.Errorf("rates: %w", err)
	}
	return nil
}

// startRuns starts what RunWhileStarted was given, until stopRuns. c.mu
// is held.
func (c *Client) startRuns() {
	if len(c.runs) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stopRun = cancel
	for _, f := range c.runs {
		c.running.Add(1)
		go func() { defer c.running.Done(); f(ctx) }()
	}
}

// stopRuns ends what startRuns started, and waits for it.
func (c *Client) stopRuns() {
	if c.stopRun != nil {
		c.stopRun()
		c.running.Wait()
	}
}

// workerConfig is the pool's configuration: Config's, with the client's
// middleware, and observed by the event subscribers and AddObserver's.
// c.mu is held.
func (c *Client) workerConfig() worker.Config {
	wcfg := c.eng.worker
	wcfg.Middleware = slices.Clone(c.middleware)
	obs := []worker.Observer{c.events}
	obs = append(obs, c.observers...)
	wcfg.Observer = worker.Observers(obs...)
	return wcfg
}

// periodicEngineJobs checks at Start that this client has a handler for
// each periodic job's kind, and returns the jobs with their options filled
// as an insert's are.
func (c *Client) periodicEngineJobs() ([]recovery.PeriodicJob, error) {
	var errs []error
	for _, p := range c.cfg.PeriodicJobs {
		if _, _, ok := c.reg.Lookup(p.Args.Kind()); !ok {
			errs = append(errs, fmt.Errorf("periodic job %q: no handler registered for its kind %q", p.Name, p.Args.Kind()))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return periodicForEngine(c.cfg.PeriodicJobs), nil
}

// beforeStart runs add with c.mu held, unless the client has started: then
// it fails, saying why (tooLate).
func (c *Client) beforeStart(tooLate string, add func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("docket: " + tooLate)
	}
	return add()
}
