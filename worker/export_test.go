package worker

import "github.com/docketq/docket/jobs"

// SetAfterClaim makes w run f between each claim's reply and the launch of
// the jobs it claimed, as if the process stalled there. Call it before
// Start.
func SetAfterClaim(w *Worker, f func([]*jobs.Job)) { w.afterClaim = f }
