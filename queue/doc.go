// Package queue holds every write docket makes to the jobs collection:
// enqueueing, claiming, renewing and finishing leases, cancelling, and
// re-queueing jobs whose lease expired. Every write by a lease holder is
// fenced on the job's id, its running state and the holder's lease token, so
// a worker that lost its lease can change nothing. A write may be applied
// with its reply lost, so a fenced write that matches nothing reads the job
// back before it reports ErrLeaseLost: an earlier try of its own found in
// place is success. When that read fails too, as when an insert and the
// lookup after it fail, the error wraps ErrOutcomeUnknown: trying the write
// again is safe. The lease-level
// operations (claim, heartbeat, finishing writes, reap) are the engine's:
// package worker and package recovery reach them through internal/jobstore,
// and an app enqueues and administers with Client.
package queue
