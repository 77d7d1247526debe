package worker

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"
)

// bound returns d, or the configured write timeout when that is shorter.
func (w *Worker) bound(d time.Duration) time.Duration {
	if w.cfg.WriteTimeout > 0 {
		return min(d, w.cfg.WriteTimeout)
	}
	return d
}

// Errors that end a job's context, seen by handlers through context.Cause,
// beside jobs.ErrLeaseLost (another worker or the reaper took the job) and
// jobs.ErrCancelled.
var (
	// ErrShutdown: the worker is stopping and gives the job back.
	ErrShutdown = errors.New("worker shutting down")
	// ErrTimeout: the attempt ran past its kind's timeout.
	ErrTimeout = errors.New("job timed out")
)

// Worker claims and runs jobs. Start it once; stop it with Stop or
// StopAndCancel.
type Worker struct {
	cfg Config
	q   *store.Store  // the lease-level side of the queue client, its limits' and rates' state too
	c   *queue.Client // the client itself, to settle dependents (deps.go)
	reg *jobs.Registry
	log *zap.Logger
	obs Observer

	// settles gathers the finished jobs whose dependents to settle (deps.go).
	settles settleQueue

	// Slots (see launch and freeSlots): held counts the jobs held from
	// their claim until their handler returns, up to Concurrency and the
	// jobs claimed ahead; exec admits Concurrency handlers at once; writing
	// bounds the outcomes being written, which hold neither: a slow write
	// does not keep a slot from the next job.
	held    atomic.Int64
	waiting atomic.Int64 // of held, the jobs not started yet

	// slowestClaim is the slowest of the recent claims (a time.Duration):
	// how long a command takes now, for a final write's last try.
	slowestClaim atomic.Int64
	exec         *semaphore.Weighted
	writing      *semaphore.Weighted
	handler      handlerTime // how long handlers take, to size claims ahead
	wake         chan struct{}

	drainedAt atomic.Int64 // unix nanoseconds, 0 when the last claim failed or saw a backlog: when it found the backlog drained (noteDrained)
	missed    missedNext   // the dependents runNext last found not to take (deps.go)

	stopClaiming context.CancelFunc
	claimingCtx  context.Context
	dispatchDone chan struct{}
	jobsCtx      context.Context
	cancelJobs   context.CancelCauseFunc
	startOnce    sync.Once
	stopOnce     sync.Once
	running      sync.WaitGroup
	mu           sync.Mutex
	active       map[string]*run
	plimits      processLimits // the jobs held per process limit, under mu (processlimits.go)
	beats        heartbeater   // renews the leases of the running jobs (heartbeats.go)
	ahead        successors    // jobs read ahead to hand run slots to (handoff.go)

	// sweeps are the goroutines giving back the jobs of claims that
	// returned an error; stopSweeps makes them sweep at once and end.
	sweeps     sync.WaitGroup
	sweepsCtx  context.Context
	stopSweeps context.CancelFunc

	stuck           atomic.Int64
	unstarted       atomic.Int64
	progressReports atomic.Int64      // jobs.Progress calls of its handlers
	cancelled       atomic.Int64      // jobs a stop cancelled, its wait over before they finished
	afterClaim      func([]*jobs.Job) // test hook: runs between a claim's reply and the launch of its jobs
	onGatherWait    func()            // test hook: runs when a claim waits for slots to free

	onSettle func(context.Context, []string) // test hook: runs before each settle of dependents (deps.go)
}

// Stats are counters of what a worker did since it was made, for logs and
// metrics.
type Stats struct {
	// StuckHandlers counts the handlers the worker gave up on (see
	// Config.StuckGrace).
	StuckHandlers int64
	// ReleasedUnstarted counts jobs given back without running their
	// handler, their attempt not counted: stamped by a claim that returned
	// an error (its reply lost), or claimed with less than
	// Config.StartMargin of lease left.
	ReleasedUnstarted int64
	// ProgressReports counts the progress its handlers reported
	// (jobs.Progress), whether or not a renewal wrote it: reports made
	// between two renewals coalesce.
	ProgressReports int64
}

// Stats returns the worker's counters. Safe to call at any time, from any
// goroutine.
func (w *Worker) Stats() Stats {
	return Stats{StuckHandlers: w.stuck.Load(), ReleasedUnstarted: w.unstarted.Load(), ProgressReports: w.progressReports.Load()}
}

