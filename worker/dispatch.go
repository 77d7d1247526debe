package worker

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/google/uuid"
	"go.uber.org/zap"
)

// claimGather is how long a batch claim waits for running jobs to free more
// slots before it claims with the slots it has.
const claimGather = 50 * time.Millisecond

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
		// time leaves its jobs StartMargin of lease at least (the lease is
		// counted from before the send). A stop does not cancel it.
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
	if size == claimOne {
		return 1
	}
	return w.gatherSlots(size == claimGathered, target)
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
// can only free more before the claim's jobs are launched: only the
// dispatcher takes new slots (startTaken takes back one that an ended job
// gave up).
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
		sleep(w.sweepsCtx, wait)
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
// stops claiming. Only the dispatcher takes new slots, so the count it
// checks can only fall before it takes one, but for a startTaken taking
// back the slot its ended job gave up: the worker then holds one job over
// target until one ends.
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
