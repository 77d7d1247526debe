package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

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

// claimTimeout bounds one claim round trip. A claim is never cancelled by a
// stop: a claim whose reply was lost would hold a job until the reaper.
const claimTimeout = 10 * time.Second

// claimGather is how long a batch claim waits for running jobs to free more
// slots before it claims with the slots it has.
const claimGather = 50 * time.Millisecond

// claimGatherMax bounds how long a batch claim waits for the slots of jobs
// whose outcomes are being written.
const claimGatherMax = time.Second

// Errors that end a job's context, seen by handlers through context.Cause.
var (
	// ErrLeaseLost: another worker or the reaper took the job.
	ErrLeaseLost = errors.New("lease lost")
	// ErrShutdown: the worker is stopping and gives the job back.
	ErrShutdown = errors.New("worker shutting down")
	// ErrTimeout: the attempt ran past its kind's timeout.
	ErrTimeout = errors.New("job timed out")
)

// Worker claims and runs jobs. Start it once; stop it with Stop or
// StopAndCancel.
type Worker struct {
	cfg Config
	q   *queue.Client
	reg *jobs.Registry
	log *zap.Logger
	obs Observer

	sem  *semaphore.Weighted
	wake chan struct{}

	stopClaiming context.CancelFunc
	claimingCtx  context.Context
	dispatchDone chan struct{}
	jobsCtx      context.Context
	cancelJobs   context.CancelCauseFunc
	startOnce    sync.Once
	stopOnce     sync.Once
	running      sync.WaitGroup
	inHandler    atomic.Int64 // jobs whose handlers have not returned
	mu           sync.Mutex
	active       map[string]*run
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
	if cfg.ClaimBatch > 1 {
		q = q.WithBatchedCompletion(queue.DefaultCompleteLinger)
	}
	w := &Worker{
		cfg:          cfg,
		q:            q,
		reg:          reg,
		log:          cfg.Logger.Named("worker").With(zap.String("worker", cfg.ID)),
		obs:          cfg.Observer,
		sem:          semaphore.NewWeighted(int64(cfg.Concurrency)),
		wake:         make(chan struct{}, 1),
		dispatchDone: make(chan struct{}),
		active:       map[string]*run{},
	}
	if w.obs == nil {
		w.obs = NopObserver{}
	}
	w.claimingCtx, w.stopClaiming = context.WithCancel(context.Background())
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
		w.stopClaiming()
		<-w.dispatchDone
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

// abandonWait is how long a stop that cancelled the running jobs waits for
// their handlers to return.
const abandonWait = 2 * time.Second

// abandoned returns the jobs whose handlers have not returned.
func (w *Worker) abandoned() []*run {
	w.mu.Lock()
	defer w.mu.Unlock()
	runs := make([]*run, 0, len(w.active))
	for _, r := range w.active {
		runs = append(runs, r)
	}
	return runs
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

// dispatch claims jobs whenever a slot is free, until the worker stops.
func (w *Worker) dispatch() {
	defer close(w.dispatchDone)
	kinds := w.reg.Kinds()
	params := queue.ClaimParams{Owner: w.cfg.ID, Queues: w.cfg.Queues, Kinds: kinds, Lease: w.cfg.Lease}
	var idle, failing time.Duration
	for {
		if err := w.sem.Acquire(w.claimingCtx, 1); err != nil {
			return
		}
		slots := w.gatherSlots()
		// Not bounded by the write timeout: a claim that times out after the
		// server applied it leaves its jobs to the reaper (issue 15 #4), so
		// a short bound would turn a slow server into lost claims.
		ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
		claimStart := time.Now()
		claimed, err := w.q.ClaimBatch(ctx, params, slots)
		cancel()
		w.obs.Claimed(time.Since(claimStart), len(claimed), err)
		for _, job := range claimed {
			w.launch(job)
		}
		if unused := slots - len(claimed); unused > 0 {
			w.sem.Release(int64(unused))
		}
		if err == nil && len(claimed) > 0 {
			idle, failing = 0, 0
			continue
		}
		var wait time.Duration
		if err != nil {
			failing = grow(failing, 100*time.Millisecond, 5*time.Second)
			wait = failing
			w.log.Warn("claim failed; retrying", zap.Error(err), zap.Duration("retry_in", wait))
		} else {
			if failing > 0 {
				w.log.Info("claiming again: the database is reachable")
				failing = 0
			}
			idle = grow(idle, w.cfg.PollMin, w.cfg.PollMax)
			wait = jitter(idle, w.cfg.PollMax)
		}
		t := time.NewTimer(wait)
		select {
		case <-w.claimingCtx.Done():
			t.Stop()
			return
		case <-w.wake:
			idle = 0
		case <-t.C:
		}
		t.Stop()
	}
}

// gatherSlots takes, on top of the one slot held, up to ClaimBatch-1 more,
// and returns how many it holds, so that jobs that end together are
// replaced by one claim rather than one claim each. It waits for the slots
// of jobs whose handlers have returned (their outcome is being written, so
// the slot frees within a round trip) up to claimGatherMax, and for jobs
// still in their handlers only up to claimGather. With ClaimBatch 1 it
// returns 1 at once.
func (w *Worker) gatherSlots() int {
	k := min(w.cfg.ClaimBatch, w.cfg.Concurrency)
	n := 1
	for n < k && w.sem.TryAcquire(1) {
		n++
	}
	if n == k {
		return n
	}
	start := time.Now()
	tick := time.NewTicker(claimGather / 5)
	defer tick.Stop()
	for n < k {
		running, inHandler := w.runningJobs(), int(w.inHandler.Load())
		waited := time.Since(start)
		switch {
		case running == 0:
			return n
		case running > inHandler && waited < claimGatherMax:
			// Jobs are writing their outcomes: their slots come soon.
		case inHandler > 0 && waited < claimGather:
			// Jobs are in their handlers: wait a little for them.
		default:
			return n
		}
		select {
		case <-w.wake: // a job ended
		case <-tick.C:
		case <-w.claimingCtx.Done():
			return n
		}
		for n < k && w.sem.TryAcquire(1) {
			n++
		}
	}
	return n
}

// Running returns how many jobs the worker is running now.
func (w *Worker) Running() int { return w.runningJobs() }

func (w *Worker) runningJobs() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.active)
}

// grow doubles d, starting at lo and capped at hi.
func grow(d, lo, hi time.Duration) time.Duration {
	if d == 0 {
		return lo
	}
	return min(2*d, hi)
}

// jitter spreads d over ±20%, capped at hi, so idle workers do not poll in
// step.
func jitter(d, hi time.Duration) time.Duration {
	return min(time.Duration(float64(d)*(0.8+0.4*rand.Float64())), hi)
}

func (w *Worker) signalWake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// launch runs job in its own goroutine, holding a slot until it settles.
func (w *Worker) launch(job *jobs.Job) {
	r := &run{job: job, lease: queue.LeaseOf(job), expires: *job.LeaseExpiresAt}
	w.mu.Lock()
	w.active[job.ID] = r
	w.mu.Unlock()
	w.running.Add(1)
	w.inHandler.Add(1)
	go func() {
		defer w.running.Done()
		defer w.signalWake()
		defer w.sem.Release(1)
		defer func() {
			w.mu.Lock()
			delete(w.active, job.ID)
			w.mu.Unlock()
		}()
		w.execute(r)
	}()
}

// String describes the worker for logs.
func (w *Worker) String() string { return fmt.Sprintf("worker %s", w.cfg.ID) }