// New returns a Worker that runs the kinds in reg from the jobs of q.
func New(q *queue.Client, reg *jobs.Registry, cfg Config) (*Worker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(reg.Kinds()) == 0 {
		return nil, errors.New("worker: the registry has no kinds: register a handler first")
	}
	st := store.Of(q) // nil for a zero Client, which only config checks use
	if cfg.ClaimBatch > 1 && st != nil {
		st = st.WithBatchedCompletion(store.DefaultCompleteLinger)
	}
	w := &Worker{
		cfg:          cfg,
		q:            st,
		c:            q,
		reg:          reg,
		log:          cfg.Logger.Named("worker").With(zap.String("worker", cfg.ID)),
		obs:          cfg.Observer,
		exec:         semaphore.NewWeighted(int64(cfg.Concurrency)),
		writing:      semaphore.NewWeighted(int64(cfg.Concurrency + cfg.prefetchMax())),
		wake:         make(chan struct{}, 1),
		dispatchDone: make(chan struct{}),
		active:       map[string]*run{},
		plimits:      newProcessLimits(cfg.ProcessLimits),
	}
	if w.obs == nil {
		w.obs = NopObserver{}
	}
	w.claimingCtx, w.stopClaiming = context.WithCancel(context.Background())
	w.sweepsCtx, w.stopSweeps = context.WithCancel(context.Background())
	w.jobsCtx, w.cancelJobs = context.WithCancelCause(context.Background())
	return w, nil
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// Start begins claiming jobs. Cancelling ctx stops the worker at once, as
// StopAndCancel does.
func (w *Worker) Start(ctx context.Context) {
	w.startOnce.Do(func() {
		w.log.Info("worker started",
			zap.Strings("queues", w.cfg.Queues),
			zap.Strings("kinds", w.reg.Kinds()),
			zap.Int("concurrency", w.cfg.Concurrency))
		w.logProcessLimits()
		go w.dispatch()
		context.AfterFunc(ctx, func() { _ = w.StopAndCancel(context.Background()) })
	})
}

// Stop stops claiming and waits for running jobs to finish. When ctx ends or
// the shutdown timeout passes first, it cancels the jobs still running; a
// handler that returns gives its job back (or records its outcome) itself.
// A handler that ignores the cancellation keeps its job: its lease is no
// longer renewed, and the reaper re-queues the job once the lease and the
// reaper's grace have passed, never while the lease holds. A process that
// exits right after Stop may call ReleaseAbandoned to give those jobs back
// at once.
func (w *Worker) Stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.ShutdownTimeout)
	defer cancel()
	return w.stop(ctx)
}

// StopAndCancel stops claiming and cancels every running job at once, as
// Stop does when its timeout passes.
func (w *Worker) StopAndCancel(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	return w.stop(ctx)
}

func (w *Worker) stop(graceful context.Context) error {
	var err error
	w.stopOnce.Do(func() {
		defer w.stopSettles() // after the jobs: what they leave is the leader's
		w.stopClaiming()
		<-w.dispatchDone
		w.stopSweeps()
		w.sweeps.Wait()
		w.mu.Lock()
		n := len(w.active)
		w.mu.Unlock()
		w.log.Info("worker stopping", zap.Int("running_jobs", n))
		done := make(chan struct{})
		go func() { w.running.Wait(); close(done) }()
		select {
		case <-done:
			w.log.Info("worker stopped", zap.Int("released", 0))
			return
		case <-graceful.Done():
		}
		w.mu.Lock()
		w.cancelled.Store(int64(len(w.active)))
		w.mu.Unlock()
		w.cancelJobs(ErrShutdown)
		// Handlers that honour their context return now and release their
		// own leases; give them a moment. The leases of those that do not
		// are left to expire: releasing one while its handler runs would
		// let another worker start the job beside it.
		select {
		case <-done:
		case <-time.After(abandonWait):
		}
		abandoned := w.abandoned()
		for _, r := range abandoned {
			w.log.Warn("a handler ignored cancellation and is still running; its lease is no longer renewed, and the reaper re-queues the job after it expires",
				r.job.LogFields(zap.Time("lease_expires_at", r.leaseExpiry()))...)
		}
		w.log.Info("worker stopped", zap.Int("abandoned", len(abandoned)))
		err = graceful.Err()
	})
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// CancelledAtStop returns how many running jobs Stop or StopAndCancel
// cancelled because its wait ended before they finished (0 before a stop).
func (w *Worker) CancelledAtStop() int { return int(w.cancelled.Load()) }

// abandonWait is how long a stop that cancelled the running jobs waits for
// their handlers to return.
const abandonWait = 2 * time.Second

// abandoned returns the jobs whose handlers have not returned.
func (w *Worker) abandoned() []*run {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Collect(maps.Values(w.active))
}

// ReleaseAbandoned gives back at once, after Stop or StopAndCancel, the
// jobs whose handlers ignored the cancellation and are still running, and
// returns how many it released. Call it only in a process that exits right
// after: another worker may start such a job at once, while its handler
// here runs until the process ends (its fenced writes fail from then on).
// A process that keeps running should let the leases expire instead, which
// Stop already arranges.
func (w *Worker) ReleaseAbandoned(ctx context.Context) int {
	n := 0
	for _, r := range w.abandoned() {
		if !r.settle() {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := w.q.Release(rctx, r.lease)
		cancel()
		if err != nil {
			w.log.Warn("release failed; the reaper will re-queue the job", r.job.LogFields(zap.Error(err))...)
			continue
		}
		w.log.Warn("released the lease of a job whose handler ignored cancellation", r.job.LogFields()...)
		n++
	}
	return n
}

// Running returns how many jobs the worker is running now: in their
// handlers, or writing their outcomes. Jobs claimed ahead and waiting for a
// slot are not counted (see Waiting).
func (w *Worker) Running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.active) - int(w.waiting.Load())
}

