package recovery

import (
	"context"

	"github.com/docketq/docket/queue"
	"go.uber.org/zap"
)

// settleDependents is the reaper's pass over workflows: it tells the jobs
// that wait for a finished job of its outcome when the worker that
// finished it stopped before it did, and links the blocked jobs whose
// enqueuer stopped between their insert and their link (see
// queue.SettleDependents), and cancels the workflows left unpublished for
// longer than queue.DefaultWorkflowGrace (queue.SweepWorkflows). It goes on, batch after batch, while a batch
// comes back full.
func (r *Reaper) settleDependents(ctx context.Context) error {
	var total queue.DepsResult
	for {
		res, err := r.q.SettleDependents(ctx, queue.DefaultLinkGrace, r.cfg.Batch)
		total.Settled += res.Settled
		total.Linked += res.Linked
		total.Buried += res.Buried
		if err != nil {
			return err
		}
		if res.Settled+res.Linked+res.Buried < r.cfg.Batch {
			break
		}
	}
	// After the settles: a workflow's gate this cancels is settled here
	// (its tasks cancelled), and what is left due goes to the next pass.
	for {
		n, err := r.q.SweepWorkflows(ctx, queue.DefaultWorkflowGrace, r.cfg.Batch)
		if err != nil {
			return err
		}
		if n < r.cfg.Batch {
			break
		}
	}
	if total.Settled+total.Linked+total.Buried > 0 {
		r.log.Info("settled workflows left by stopped processes", zap.Int("settled", total.Settled),
			zap.Int("linked", total.Linked), zap.Int("buried", total.Buried))
	}
	return nil
}
