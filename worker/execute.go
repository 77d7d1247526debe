package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
)

// run is one claimed job while this worker holds it.
type run struct {
	job      *jobs.Job
	lease    store.Lease
	progress progressBox // what the handler reports (jobs.Progress), for the renewals

	mu      sync.Mutex
	expires time.Time // the lease's expiry as last renewed
	lost    bool      // a fenced write matched nothing
	settled bool      // the final write was made or handed off

	// The job's slots (see Worker.launch), its goroutine's alone.
	executing bool // holds a run slot
	freed     bool // its held slot was given up (freeSlots)
	writing   bool // holds a writing slot
	handedOn  bool // its run slots went to a successor it started (handoff.go)
	// dependents: its end leaves the dispatcher's wake to the settle of
	// its dependents (Worker.settleWakes).
	dependents bool
	// written is the job as its completion left it, when that write
	// returned it (a job with dependents: completeWrite), for their settle.
	written bson.Raw
}

// settle claims the right to make the job's final write; only the first
// caller gets it.
func (r *run) settle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled {
		return false
	}
	r.settled = true
	return true
}

func (r *run) leaseExpiry() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.expires
}

// isLost reports whether a fenced write of the job matched nothing.
func (r *run) isLost() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lost
}

// execute runs one attempt of r's job and records its outcome.
func (w *Worker) execute(r *run) {
	a := &attempt{r: r, log: w.log.With(r.job.LogFields()...)}
	jobCtx, cancel := context.WithCancelCause(w.jobsCtx)
	defer cancel(nil)
	// The lease is renewed from the claim on, while the job waits for a
	// run slot too.
	stopHeartbeat := w.heartbeat(r, cancel, a.log)
	if !w.startSlot(jobCtx, r) {
		stopHeartbeat()
		w.notStarted(r, context.Cause(jobCtx), a.log)
		return
	}
	w.obs.Started(r.job)
	defer w.readAhead(r)() // handoff.go
	defer func() {
		w.obs.Finished(r.progress.ended(endedJob(r.job, a.observed, a.failure, a.again)), a.observed, a.elapsed)
	}()
	result, start, returned := w.runHandler(jobCtx, a)
	stopHeartbeat()
	if !returned {
		w.giveUp(a, start, result)
		return
	}
	if w.writesNothing(a) {
		return
	}
	w.record(a, w.outcomeWrite(a))
}

// attempt is what execute learns of one attempt as it goes, and reports.
type attempt struct {
	r      *run
	log    *zap.Logger
	opts   jobs.KindOptions
	err    error // the handler's
	cause  error // why the handler's context ended, if it did
	marked atomic.Bool
	set    jobs.ResultSlot // what the handler sets (jobs.SetResult)

	elapsed  time.Duration
	observed Outcome
	outcome  string    // as logged
	failure  string    // the error recorded for a failed attempt
	again    time.Time // when a retried or snoozed job runs again
}

// runHandler runs the handler of a's job under ctx, with its kind's
// timeout, and waits for it (await). The slots go to the next jobs as soon
// as it returns, before the wait for a renewal in flight and the outcome's
// write. returned is false when it did not return in time.
func (w *Worker) runHandler(ctx context.Context, a *attempt) (result chan error, start time.Time, returned bool) {
	job := a.r.job
	h, opts, ok := w.reg.Lookup(job.Kind)
	if !ok { // cannot happen: claims only match registered kinds
		h = jobs.HandlerFunc(func(context.Context, *jobs.Job) error {
			return jobs.Permanent(fmt.Errorf("no handler for kind %q", job.Kind))
		})
		opts.Timeout = jobs.DefaultTimeout
	}
	a.opts = opts
	h = jobs.Wrap(h, w.cfg.Middleware...)
	// A job the handler enqueues to run after this one marks it (queue's
	// WithRunningJob): its dependents are then settled right after its
	// finishing write, as those it had when claimed.
	ctx, cancelTimeout := context.WithTimeoutCause(jobs.WithResultSlot(queue.WithRunningJob(ctx, job.ID, &a.marked), &a.set), opts.Timeout, ErrTimeout)
	ctx = jobs.WithProgressReporter(ctx, w.reportProgress(a.r))
	defer cancelTimeout()

	a.log.Info("job started")
	start = time.Now()
	result = make(chan error, 1)
	go func() { result <- w.call(ctx, h, job, a.log) }()
	a.err, returned = w.await(ctx, result)
	a.elapsed = time.Since(start)
	w.handler.observe(a.elapsed)
	w.freeSlots(a.r)
	a.cause = context.Cause(ctx)
	return result, start, returned
}

