package recovery

import (
	"context"

	"github.com/docketq/docket/queue"
	"go.uber.org/zap"
)

// settleDependents is the reaper's pass over dependencies: it tells the
// jobs that wait for a finished job of its outcome when the worker that
// finished it stopped before it did, and links the blocked jobs whose
// enqueuer stopped between their insert and their link (see
// queue.SettleDependents). It goes on, batch after batch, while a batch
// comes back full.
func (r *Reaper) settleDependents(ctx context.Context) error {
	var total queue.DepsResult
	defer func() {
		if total.Settled+total.Linked+total.Buried > 0 {
			r.log.Info("settled workflows left by stopped processes", zap.Int("settled", total.Settled),
				zap.Int("linked", total.Linked), zap.Int("buried", total.Buried))
		}
	}()
	for {
		res, err := r.q.SettleDependents(ctx, queue.DefaultLinkGrace, r.cfg.Batch)
		total.Settled += res.Settled
		total.Linked += res.Linked
		total.Buried += res.Buried
		if err != nil {
			return err
		}
		if res.Settled+res.Linked+res.Buried < r.cfg.Batch {
			return nil
		}
	}
}

// sweepWorkflows cancels the workflows left unpublished for longer than
// queue.DefaultWorkflowGrace (queue.SweepWorkflows), batch after batch,
// each cancelled gate settled at once (its tasks cancelled); one whose
// settle fails is left due to the next pass's settleDependents. A step of
// its own: a pass whose settles fail still sweeps.
func (r *Reaper) sweepWorkflows(ctx context.Context) error {
	for {
		n, err := r.q.SweepWorkflows(ctx, queue.DefaultWorkflowGrace, r.cfg.Batch)
		if err != nil || n < r.cfg.Batch {
			return err
		}
	}
}
