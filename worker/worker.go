package worker

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/google/uuid"
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

// claimGather is how long a batch claim waits for running jobs to free more
// slots before it claims with the slots it has.
const claimGather = 50 * time.Millisecond

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

	// Slots (see launch). held counts the jobs the worker holds from their
	// claim until their handler returns: waiting for a run slot or running.
	// Only the dispatcher adds to it, up to Concurrency and the jobs it
	// claims ahead (see Config.Prefetch). exec admits Concurrency handlers
	// at once. writing bounds the jobs whose outcomes are being written,
	// which hold neither: a slow write does not keep a slot from the next
	// job.
	held    atomic.Int64
	waiting atomic.Int64 // of held, the jobs not started yet

	// slowestClaim is the slowest of the recent claims (a time.Duration):
	// how long a command takes now, for a final write's last try.
	slowestClaim atomic.Int64
	exec         *semaphore.Weighted
	writing      *semaphore.Weighted
	handler      handlerTime // how long handlers take, to size claims ahead
	wake         chan struct{}

	drainedAt atomic.Int64 // unix nanoseconds: when a claim last found the backlog drained (noteDrained)
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
	// StuckHandlers counts handlers that did not return within
	// Config.StuckGrace of their kind's timeout, a cancel request or a lost
	// lease: the worker gave up on them (see Config.StuckGrace).
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

// dispatch claims jobs whenever a slot is free, until the worker stops.
func (w *Worker) dispatch() {
	defer close(w.dispatchDone)
	kinds := w.reg.Kinds()
	// Spread: batch claims of processes claiming at once take different
	// blocks of the best jobs rather than race for the same ones.
	params := store.ClaimParams{Owner: w.cfg.ID, Queues: w.cfg.Queues, Kinds: kinds, Lease: w.cfg.Lease, Spread: true,
		RestPollMin: w.cfg.PollMin, RestPollMax: w.cfg.PollMax}
	var idle, failing time.Duration
	var st claimStats
	for {
		target := w.holdTarget(st.cost.estimate(st.took.slowest()))
		if !w.awaitRoom(target) {
			return
		}
		room, ok := w.processRoom(&params, kinds)
		if !ok {
			continue
		}
		slots := w.fitProcessRoom(w.claimSlots(&st.sizer, room, target), room)
		// The token is made here, before the claim is sent: a claim that
		// returns an error may have been applied with its reply lost, and
		// its jobs are then found by their token and given back.
		params.Token = uuid.NewString()
		// The lease stamped is longer by as much as the deadline
		// (claimLatency.deadline) passes ClaimTimeout: a claim answered in
		// time leaves its jobs StartMargin of lease. A stop does not cancel it.
		timeout := st.took.deadline(w.cfg)
		params.Lease = w.cfg.Lease + timeout - w.cfg.ClaimTimeout()
		params.Ahead = w.claimedAhead(slots)
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		claimed, err := w.q.ClaimBatch(ctx, params, slots)
		cancel()
		w.noteClaim(&st, target, slots, claimed, sent, err)
		if err != nil {
			w.sweeps.Add(1)
			go w.sweepLostClaim(params.Token, sent, timeout, params.Lease)
		}
		started := w.launchClaimed(claimed)
		if unused := slots - started; unused > 0 {
			w.held.Add(-int64(unused))
		}
		// A claim that left a concurrency limit full waits: its own jobs'
		// finishing writes wake it (their slots are then handed to it), as
		// does any handler's return, or else its next poll. Claiming again
		// at once would find the limit full.
		if err == nil && started > 0 && !w.q.LimitFull() {
			idle, failing = 0, 0
			continue
		}
		if !w.pause(err, sent, &idle, &failing) {
			return
		}
	}
}

// claimStats is what the dispatcher learns from its claims: how many jobs
// they return (sizer), how long they take (took), and what that time is
// made of (cost).
type claimStats struct {
	sizer claimSizer
	took  claimLatency
	cost  claimCost
}