// writesNothing reports whether the attempt ended without its lease: lost
// to another worker or the reaper, or released at shutdown.
func (w *Worker) writesNothing(a *attempt) bool {
	if a.r.isLost() {
		a.observed = OutcomeLeaseLost
		a.log.Warn("job ended after its lease was lost; writing nothing",
			zap.Duration("duration", a.elapsed), zap.NamedError("handler_error", a.err))
		return true
	}
	if !a.r.settle() {
		a.observed = OutcomeReleased
		a.log.Warn("job ended after its lease was released at shutdown; writing nothing", zap.Duration("duration", a.elapsed))
		return true
	}
	return false
}

// outcomeWrite returns the write that records the attempt's outcome, from
// the handler's error and why its context ended; it sets what execute
// reports of the outcome.
func (w *Worker) outcomeWrite(a *attempt) func(context.Context) error {
	r, job, err, cause := a.r, a.r.job, a.err, a.cause
	var snooze *jobs.SnoozeError
	var cancelled *jobs.CancelError
	switch {
	case err == nil:
		a.outcome, a.observed = "succeeded", OutcomeSucceeded
		return w.completeWrite(r, a.set.Result) // handoff.go
	case errors.As(err, &cancelled):
		// The handler's own decision, whatever ended its context.
		a.outcome, a.observed = "cancelled by its handler", OutcomeCancelled
		a.failure = cancelled.Error()
		return func(ctx context.Context) error { return w.q.Cancelled(ctx, r.lease, job, cancelled.Error()) }
	case errors.As(err, &snooze) && !errors.Is(cause, jobs.ErrCancelled):
		// At shutdown too: a snooze gives the job back as a release does.
		return func(ctx context.Context) error {
			state, runAt, serr := w.q.Snooze(ctx, r.lease, job, snooze.Duration)
			a.outcome, a.observed, a.again = "snoozed for "+snooze.Duration.String(), OutcomeSnoozed, runAt
			if state == jobs.StateCancelled {
				a.outcome, a.observed = "cancelled (requested while it ran) instead of snoozed", OutcomeCancelled
			}
			return serr
		}
	case errors.Is(cause, ErrShutdown):
		a.outcome, a.observed = "released", OutcomeReleased
		return func(ctx context.Context) error { return w.q.Release(ctx, r.lease) }
	case errors.Is(cause, jobs.ErrCancelled):
		a.outcome, a.observed = "cancelled", OutcomeCancelled
		return func(ctx context.Context) error {
			return w.q.Cancelled(ctx, r.lease, job, fmt.Sprintf("cancelled while running: %v", err))
		}
	}
	if errors.Is(cause, ErrTimeout) {
		err = fmt.Errorf("timed out after %s: %w", a.opts.Timeout, err)
		a.err = err
	}
	return w.failWrite(a, err)
}

// failWrite returns the write that records a's failure with err; it sets
// what execute reports of the outcome.
func (w *Worker) failWrite(a *attempt, err error) func(context.Context) error {
	a.failure = err.Error()
	return func(ctx context.Context) error {
		f, ferr := w.q.Fail(ctx, a.r.lease, a.r.job, err)
		a.outcome, a.observed, a.again = "failed, "+string(f.State), failOutcome(f.State), f.RunAt
		if f.State == jobs.StateAvailable {
			a.outcome += " again at " + f.RunAt.Format(time.RFC3339Nano)
		}
		return ferr
	}
}

