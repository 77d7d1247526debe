package worker

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// settleTimeout bounds telling a finished job's dependents of its outcome.
const settleTimeout = 10 * time.Second

// settleQueue gathers the finished jobs whose dependents are to be told,
// so that the jobs finished while one settle runs are settled together by
// the next (queue.Client.SettleDependentsOfAll): one settle's commands for
// all of them.
type settleQueue struct {
	mu      sync.Mutex
	running bool // a caller is settling; the others wait for it
	pending []pendingSettle
}

type pendingSettle struct {
	id   string
	done chan error
}

// settleDependents tells the jobs that wait for the job with id, which
// this worker just finished, of its outcome, so that the next of a chain
// runs now rather than at the leader's next pass; it returns once they
// have been told, or telling them failed. Should this worker stop or fail
// before it does, the finishing write has left the outcome due and the
// leader's pass tells them (queue/deps.go).
func (w *Worker) settleDependents(id string, log *zap.Logger) {
	done := make(chan error, 1)
	s := &w.settles
	s.mu.Lock()
	s.pending = append(s.pending, pendingSettle{id: id, done: done})
	lead := !s.running
	s.running = true
	s.mu.Unlock()
	if lead {
		w.settlePending()
	}
	if err := <-done; err != nil {
		log.Warn("telling the job's dependents of its outcome failed; the leader's pass does it", zap.Error(err))
	}
}

// settlePending settles what is pending, batch after batch, until nothing
// is, telling each caller how its batch went.
func (w *Worker) settlePending() {
	s := &w.settles
	for {
		s.mu.Lock()
		batch := s.pending
		s.pending = nil
		if len(batch) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		ids := make([]string, len(batch))
		for i, p := range batch {
			ids[i] = p.id
		}
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		err := w.c.SettleDependentsOfAll(ctx, ids)
		cancel()
		// Some dependents may be runnable now: claim at once, not at
		// the next poll (the handlers' returns woke a claim too early).
		w.signalWake()
		for _, p := range batch {
			p.done <- err
		}
	}
}