// noteClaim records a claim for slots jobs, target held, sent at sent,
// that took claimed or failed with err.
func (w *Worker) noteClaim(st *claimStats, target, slots int, claimed []*jobs.Job, sent time.Time, err error) {
	elapsed := time.Since(sent)
	st.took.observe(elapsed)
	if err == nil {
		st.cost.observe(len(claimed), elapsed)
	}
	w.logClaim(&st.cost, st.took.slowest(), target, slots, len(claimed), elapsed)
	w.slowestClaim.Store(int64(st.took.slowest()))
	waited := waitedLongest(claimed, sent)
	w.noteDrained(slots, len(claimed), waited, err) // deps.go
	st.sizer.claimed(slots, len(claimed), waited, err)
	w.obs.Claimed(time.Since(sent), len(claimed), err)
	if w.afterClaim != nil {
		w.afterClaim(claimed)
	}
}

// claimSlots takes the slots of the next claim, sized by sizer from what
// the last claims returned, with room left under the process limits and
// target jobs to hold, and returns how many it took.
func (w *Worker) claimSlots(sizer *claimSizer, room, target int) int {
	slots := 1
	size := sizer.next(min(w.cfg.ClaimBatch, room), target)
	switch {
	case size == claimGathered && (w.q.LimitFull() || room < min(w.cfg.ClaimBatch, target)):
		// A full limit (or a process limit's room), not the backlog,
		// bounds what the next claim gets: waiting for more slots to
		// free would only delay it.
		size = claimFree
	case size == claimOne && w.cfg.ClaimBatch > 1 && (w.q.UnderLimits() || w.q.UnderRates()):
		// Under a limit a claim of one job costs a read and a write,
		// as a batch does, and under a rate the starts it allows decide
		// how many it gets: claim for the slots free now.
		size = claimFree
	}
	switch size {
	case claimFree:
		slots = w.gatherSlots(false, target)
	case claimGathered:
		slots = w.gatherSlots(true, target)
	}
	return slots
}

// pause waits after a claim sent at sent that started nothing (or left a
// limit full) or returned err: a growing backoff while claims fail, an
// idle poll otherwise, cut short by a freed slot or a rate's next start.
// It returns false when the worker stops claiming.
func (w *Worker) pause(err error, sent time.Time, idle, failing *time.Duration) bool {
	var wait time.Duration
	if err != nil {
		*failing = grow(*failing, 100*time.Millisecond, 5*time.Second)
		wait = *failing
		w.log.Warn("claim failed; retrying", zap.Error(err), zap.Duration("retry_in", wait))
	} else {
		if *failing > 0 {
			w.log.Info("claiming again: the database is reachable")
			*failing = 0
		}
		*idle = grow(*idle, w.cfg.PollMin, w.cfg.PollMax)
		// A claim that found nothing on a slow server took as long as
		// the next would: polling faster than that would keep the server
		// busy with empty claims while the outcomes and renewals of the
		// jobs held wait behind them.
		wait = max(jitter(*idle, w.cfg.PollMax), time.Since(sent))
		// A rate limit that left a kind out allows its next start at a
		// known time: claim then, not a poll later.
		if next := w.q.NextRateStart(); !next.IsZero() {
			wait = min(wait, max(time.Until(next), time.Millisecond))
		}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.claimingCtx.Done():
		return false
	case <-w.wake:
		if !w.q.LimitFull() {
			*idle = 0
		} // else polls for the slots other processes free back off
	case <-t.C:
	}
	return true
}

// claimedAhead is how many of the slots taken for a claim are claimed
// ahead: beyond the run slots that the other jobs held leave free. Those
// can only free more before the claim's jobs are launched (only the
// dispatcher adds to held).
func (w *Worker) claimedAhead(slots int) int {
	others := int(w.held.Load()) - slots
	return max(slots-max(w.cfg.Concurrency-others, 0), 0)
}

// launchClaimed launches the jobs of a claim that may start, and returns
// how many. Jobs under a rate limit were claimed for the run slots free
// (ClaimParams.Ahead), and take them first, before any job of the claim
// waits for one: a rate bounds when handlers start. One that finds no run
// slot free after all (the rates read since changed) is given back
// unstarted, its attempt not counted, rather than started late.
func (w *Worker) launchClaimed(claimed []*jobs.Job) int {
	started := 0
	var later []*jobs.Job
	for _, job := range claimed {
		switch {
		case !w.q.Rated(job.Kind, job.Queue):
			later = append(later, job)
		case !w.exec.TryAcquire(1):
			w.giveBackUnstarted(job, "found no run slot free for a job claimed under a rate limit")
		case w.startable(job):
			w.launchRunning(job)
			started++
		default:
			w.exec.Release(1)
		}
	}
	for _, job := range later {
		if w.startable(job) {
			w.launch(job)
			started++
		}
	}
	return started
}

