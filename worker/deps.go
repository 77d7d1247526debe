package worker

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"

	"go.uber.org/zap"
)

// settleQueue gathers the finished jobs whose dependents are to be told of
// their outcomes. One goroutine per worker (settleLoop, started with the
// first) tells them, so that the jobs finished while one settle runs are
// settled together by the next (queue.Client.SettleDependentsOfAll): one
// settle's commands for all of them. A finished job only adds itself: its
// goroutine, and the slots it holds, never wait for a settle.
type settleQueue struct {
	mu      sync.Mutex
	pending []string
	written []bson.Raw    // of some of pending: as their completion left them
	marks   []bson.Raw    // jobs whose one dependent runNext took, to mark settled together (markBatch)
	started bool          // settleLoop runs, or ran: the worker stopped
	stopped bool          // the worker stopped: what is left is the leader's
	kick    chan struct{} // makes settleLoop take what is pending
	cancel  context.CancelFunc
	done    chan struct{} // closed once settleLoop returns
}

// markBatch and markLinger pace the marks of a chain's tasks settled
// (settleQueue.marks): one command for up to markBatch of them, the first
// waiting markLinger at most. Until then each stays due, which only the
// leader's pass reads.
const (
	markBatch  = 32
	markLinger = 100 * time.Millisecond
)

// settleDependents has the jobs that wait for the job with id, which this
// worker just finished, told of its outcome, so that the next of a chain
// runs now rather than at the leader's next pass; it returns at once.
// Should this worker stop or fail before they are told, the finishing
// write has left the outcome due (its flag is cleared by the settle's last
// write) and the leader's pass tells them (queue/deps.go). It reports
// whether the settle is queued: it then wakes the dispatcher once done.
func (w *Worker) settleDependents(id string, written bson.Raw) bool {
	s := &w.settles
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	s.pending = append(s.pending, id)
	if written != nil {
		s.written = append(s.written, written)
	}
	w.startSettles()
	poke(s.kick)
	return true
}

// markSettled has the job written (as its completion left it), whose one
// dependent runNext took, marked settled with others (markBatch,
// markLinger). Should this worker stop first, the job is left due: the
// leader's pass settles it, finding nothing to release.
func (w *Worker) markSettled(written bson.Raw) {
	s := &w.settles
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.marks = append(s.marks, written)
	w.startSettles()
	switch len(s.marks) {
	case 1:
		time.AfterFunc(markLinger, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			poke(s.kick)
		})
	case markBatch:
		poke(s.kick)
	}
}

// startSettles starts settleLoop, once; s.mu is held.
func (w *Worker) startSettles() {
	s := &w.settles
	if s.started {
		return
	}
	s.started = true
	s.kick = make(chan struct{}, 1)
	s.done = make(chan struct{})
	var ctx context.Context
	ctx, s.cancel = context.WithCancel(context.Background())
	go w.settleLoop(ctx)
}

// settleWakes reports whether the end of a job (with dependents, or not)
// leaves the wake of the dispatcher to the settle of its dependents, which
// wakes it once they are released: when a claim found the backlog drained
// less than drainedFor ago (a chain's next task is then the one job to
// claim, and a claim at the handler's return could only find it still
// blocked). With a backlog, the end of a job wakes the claim of the next
// at once.
func (w *Worker) settleWakes(dependents bool) bool {
	at := w.drainedAt.Load()
	return dependents && at != 0 && time.Since(time.Unix(0, at)) < drainedFor
}

// drainedFor is how long a claim's news that the backlog is drained
// holds: jobs may be enqueued meanwhile, and a claim that asks for one job
// and takes it tells nothing of what is left, so past it the end of a job
// with dependents wakes the claim of the next at once again.
const drainedFor = time.Second

// noteDrained records whether a claim for slots jobs that took n (or
// failed with err) found the backlog drained; a job that had waited
// backlogWait since it was due tells of a backlog.
func (w *Worker) noteDrained(slots, n int, waited time.Duration, err error) {
	switch {
	case err != nil || (n > 0 && waited >= backlogWait):
		w.drainedAt.Store(0)
	case slots > 1 || n == 0:
		var at int64
		if n < slots {
			at = time.Now().UnixNano()
		}
		w.drainedAt.Store(at)
	}
}

// settleLoop settles what is pending, batch after batch, until ctx ends.
// After a settle of parents that share their dependents (a fan-in's
// sink, rewritten by every settle), it lets the jobs finished meanwhile
// gather for settlePace times as long as the settle took (up to
// settlePaceMax) before the next: the shared dependent is rewritten a few
// times less often, its last parents settled that much later at most.
func (w *Worker) settleLoop(ctx context.Context) {
	s := &w.settles
	defer close(s.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		}
		for ids, written := s.take(); len(ids) > 0 && ctx.Err() == nil; ids, written = s.take() {
			start := time.Now()
			rep := w.settleBatch(ctx, ids, written)
			w.markBatch(ctx, s.takeMarks())
			if shared(rep) {
				sleep(ctx, min(settlePace*time.Since(start), settlePaceMax))
			}
		}
		w.markBatch(ctx, s.takeMarks())
	}
}

