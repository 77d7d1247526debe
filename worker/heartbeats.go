package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"go.uber.org/zap"
)

// heartbeater renews the leases of a worker's running jobs together: one
// queue.HeartbeatMany (one updateMany in the usual case) per heartbeat
// interval for all of them, rather than one findAndModify per job.
//
// Each job keeps its own schedule: its first renewal is due one interval
// after its lease was written (at once after a slow claim), the next ones
// an interval after the renewal before was sent. When the earliest falls
// due, every job due within the next interval joins the batch, renewed a
// little early: after one batch the jobs of a worker form one cohort, and
// a job claimed since joins the cohort's next batch. A job that falls due
// while a batch it is not in is in flight gets a batch of its own at once:
// a slow batch delays only its own jobs.
//
// The zero value is ready; a goroutine runs while there are jobs to renew.
type heartbeater struct {
	mu      sync.Mutex
	beats   map[*run]*beat
	wake    chan struct{}
	running bool
	failing int // batches failed in a row, for logs
}

// beat is one running job in the heartbeater.
type beat struct {
	r      *run
	cancel context.CancelCauseFunc
	log    *zap.Logger
	due    time.Time  // its next renewal
	batch  *beatBatch // the batch renewing it now; nil between
	told   bool       // its cancel request was passed on
	warned bool       // its expiry without renewal was logged
}

// beatBatch is one HeartbeatMany in flight; done closes once its results
// were applied.
type beatBatch struct{ done chan struct{} }

// heartbeat renews r's lease every heartbeat interval, with the leases of
// the worker's other jobs, until the returned stop is called. It cancels
// the job's context when the lease is lost, when it expires unrenewed, or
// when someone cancels the job. stop waits for a renewal of r in flight,
// so that r.lost is final once it returns.
func (w *Worker) heartbeat(r *run, cancel context.CancelCauseFunc, log *zap.Logger) (stop func()) {
	h := &w.beats
	// The first renewal comes one interval after the lease was written
	// (the claim was sent), not after the handler started, so that a live
	// lease always has about lease − interval left (the clock skew a reaper
	// needs to steal it is lease − interval + grace). A claim on a slow
	// server stamps a longer lease (claimLatency): the first renewal still
	// comes an interval after the claim, and brings it back to Config.Lease.
	due := r.leaseExpiry().Add(-(w.cfg.Lease - w.cfg.HeartbeatInterval))
	if hb := r.job.HeartbeatAt; hb != nil && hb.Add(w.cfg.HeartbeatInterval).Before(due) {
		due = hb.Add(w.cfg.HeartbeatInterval)
	}
	b := &beat{r: r, cancel: cancel, log: log, due: due}
	h.mu.Lock()
	if w.jobsCtx.Err() != nil { // stopping: leases are no longer renewed
		h.mu.Unlock()
		return func() {}
	}
	if h.beats == nil {
		h.beats = map[*run]*beat{}
		h.wake = make(chan struct{}, 1)
	}
	h.beats[r] = b
	start := !h.running
	h.running = true
	h.mu.Unlock()
	if start {
		go w.beatLoop()
	} else {
		poke(h.wake)
	}
	return func() {
		h.mu.Lock()
		delete(h.beats, r)
		inFlight := b.batch
		h.mu.Unlock()
		if inFlight != nil {
			<-inFlight.done
		}
	}
}

// beatLoop sends a batch whenever a job's renewal falls due, until no job
// is left or the worker cancels its jobs.
func (w *Worker) beatLoop() {
	h := &w.beats
	interval := w.cfg.HeartbeatInterval
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		h.mu.Lock()
		if len(h.beats) == 0 || w.jobsCtx.Err() != nil {
			h.running = false
			h.mu.Unlock()
			return
		}
		now := time.Now()
		var next time.Time
		for _, b := range h.beats {
			if b.batch == nil && (next.IsZero() || b.due.Before(next)) {
				next = b.due
			}
		}
		var batch []*beat
		var bb *beatBatch
		if !next.IsZero() && !next.After(now) {
			bb = &beatBatch{done: make(chan struct{})}
			for _, b := range h.beats {
				if b.batch == nil && !b.due.After(now.Add(interval)) {
					b.batch = bb
					batch = append(batch, b)
				}
			}
		}
		h.mu.Unlock()
		if len(batch) > 0 {
			go w.renew(bb, batch)
			continue
		}
		wait := time.Hour // every job is in a batch in flight: it wakes us
		if !next.IsZero() {
			wait = next.Sub(now)
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-h.wake:
		case <-w.jobsCtx.Done():
		}
	}
}