// giveBackUnstarted releases job, claimed and not started, its attempt not
// counted, saying why.
func (w *Worker) giveBackUnstarted(job *jobs.Job, why string, fields ...zap.Field) {
	log := w.log.With(job.LogFields(fields...)...)
	ctx, cancel := context.WithTimeout(context.Background(), w.bound(w.cfg.ClaimTimeout()))
	err := w.q.Release(ctx, store.LeaseOf(job))
	cancel()
	if err != nil {
		log.Warn(why+"; could not give it back: the reaper re-queues it after its lease", zap.Error(err))
		return
	}
	w.unstarted.Add(1)
	log.Warn(why + "; gave it back, attempt not counted")
}

// startable reports whether job, just claimed, has at least StartMargin of
// lease left to start its handler. When not (the claim's reply came late,
// the process stalled), it gives the job back at once, its attempt not
// counted: another worker starting it while this one's lease lapses would
// run it twice at once.
func (w *Worker) startable(job *jobs.Job) bool {
	left := time.Duration(-1)
	if job.LeaseExpiresAt != nil {
		left = time.Until(*job.LeaseExpiresAt)
	}
	margin := w.cfg.StartMargin()
	if left >= margin {
		return true
	}
	w.giveBackUnstarted(job, "claimed a job with too little lease left to start it",
		zap.Duration("lease_left", left), zap.Duration("start_margin", margin))
	return false
}

// sweepLostClaim gives back the jobs stamped with token by a claim, sent
// at sent with the given timeout and lease, that returned an error: the
// server may have applied it and lost its reply. It sweeps at once, and
// once more a claim timeout later (a claim still queued on the server has
// by then been applied, or dropped by the maxTimeMS the driver sets from
// the same deadline), retrying a failed sweep for a few leases. A stop
// makes it sweep at once and end.
func (w *Worker) sweepLostClaim(token string, sent time.Time, timeout, lease time.Duration) {
	defer w.sweeps.Done()
	log := w.log.With(zap.String("lease_token", token))
	// Past the lease the reaper may take the jobs, counting the attempt,
	// but a release is right until then and harmless after (fenced on the
	// token): keep trying a while.
	giveUp := sent.Add(max(sweepWindowLeases*lease, sweepWindowMin))
	var wait, backoff time.Duration
	for sweeps := 0; ; {
		if wait > 0 {
			sleep(w.sweepsCtx, wait)
		}
		bound := w.bound(timeout)
		if w.sweepsCtx.Err() != nil {
			bound = min(bound, stopSweepTimeout) // a stop waits for this sweep
		}
		err := w.releaseClaim(token, bound, log, "the jobs of a claim that returned an error (its reply was lost)")
		stopping := w.sweepsCtx.Err() != nil
		if err == nil {
			sweeps++
			if sweeps == 2 || stopping {
				return
			}
			wait = timeout
			continue
		}
		if stopping || time.Now().After(giveUp) {
			log.Warn("could not give back the jobs of a claim that returned an error; the reaper re-queues any after their lease, counting the attempt", zap.Error(err))
			return
		}
		backoff = grow(backoff, 100*time.Millisecond, 2*time.Second)
		wait = backoff
	}
}

// releaseClaim gives back, within timeout, the jobs that a claim whose
// reply was lost stamped with token, what naming them in the log, and
// counts them unstarted.
func (w *Worker) releaseClaim(token string, timeout time.Duration, log *zap.Logger, what string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	n, err := w.q.ReleaseClaim(ctx, token)
	cancel()
	if n > 0 {
		w.unstarted.Add(int64(n))
		log.Warn("gave back "+what+": not run, attempt not counted", zap.Int("jobs", n))
	}
	return err
}

// A lost claim's sweep is retried for sweepWindowLeases leases after the
// claim was sent, and at least sweepWindowMin.
const (
	sweepWindowLeases = 3
	sweepWindowMin    = 30 * time.Second
)

// stopSweepTimeout bounds the last sweep of a lost claim at a stop.
const stopSweepTimeout = 2 * time.Second

