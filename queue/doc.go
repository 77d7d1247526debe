// Package queue is what an application calls on the jobs collection:
// enqueueing (with unique keys and bounded queues), reading and
// administering jobs (list, get, retry, cancel, delete, purge, counts and
// stats), pausing queues, capacities, concurrency limits, stored stats,
// dependencies and workflows (deps.go, workflow.go) and the registry of
// worker processes. A write may be applied with its reply
// lost: an insert that cannot tell wraps ErrOutcomeUnknown, and enqueueing
// again with the same id is safe.
//
// Claiming, renewing and finishing leases, and re-queueing jobs whose
// lease expired, are the engine's: package worker and package recovery do
// them through the Client's store (internal/store), where every write by a
// lease holder is fenced on the job's id, its running state and the
// holder's lease token, so a worker that lost its lease can change nothing.
package queue