// renew sends one batch and applies what it learned to each of its jobs.
func (w *Worker) renew(bb *beatBatch, batch []*beat) {
	h := &w.beats
	defer poke(h.wake)
	defer close(bb.done)
	sent := time.Now()
	var failed error
	// In commands of at most beatCommand jobs, each with its own timeout:
	// an updateMany writes each document on its own, and on a loaded server
	// (~15 ms a document) one command for hundreds of jobs would outlast
	// the write timeout and renew none of them.
	for start := 0; start < len(batch); start += beatCommand {
		part := batch[start:min(start+beatCommand, len(batch))]
		if err := w.renewPart(part); err != nil && failed == nil {
			failed = err
		}
	}
	// Only now may the jobs join another batch, and a stop of one of them
	// (which waits for the batch it is in) return.
	h.mu.Lock()
	for _, b := range batch {
		b.batch = nil
		b.due = sent.Add(w.cfg.HeartbeatInterval)
	}
	h.mu.Unlock()

	// While the database is away every batch fails: say so once, and once
	// more when a batch gets through, rather than at every interval.
	if w.jobsCtx.Err() != nil {
		return // stopping: the shutdown cancelled the renewal
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case failed != nil:
		if h.failing == 0 {
			w.log.Warn("heartbeat failed; retrying every heartbeat until the lease expires",
				zap.Error(failed), zap.Int("jobs", len(batch)))
		}
		h.failing++
	case h.failing > 0:
		w.log.Info("heartbeat renewed the lease again", zap.Int("failed_heartbeats", h.failing), zap.Int("jobs", len(batch)))
		h.failing = 0
	}
}

// beatCommand is how many jobs' leases one renewal command carries at
// most: 500 running jobs cost 5 commands an interval.
const beatCommand = 100

// renewPart renews the leases of part with one queue.HeartbeatMany and
// applies what it learned to each job. It returns the first error other
// than a lost lease.
func (w *Worker) renewPart(part []*beat) error {
	leases := make([]store.Lease, len(part))
	earliest := part[0].r.leaseExpiry()
	for i, b := range part {
		leases[i] = b.r.lease
		if e := b.r.leaseExpiry(); e.Before(earliest) {
			earliest = e
		}
	}
	// A renewal may take until the first of its leases would expire: a
	// slow server is not a lost lease.
	ctx, cancel := context.WithTimeout(w.jobsCtx, w.bound(max(time.Until(earliest), w.cfg.HeartbeatInterval)))
	progress, seqs := pendingProgress(part) // written with the renewal, fenced as it is
	got, err := w.q.HeartbeatMany(ctx, leases, progress, w.cfg.Lease)
	cancel()
	failed := err
	for _, b := range part {
		beat := store.Beat{Err: err}
		if err == nil {
			var ok bool
			if beat, ok = got[b.r.lease]; !ok {
				beat.Err = errors.New("worker: the batched heartbeat returned nothing for the job")
			}
		}
		if beat.Err != nil && !errors.Is(beat.Err, jobs.ErrLeaseLost) && failed == nil {
			failed = beat.Err
		}
		if seq, ok := seqs[b]; ok && beat.Err == nil {
			w.progressWritten(b, progress[b.r.lease], seq)
		} else if ok && !errors.Is(beat.Err, jobs.ErrLeaseLost) {
			b.r.progress.mayLandLate()
		}
		w.applyBeat(b, beat)
	}
	return failed
}

// applyBeat passes on to b's job what its renewal learned.
func (w *Worker) applyBeat(b *beat, beat store.Beat) {
	r := b.r
	w.obs.Heartbeat(r.job, beat.Err)
	switch {
	case errors.Is(beat.Err, jobs.ErrLeaseLost):
		w.obs.LeaseLost(r.job)
		r.mu.Lock()
		r.lost = true
		r.mu.Unlock()
		w.beats.mu.Lock()
		delete(w.beats.beats, r) // nothing more to renew
		w.beats.mu.Unlock()
		b.log.Warn("lease lost: another worker or the reaper took the job; cancelling the handler")
		b.cancel(jobs.ErrLeaseLost)
	case beat.Err != nil:
		if time.Now().After(r.leaseExpiry()) && !b.warned {
			b.warned = true
			b.log.Warn("lease expired without renewal; cancelling the handler", zap.Error(beat.Err))
			b.cancel(jobs.ErrLeaseLost)
		}
	default:
		r.mu.Lock()
		r.expires = beat.ExpiresAt
		r.mu.Unlock()
		if beat.CancelRequested && !b.told {
			b.told = true
			b.log.Info("job cancel requested; cancelling the handler")
			b.cancel(jobs.ErrCancelled)
		}
	}
}
