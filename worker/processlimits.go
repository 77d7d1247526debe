package worker

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.uber.org/zap"
)

// Process limits (Config.ProcessLimits) cost no command: the worker
// counts what it holds, and its dispatcher, the only goroutine that
// claims, leaves out of each claim what is at its limit and claims no
// more jobs than the least room left. The count is exact, prefetched jobs
// included: launch counts a job before its goroutine starts, and the
// goroutine uncounts it once the job is no longer held, whichever way it
// ended; both under Worker.mu. A claimed job too short of lease to start
// (Worker.startable) is given back before the next claim, never launched,
// so never counted.

// validateProcessLimits reports the first process limit whose name or
// value is invalid, naming it as Config's field.
func validateProcessLimits(limits map[string]int) error {
	for _, name := range slices.Sorted(maps.Keys(limits)) {
		if _, _, err := queue.ParseLimitName(name); err != nil {
			return fmt.Errorf("worker.processLimits: %w", err)
		}
		if n := limits[name]; n < 1 || n > queue.MaxLimit {
			return fmt.Errorf("worker.processLimits[%q]: %d must be from 1 to %d (the most jobs of it this process holds at once)", name, n, queue.MaxLimit)
		}
	}
	return nil
}

// processLimits is a worker's Config.ProcessLimits, read, with how many
// jobs of each limited kind and queue the worker holds. The counts are
// guarded by Worker.mu.
type processLimits struct {
	kinds, queues         map[string]int // the limit of each limited kind, queue
	heldKinds, heldQueues map[string]int // the jobs held of each, none when absent
}

// newProcessLimits reads limits, valid (see validateProcessLimits).
func newProcessLimits(limits map[string]int) processLimits {
	p := processLimits{kinds: map[string]int{}, queues: map[string]int{}, heldKinds: map[string]int{}, heldQueues: map[string]int{}}
	for name, n := range limits {
		isKind, target, _ := queue.ParseLimitName(name)
		if isKind {
			p.kinds[target] = n
		} else {
			p.queues[target] = n
		}
	}
	return p
}

// limited reports whether there is a process limit at all.
func (p *processLimits) limited() bool { return len(p.kinds)+len(p.queues) > 0 }

// hold adds n to the jobs held of job's kind and queue, where limited: 1
// when it is claimed, -1 when the worker no longer holds it. Call it with
// Worker.mu held.
func (p *processLimits) hold(job *jobs.Job, n int) {
	if _, ok := p.kinds[job.Kind]; ok {
		p.heldKinds[job.Kind] += n
	}
	if _, ok := p.queues[job.Queue]; ok {
		p.heldQueues[job.Queue] += n
	}
}

// room returns kinds and queues without those at their limit, and the
// least room left among the limited ones it keeps (math.MaxInt when it
// keeps none): the most jobs a claim of them may take and still keep
// every limit. Either list is empty when all of it is at its limit. Call
// it with Worker.mu held.
func (p *processLimits) room(kinds, queues []string) (openKinds, openQueues []string, room int) {
	room = math.MaxInt
	keep := func(names []string, limits, held map[string]int) []string {
		out := make([]string, 0, len(names))
		for _, name := range names {
			if n, ok := limits[name]; ok {
				left := n - held[name]
				if left <= 0 {
					continue
				}
				room = min(room, left)
			}
			out = append(out, name)
		}
		return out
	}
	return keep(kinds, p.kinds, p.heldKinds), keep(queues, p.queues, p.heldQueues), room
}

// processRoom narrows params, for the next claim, to the kinds (of
// kinds, the registry's) and the worker's queues under their process
// limits, and returns the most jobs the claim may take. When every kind
// or every queue is at its limit it sends no claim: it gives back the
// slot awaitRoom took, waits until a job ends (launch wakes the
// dispatcher once the job is uncounted) or the worker stops claiming, and
// returns false.
func (w *Worker) processRoom(params *store.ClaimParams, kinds []string) (int, bool) {
	if !w.plimits.limited() {
		return math.MaxInt, true
	}
	w.mu.Lock()
	ks, qs, room := w.plimits.room(kinds, w.cfg.Queues)
	w.mu.Unlock()
	params.Kinds, params.Queues = ks, qs
	if len(params.Kinds) > 0 && len(params.Queues) > 0 {
		return room, true
	}
	w.held.Add(-1)
	select {
	case <-w.wake:
	case <-w.claimingCtx.Done():
	}
	return 0, false
}

// fitProcessRoom caps a claim's slots at room (see processRoom), giving
// back the slots beyond it: a batch never brings more jobs than a process
// limit has room for.
func (w *Worker) fitProcessRoom(slots, room int) int {
	if slots <= room {
		return slots
	}
	w.held.Add(-int64(slots - room))
	return room
}

// logProcessLimits logs the worker's process limits at its start, and
// warns of those that can bind nothing: a kind it has no handler for, a
// queue it does not claim from.
func (w *Worker) logProcessLimits() {
	if len(w.cfg.ProcessLimits) == 0 {
		return
	}
	fields := make([]zap.Field, 0, len(w.cfg.ProcessLimits))
	for _, name := range slices.Sorted(maps.Keys(w.cfg.ProcessLimits)) {
		fields = append(fields, zap.Int(name, w.cfg.ProcessLimits[name]))
	}
	w.log.Info("process limits: the most jobs of each this process holds at once", zap.Dict("process_limits", fields...))
	kinds := w.reg.Kinds()
	for k := range w.plimits.kinds {
		if !slices.Contains(kinds, k) {
			w.log.Warn("a process limit names a kind this worker has no handler for; it bounds nothing", zap.String("limit", queue.KindLimit(k)))
		}
	}
	for q := range w.plimits.queues {
		if !slices.Contains(w.cfg.Queues, q) {
			w.log.Warn("a process limit names a queue this worker does not claim from; it bounds nothing", zap.String("limit", queue.QueueLimit(q)))
		}
	}
}
