// Package worker runs jobs: a pool of goroutines that claims jobs from the
// queue, runs each under a lease kept alive by heartbeats, and finishes it
// with a write fenced on that lease.
//
// A process embeds a Worker with its own registry of handlers; cmd/worker
// is one such process, with docket's handlers.
package worker