// awaitRoom waits until the worker holds fewer than target jobs, then
// takes one slot for the next claim. It returns false when the worker
// stops claiming. Only the dispatcher takes slots, so the count it checks
// can only fall before it takes one.
func (w *Worker) awaitRoom(target int) bool {
	for {
		if w.claimingCtx.Err() != nil {
			return false
		}
		if int(w.held.Load()) < target {
			w.held.Add(1)
			return true
		}
		select {
		case <-w.wake: // a handler returned
		case <-w.claimingCtx.Done():
			return false
		}
	}
}

// gatherSlots takes, on top of the one slot held, up to ClaimBatch-1 more
// while the worker holds fewer than target jobs, and returns how many it
// holds. With wait false it takes only the room there is now. Otherwise (a
// backlog: the last batch came back full) it also waits up to claimGather
// for handlers about to return, so that jobs that end together are
// replaced by one claim rather than one claim each. (A job's slot frees
// when its handler returns, before its outcome is written: see launch.)
func (w *Worker) gatherSlots(wait bool, target int) int {
	k := min(w.cfg.ClaimBatch, target)
	n := 1
	take := func() {
		for n < k && int(w.held.Load()) < target {
			w.held.Add(1)
			n++
		}
	}
	take()
	if n == k || !wait {
		return n
	}
	start := time.Now()
	tick := time.NewTicker(claimGather / 5)
	defer tick.Stop()
	for n < k {
		// Jobs held beside the n slots taken (in their handlers, or
		// claimed ahead and about to start) free their slots soon.
		if w.held.Load() <= int64(n) || time.Since(start) >= claimGather {
			return n
		}
		if w.onGatherWait != nil {
			w.onGatherWait()
		}
		select {
		case <-w.wake: // a handler returned
		case <-tick.C:
		case <-w.claimingCtx.Done():
			return n
		}
		take()
	}
	return n
}

// holdTarget is how many jobs the worker holds at most before its next
// claim, when its claims cost as e says: Concurrency, and the jobs its
// slots run while a claim is on its way (claimFit.ahead), up to the
// prefetch limit, and while e.explore up to Concurrency or twice the
// largest recent batch claim (see claimCost.estimate).
func (w *Worker) holdTarget(e claimEstimate) int {
	c, most := w.cfg.Concurrency, w.cfg.prefetchMax()
	if e.explore {
		most = min(most, max(c, 2*e.largest))
	}
	return c + e.fit.ahead(c, w.handler.mean(), most)
}

// handlerTime is a moving average of how long handlers run.
type handlerTime struct {
	mu  sync.Mutex
	avg time.Duration // zero until a handler has returned
}

// handlerTimeWeight is how much of the average the latest handler makes.
const handlerTimeWeight = 0.125

func (h *handlerTime) observe(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d = max(d, time.Microsecond) // a handler that returned at once still took a slot
	if h.avg == 0 {
		h.avg = d
		return
	}
	h.avg += time.Duration(handlerTimeWeight * float64(d-h.avg))
}

func (h *handlerTime) mean() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.avg
}

// claimLatency remembers how long the last claims took, so that the next
// one's deadline follows the server rather than a fixed bound: a server
// slow for minutes (an overloaded primary, an index build, a big scan)
// answers claims in seconds, and a claim given up while the server still
// works on it is wasted twice: its reply, and the sweep that gives back
// what it stamped. A claim that timed out counts as taking its whole
// deadline. It is the dispatch goroutine's alone.
type claimLatency struct {
	recent [claimLatencySamples]time.Duration // zero until a claim fills it
	next   int
}

// claimLatencySamples is how many of the last claims set the deadline,
// claimLatencyFactor how many times the slowest of them it is at least,
// and claimStretchLeases how many leases past ClaimTimeout it may reach.
const (
	claimLatencySamples = 8
	claimLatencyFactor  = 3
	claimStretchLeases  = 2
)

// slowest is the longest of the recent claims.
func (l *claimLatency) slowest() time.Duration { return slices.Max(l.recent[:]) }

func (l *claimLatency) observe(d time.Duration) {
	l.recent[l.next] = d
	l.next = (l.next + 1) % len(l.recent)
}