// record writes the attempt's outcome with write (persist), logs what
// became of it, and settles the job's dependents once it is written.
func (w *Worker) record(a *attempt, write func(context.Context) error) {
	job := a.r.job
	werr := w.persist(a.r, write, a.log)
	if werr == nil {
		w.q.RunEnded(job.ID) // its run slots, if any, go to the next claim
	}
	fields := []zap.Field{zap.Duration("duration", a.elapsed), zap.String("outcome", a.outcome)}
	if a.err != nil {
		fields = append(fields, zap.NamedError("handler_error", a.err))
	}
	switch {
	case werr == nil:
		a.log.Info("job finished", fields...)
		if (job.Dependents || a.marked.Load()) && !w.runNext(a.r) {
			a.r.dependents = w.settleDependents(job.ID, a.r.written) && w.settleWakes(true)
		}
	case errors.Is(werr, jobs.ErrLeaseLost):
		a.observed = OutcomeLeaseLost
		w.obs.LeaseLost(job)
		a.log.Warn("job finished but its lease was lost; wrote nothing", append(fields, zap.Error(werr))...)
	case errors.Is(werr, queue.ErrOutcomeUnknown):
		// The write may have been applied: only reading it back failed.
		a.observed = OutcomeUnrecorded
		a.log.Error("job finished but whether its outcome was recorded is not known (reading it back failed until the lease expired); if it was not, the reaper re-queues the job",
			append(fields, zap.Error(werr))...)
	default:
		a.observed = OutcomeUnrecorded
		a.log.Error("job finished but its outcome could not be recorded before the lease expired; the reaper will re-queue it",
			append(fields, zap.Error(werr))...)
	}
}

// await waits for the handler's result. Once the handler's context ends
// for any cause but a shutdown (which Stop handles), it waits
// Config.StuckGrace more, then reports that the handler did not return.
func (w *Worker) await(ctx context.Context, result <-chan error) (err error, returned bool) {
	done := ctx.Done()
	var grace <-chan time.Time
	for {
		select {
		case err := <-result:
			return err, true
		case <-done:
			done = nil
			if !errors.Is(context.Cause(ctx), ErrShutdown) {
				t := time.NewTimer(w.cfg.StuckGrace)
				defer t.Stop()
				grace = t.C
			}
		case <-grace:
			return nil, false
		}
	}
}

// giveUp ends a's attempt, whose handler ignored its context (ended by
// a.cause) for Config.StuckGrace, as that field says: the heartbeat has
// stopped, the outcome is recorded fenced on the lease, the slot is freed
// when execute returns, and the handler's goroutine is left running (the
// job may then run elsewhere beside it: handlers are safe to run beside a
// stalled attempt, docs/CONCEPTS.md). It sets what execute reports.
func (w *Worker) giveUp(a *attempt, start time.Time, result <-chan error) {
	r, log, grace := a.r, a.log, w.cfg.StuckGrace
	w.stuck.Add(1)
	elapsed := time.Since(start)
	go func() {
		<-result
		log.Warn("a handler given up on as stuck has returned; its result is discarded", zap.Duration("duration", time.Since(start)))
	}()
	reason := "lease lost"
	switch {
	case errors.Is(a.cause, ErrTimeout):
		reason = "timeout"
	case errors.Is(a.cause, jobs.ErrCancelled):
		reason = "cancel requested"
	}
	log.Error("stuck handler: it did not return within its grace after its context ended; the worker gives up on it, frees its slot and leaves its goroutine running",
		zap.String("reason", reason), zap.Duration("running_for", elapsed), zap.Duration("timeout", a.opts.Timeout), zap.Duration("grace", grace))
	switch {
	case r.isLost() || reason == "lease lost":
		a.observed = OutcomeLeaseLost // another holder or the reaper has the job
		return
	case !r.settle():
		a.observed = OutcomeReleased // released at shutdown
		return
	}
	a.outcome, a.observed = "cancelled", OutcomeCancelled
	write := func(ctx context.Context) error {
		return w.q.Cancelled(ctx, r.lease, r.job, fmt.Sprintf("cancelled while running: the handler did not return within %s of the cancel request", grace))
	}
	if reason == "timeout" {
		write = w.failWrite(a, fmt.Errorf("handler did not return within timeout+grace (%s + %s)", a.opts.Timeout, grace))
	}
	if err := w.persist(r, write, log); err != nil {
		a.observed, a.again = OutcomeUnrecorded, time.Time{}
		if errors.Is(err, jobs.ErrLeaseLost) {
			w.obs.LeaseLost(r.job)
			a.observed = OutcomeLeaseLost
			return
		}
		log.Warn("could not record the outcome of a stuck handler's job; the reaper re-queues it after its lease", zap.Error(err))
		return
	}
	log.Info("job finished", zap.Duration("duration", elapsed), zap.String("outcome", a.outcome+" (stuck handler)"))
}

