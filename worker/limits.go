package worker

import "time"

// flowControl is what the dispatcher learns from the queue client of its
// rate and concurrency limits (queue.Client's).
type flowControl interface {
	// NextRateStart is when a rate limit that left a kind or queue out
	// of the last claim allows a start again.
	NextRateStart() time.Time
	// HoldsRunSlot reports whether a job this worker claimed holds a run
	// slot of a concurrency limit: its slot frees with its finishing
	// write, not when its handler returns, so a claim sent at the return
	// would find the limit still full.
	HoldsRunSlot(jobID string) bool
	// RunEnded says that a job's finishing write was applied: the next
	// claim takes the run slots it freed without reading them.
	RunEnded(jobID string)
	// LimitFull reports whether the last claim left a concurrency limit
	// full.
	LimitFull() bool
	// UnderLimits reports whether concurrency limits applied to the last
	// claim: one job costs such a claim as much as many.
	UnderLimits() bool
}