// Waiting returns how many jobs the worker holds claimed ahead, waiting
// for a slot (see Config.Prefetch).
func (w *Worker) Waiting() int { return int(w.waiting.Load()) }

func (w *Worker) signalWake() { poke(w.wake) }

// poke sends on ch, a wake-up channel of capacity one, unless a wake-up
// is pending already.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sleep waits for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// launch runs job in its own goroutine. The job holds the slot the
// dispatcher took for it (w.held) until its handler returns; it waits for
// one of the Concurrency run slots (w.exec) to start, and its outcome is
// written under a writing slot (see freeSlots). It counts in its process
// limits (processlimits.go) from before its goroutine starts until that
// goroutine ends.
func (w *Worker) launch(job *jobs.Job) { w.launchRun(&run{job: job}) }

// launchRunning launches job holding a run slot taken for it.
func (w *Worker) launchRunning(job *jobs.Job) { w.launchRun(&run{job: job, executing: true}) }

func (w *Worker) launchRun(r *run) {
	job := r.job
	r.lease, r.expires = store.LeaseOf(job), *job.LeaseExpiresAt
	w.mu.Lock()
	w.active[job.ID] = r
	w.plimits.hold(job, 1)
	w.mu.Unlock()
	w.running.Add(1)
	go func() {
		defer w.running.Done()
		defer func() {
			w.freeSlots(r)
			if r.writing {
				w.writing.Release(1)
			}
			w.mu.Lock()
			delete(w.active, job.ID)
			w.plimits.hold(job, -1)
			w.mu.Unlock()
			// Handed on: its slots run the successor, nothing to claim;
			// dependents: the settle of its dependents wakes the claim
			// (deps.go).
			if !r.handedOn && !r.dependents {
				w.signalWake()
			}
		}()
		w.execute(r)
	}()
}

// startSlot waits for a run slot for r's job, and reports whether its
// handler may start: not when ctx (the job's) ends first, nor when the
// worker stops claiming first (a job claimed ahead and not started is
// given back at a stop rather than run), nor when the lease has less than
// StartMargin left (its renewals failed while it waited).
func (w *Worker) startSlot(ctx context.Context, r *run) bool {
	if !r.executing && !w.exec.TryAcquire(1) {
		w.waiting.Add(1)
		wctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(w.claimingCtx, cancel)
		err := w.exec.Acquire(wctx, 1)
		stop()
		cancel()
		w.waiting.Add(-1)
		if err != nil {
			return false
		}
	}
	r.executing = true
	if w.claimingCtx.Err() != nil || ctx.Err() != nil || time.Until(r.leaseExpiry()) < w.cfg.StartMargin() {
		w.exec.Release(1)
		r.executing = false
		return false
	}
	return true
}

// freeSlots hands r's job from its slots to a writing slot: its handler
// has returned (or was given up on, or never started), so its run slot
// and the dispatcher's slot go to the next jobs, while its outcome is
// written. At most Concurrency + Prefetch outcomes are written at once;
// beyond that the job waits, holding its slots, which holds back claims.
// Only r's goroutine calls it; the second call does nothing.
func (w *Worker) freeSlots(r *run) {
	if r.freed {
		return
	}
	r.freed = true
	_ = w.writing.Acquire(context.Background(), 1) // cannot fail
	r.writing = true
	if r.executing {
		w.exec.Release(1)
		r.executing = false
	}
	w.held.Add(-1)
	if !w.q.HoldsRunSlot(r.job.ID) && !w.settleWakes(r.job.Dependents) {
		// A job holding a run slot wakes the dispatcher once its
		// finishing write has freed the slot (launch), not before: a
		// claim now would find its limit still full.
		w.signalWake()
	}
}