// notStarted ends the hold of r's job, claimed ahead, whose handler did
// not start (see startSlot), for cause (the job context's): its lease
// lost, nothing is written; a cancel request, it is recorded cancelled;
// otherwise (the worker stops, or the lease ran short while renewals
// failed) it is given back, its attempt not counted.
func (w *Worker) notStarted(r *run, cause error, log *zap.Logger) {
	w.freeSlots(r)
	if r.isLost() {
		log.Warn("a job claimed ahead lost its lease before it started; writing nothing")
		return
	}
	if !r.settle() {
		return
	}
	cancelled := errors.Is(cause, jobs.ErrCancelled)
	write, failed, done := func(ctx context.Context) error { return w.q.Release(ctx, r.lease) },
		"could not give back a job claimed ahead and not started", "gave back a job claimed ahead and not started, attempt not counted"
	if cancelled {
		write = func(ctx context.Context) error {
			return w.q.Cancelled(ctx, r.lease, r.job, "cancelled before it started")
		}
		failed, done = "could not record the cancel of a job claimed ahead", "job cancelled before it started"
	}
	if err := w.persist(r, write, log); err != nil {
		log.Warn(failed+"; the reaper re-queues it after its lease", zap.Error(err))
		return
	}
	if !cancelled {
		w.unstarted.Add(1)
	}
	log.Info(done)
}

// call runs the handler, turning a panic into the attempt's error.
func (w *Worker) call(ctx context.Context, h jobs.Handler, job *jobs.Job, log *zap.Logger) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
			log.Error("handler panicked", zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
		}
	}()
	return h.Work(ctx, job)
}

// persist makes the job's final write, retrying transient failures (the
// database away) until the lease would have expired: after that another
// worker may hold the job, and the fenced write could only fail.
func (w *Worker) persist(r *run, write func(context.Context) error, log *zap.Logger) error {
	var backoff time.Duration
	lastTry := false
	for {
		remaining := time.Until(r.leaseExpiry())
		if remaining <= 0 {
			// One last try: the job may still be ours. It gets the time a
			// command takes now (twice the slowest recent claim): with
			// less, on a slow server, the driver does not even send it.
			remaining = max(time.Second, 2*time.Duration(w.slowestClaim.Load()))
		}
		// The write may take as long as the lease still holds: a slow server
		// is not a lost lease, and a write given up while the server still
		// works on it costs a retry and a read-back.
		ctx, cancel := context.WithTimeout(context.Background(), w.bound(remaining))
		ctx, carried := r.progress.carry(ctx) // progress.go
		err := write(ctx)
		cancel()
		if err == nil {
			carried()
		}
		if err == nil || errors.Is(err, jobs.ErrLeaseLost) {
			return err
		}
		backoff = grow(backoff, 100*time.Millisecond, 2*time.Second)
		if time.Now().Add(backoff).After(r.leaseExpiry()) {
			if lastTry {
				return err
			}
			// One last try at once: an earlier try may have been applied
			// with its reply lost, and the write then finds its fence gone
			// and reads the job back, so the outcome is reported as it is.
			lastTry = true
			continue
		}
		log.Warn("recording the job's outcome failed; retrying", zap.Error(err), zap.Duration("retry_in", backoff))
		time.Sleep(backoff)
	}
}