// shared reports whether the parents a settle settled together share their
// dependents, four parents or more to each (a fan-in's sink): each such
// settle rewrites the shared dependent, so settling more parents at a time
// costs fewer of those writes.
func shared(r queue.SettleReport) bool { return r.Dependents > 0 && 4*r.Dependents <= r.Parents }

// settlePace and settlePaceMax size the wait between two settles of
// parents that share their dependents (settleLoop): settlePace times the
// last settle's time, at most settlePaceMax.
const (
	settlePace    = 6
	settlePaceMax = 400 * time.Millisecond
)

// takeMarks returns the marks pending, and empties them.
func (s *settleQueue) takeMarks() []bson.Raw {
	s.mu.Lock()
	defer s.mu.Unlock()
	marks := s.marks
	s.marks = nil
	return marks
}

// markBatch marks the jobs of marks settled, in one command (queue's
// MarkSettled); a failure leaves them due for the leader's pass.
func (w *Worker) markBatch(ctx context.Context, marks []bson.Raw) {
	if len(marks) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, w.bound(w.cfg.ClaimTimeout()))
	defer cancel()
	if err := w.c.MarkSettled(ctx, marks...); err != nil && ctx.Err() == nil {
		w.log.Warn("marking finished jobs' dependents settled failed; the leader's pass does it", zap.Int("jobs", len(marks)), zap.Error(err))
	}
}

// take returns what is pending, and empties it.
func (s *settleQueue) take() ([]string, []bson.Raw) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids, written := s.pending, s.written
	s.pending, s.written = nil, nil
	return ids, written
}

// settleBatch tells the dependents of the jobs of ids of their outcomes,
// and returns what it settled together; each settle has its own deadline
// (SettleDependentsOfAll), and those that fail are left to the leader's.
func (w *Worker) settleBatch(ctx context.Context, ids []string, written []bson.Raw) queue.SettleReport {
	if w.onSettle != nil {
		w.onSettle(ctx, ids)
	}
	rep, err := w.c.SettleDependentsOfAll(ctx, ids, written...)
	// Some dependents may be runnable now: claim at once, not at the next
	// poll (the handlers' returns of these jobs woke no claim: launch).
	w.signalWake()
	if err != nil && ctx.Err() == nil {
		w.log.Warn("telling finished jobs' dependents of their outcomes failed; the leader's pass does it",
			zap.Int("jobs", len(ids)), zap.Error(err))
	}
	return rep
}

// stopSettles ends settleLoop, the settle under way cancelled, and waits
// for it; the jobs not settled yet are left due for the leader's pass.
func (w *Worker) stopSettles() {
	s := &w.settles
	s.mu.Lock()
	s.stopped = true
	started := s.started
	s.mu.Unlock()
	if !started {
		return
	}
	s.cancel()
	<-s.done
}

// runNext claims and starts the one dependent of r's job, a chain's next
// task, as it releases it (queue's ClaimNext), rather than leaving it to a
// settle and a claim: when r's completion returned the job, the worker
// still claims, no process limit applies and a run slot is free. It then
// has the job marked settled (markSettled) and reports whether it took the
// next task; otherwise the caller settles the job as usual. A dependent
// found waiting for more parents (a fan-in's sink) is not tried again for
// the next parents that list it (missedNext): one empty claim per fan-in,
// not one per parent. The task starts as a hand-off's successor does
// (startTaken).
func (w *Worker) runNext(r *run) bool {
	if r.written == nil || w.claimingCtx.Err() != nil || w.plimits.limited() {
		return false
	}
	kid, ok := queue.OnlyDependent(r.written)
	if !ok || w.missed.has(kid) || !w.exec.TryAcquire(1) {
		return false
	}
	w.exec.Release(1)
	params := w.takeParams()
	ctx, cancel := context.WithTimeout(context.Background(), w.bound(w.cfg.ClaimTimeout()))
	defer cancel()
	start := time.Now()
	next, err := w.c.ClaimNext(ctx, r.written, params)
	if err != nil {
		w.obs.Claimed(time.Since(start), 0, err)
		w.log.Warn("claiming the next task of a chain failed; its parent is settled as usual",
			zap.String("job_id", kid), zap.Error(err))
		w.giveBackTaken(params.Token, "the next task of a chain")
		return false
	}
	if next == nil {
		// It waits for more parents, or another took it, or flow control
		// applies to it: the next parent listing it is settled as usual.
		w.missed.add(kid)
		return false
	}
	w.startTaken(r, next, start)
	w.markSettled(r.written)
	return true
}

// missedNext holds the last missedKept dependents runNext failed to
// take, oldest first.
type missedNext struct {
	mu  sync.Mutex
	ids []string
}

// missedKept is how many dependents missedNext keeps: the sinks of as
// many fan-ins whose parents end on one worker at once.
const missedKept = 8

func (m *missedNext) add(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ids = append(m.ids, id)
	if len(m.ids) > missedKept {
		m.ids = m.ids[1:]
	}
}

func (m *missedNext) has(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Contains(m.ids, id)
}
