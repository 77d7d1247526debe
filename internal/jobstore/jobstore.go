// Package jobstore gives docket's engine (package worker, package recovery
// and docket's own tests) the lease-level operations of a queue.Client:
// claiming, heartbeats, the finishing writes fenced on a lease, releasing a
// lost claim, reaping and retention. They are not methods of queue.Client,
// which an embedding app enqueues and administers with: a claim or a write
// made outside the engine's bookkeeping could break the fencing. Being
// internal, this package can only be imported from within docket.
package jobstore

import (
	"context"
	"time"

	"github.com/docketq/docket/internal/storehook"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Store is the lease-level side of a queue.Client. Every write it makes
// for a lease is fenced on that lease's token (see package queue's
// documentation of each operation).
type Store interface {
	// Claim takes the best runnable job with one atomic findAndModify.
	Claim(ctx context.Context, p queue.ClaimParams) (*jobs.Job, error)
	// ClaimBatch takes up to k runnable jobs under one fresh token.
	ClaimBatch(ctx context.Context, p queue.ClaimParams, k int) ([]*jobs.Job, error)
	// ReleaseClaim gives back, uncounted, the running jobs that carry token.
	ReleaseClaim(ctx context.Context, token string) (int, error)
	// Heartbeat extends the lease l by d.
	Heartbeat(ctx context.Context, l queue.Lease, d time.Duration) (queue.Renewal, error)
	// HeartbeatMany renews many leases by d, each fenced on its own token,
	// in a few commands, and reports per lease its renewal or that it was
	// lost.
	HeartbeatMany(ctx context.Context, leases []queue.Lease, d time.Duration) (map[queue.Lease]queue.Beat, error)
	// Complete marks the job l holds succeeded.
	Complete(ctx context.Context, l queue.Lease) error
	// CompleteMany marks every job of ls succeeded in one write and
	// returns the leases that no longer held their job.
	CompleteMany(ctx context.Context, ls []queue.Lease) (lost []queue.Lease, err error)
	// Cancelled ends the job l holds as cancelled.
	Cancelled(ctx context.Context, l queue.Lease, j *jobs.Job, reason string) error
	// Fail records a failed attempt: a retry with backoff, or dead.
	Fail(ctx context.Context, l queue.Lease, j *jobs.Job, cause error) (queue.Failure, error)
	// Release gives the job l holds back to the queue without counting
	// the attempt.
	Release(ctx context.Context, l queue.Lease) error
	// Reap settles running jobs whose lease expired more than grace ago.
	Reap(ctx context.Context, grace time.Duration, limit int) (queue.ReapResult, error)
	// Clean deletes up to limit jobs in state s finished more than age ago.
	Clean(ctx context.Context, s jobs.State, age time.Duration, limit int) (int, error)
	// Collection is the jobs collection, with the configured write concern.
	Collection() *mongo.Collection
}

// Of returns q's lease-level operations.
func Of(q *queue.Client) Store { return storehook.Store(q, 0).(Store) }

// Batched returns q's lease-level operations with completions joined into
// one write per linger (group commit): the first completion waits linger
// for others, then one updateMany writes them all, and each caller learns
// its own job's outcome. The other operations are Of(q)'s.
func Batched(q *queue.Client, linger time.Duration) Store {
	return storehook.Store(q, linger).(Store)
}
