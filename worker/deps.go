package worker

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// settleTimeout bounds telling a finished job's dependents of its outcome.
const settleTimeout = 10 * time.Second

// settleDependents tells the jobs that wait for the job with id, which
// this worker just finished, of its outcome, so that the next of a chain
// runs now rather than at the leader's next pass. Should this worker stop
// or fail before it does, the finishing write has left the outcome due
// and the leader's pass tells them (queue/deps.go).
func (w *Worker) settleDependents(id string, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if _, err := w.c.SettleDependentsOf(ctx, id); err != nil {
		log.Warn("telling the job's dependents of its outcome failed; the leader's pass does it", zap.Error(err))
	}
}