// deadline is the timeout of the next claim of a worker configured as c:
// ClaimTimeout, or claimLatencyFactor times the slowest recent claim when
// that is longer, up to claimStretchLeases leases more; that most for the
// first claim, when how slow the server is (connections included) is not
// known yet. A job's first renewal comes a heartbeat interval after its
// claim whatever lease it stamped (Worker.heartbeat), so a stretched lease
// outlives its worker only if the worker dies within that interval.
func (l *claimLatency) deadline(c Config) time.Duration {
	base := c.ClaimTimeout()
	most := base + claimStretchLeases*c.Lease
	slowest := l.slowest()
	if slowest == 0 { // no claim yet
		return most
	}
	return min(max(base, claimLatencyFactor*slowest), most)
}

// claimSize is how the dispatcher sizes its next claim.
type claimSize int

const (
	// claimOne: one job with one findAndModify, at once. No backlog is
	// known: the last claims found nothing, or less than they asked for.
	claimOne claimSize = iota
	// claimFree: a batch of the slots free now, without waiting for more.
	// A backlog is likely: single claims in a row each found their job.
	claimFree
	// claimGathered: a batch of the free slots and of those about to free
	// (see gatherSlots). A backlog: the last batch came back at least half
	// full.
	claimGathered
)

// singleHitsForBatch is how many single claims in a row must each find
// their job before the dispatcher claims a batch: a steady trickle of jobs
// into fast claims makes several in a row often, and a batch that finds
// only one job costs two commands where a single claim costs one. Each
// batch that finds one job or none doubles it, up to maxHitsForBatch,
// until a batch comes back full.
//
// A backlog shows sooner in how long the jobs claimed had been runnable:
// backlogHits single claims in a row whose jobs had each waited
// backlogWait or longer make a batch at once. A trickle's job is claimed
// within a round trip or two of being enqueued, unless it came during an
// idle spell (polls back off to PollMax): two jobs that came in one spell
// make a false alarm, which costs one batch that comes back short.
const (
	singleHitsForBatch = 8
	maxHitsForBatch    = 32
	backlogHits        = 2
	backlogWait        = 200 * time.Millisecond
)

// claimSizer sizes claims from what the last ones returned: one job while
// they come back short (a trickle, an idle queue), batches while they come
// back full (a backlog). It is the dispatch goroutine's alone.
type claimSizer struct {
	size   claimSize
	hits   int // single claims in a row that found their job
	queued int // of them, the last in a row whose job had waited backlogWait
	need   int // hits that make a batch: singleHitsForBatch, or more after batches that found little
}

// next returns the size of the next claim for a worker of the given claim
// batch and concurrency.
func (s *claimSizer) next(batch, concurrency int) claimSize {
	if min(batch, concurrency) <= 1 {
		return claimOne
	}
	return s.size
}

// claimed takes in what a claim that asked for asked jobs returned, and
// the longest any of them had been runnable. A batch that came back short
// but with more than one job keeps batching: other workers may have taken
// part of its candidates while a backlog remains; the next batch tells.
func (s *claimSizer) claimed(asked, got int, waited time.Duration, err error) {
	if s.need == 0 {
		s.need = singleHitsForBatch
	}
	switch {
	case err == nil && asked > 1 && got <= 1:
		// A batch for a trickle: batch less eagerly.
		s.size, s.hits, s.queued, s.need = claimOne, 0, 0, min(2*s.need, maxHitsForBatch)
	case err != nil || got == 0 || (got < asked && got == 1):
		s.size, s.hits, s.queued = claimOne, 0, 0
	case got < asked && 2*got >= asked:
		// Others took part of the candidates while a backlog remains: the
		// slots about to free are worth a round trip's wait, where a batch
		// of the few free now costs as much as a full one.
		s.size = claimGathered
	case got < asked:
		// Little is left: claim with the slots free now, without waiting.
		s.size = claimFree
	case asked > 1:
		s.size, s.need = claimGathered, singleHitsForBatch
	default:
		s.hits++
		if waited >= backlogWait {
			s.queued++
		} else {
			s.queued = 0
		}
		if s.hits >= s.need || s.queued >= backlogHits {
			s.size = claimFree
		}
	}
}

// waitedLongest is the longest that any of the jobs claimed at sent had
// been runnable.
func waitedLongest(claimed []*jobs.Job, sent time.Time) time.Duration {
	var longest time.Duration
	for _, j := range claimed {
		longest = max(longest, sent.Sub(j.RunAt))
	}
	return longest
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
