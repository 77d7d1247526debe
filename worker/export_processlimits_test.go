package worker

import "github.com/docketq/docket/queue"

// ProcessHeld returns how many jobs w holds now of each of its process
// limits (Config.ProcessLimits), by limit name, those at none left out.
func ProcessHeld(w *Worker) map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.plimits.held()
}

// held returns how many jobs of each limited kind and queue the worker
// holds, by limit name, those at none left out.
func (p *processLimits) held() map[string]int {
	out := map[string]int{}
	for k, n := range p.heldKinds {
		if n != 0 {
			out[queue.KindLimit(k)] = n
		}
	}
	for q, n := range p.heldQueues {
		if n != 0 {
			out[queue.QueueLimit(q)] = n
		}
	}
	return out
}
