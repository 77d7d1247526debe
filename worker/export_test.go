package worker

import "github.com/docketq/docket/jobs"

// SetAfterClaim makes w run f between each claim's reply and the launch of
// the jobs it claimed, as if the process stalled there. Call it before
// Start.
func SetAfterClaim(w *Worker, f func([]*jobs.Job)) { w.afterClaim = f }

// HandoffCounts returns how many completions of w's jobs holding run
// slots handed them on, sent a hand-off whose successor was taken, found
// no successor read ahead, and could not hand on.
func HandoffCounts(w *Worker) (handed, missed, empty, refused int64) {
	a := &w.ahead
	return a.handed.Load(), a.missed.Load(), a.empty.Load(), a.refused.Load()
}

// DisableHandoff turns w's run slot hand-offs off. Call it before Start.
func DisableHandoff(w *Worker) { w.ahead.off = true }

// Wake wakes w's dispatcher, as a freed slot does.
func Wake(w *Worker) { w.signalWake() }
