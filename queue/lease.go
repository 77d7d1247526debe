package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// fence matches the job only while l still holds it.
func fence(l Lease) bson.D {
	return bson.D{
		{Key: "_id", Value: l.JobID},
		{Key: "state", Value: jobs.StateRunning},
		{Key: "leaseToken", Value: l.Token},
	}
}

// fencedUpdate applies update to the job l holds; ErrLeaseLost if it no
// longer holds it.
func (c *Client) fencedUpdate(ctx context.Context, op string, l Lease, update bson.D) error {
	res, err := c.coll.UpdateOne(ctx, fence(l), update)
	if err != nil {
		return fmt.Errorf("queue: %s job %s: %w", op, l.JobID, err)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("queue: %s job %s: %w", op, l.JobID, ErrLeaseLost)
	}
	return nil
}

// Renewal is what a heartbeat learned.
type Renewal struct {
	// ExpiresAt is the lease's new expiry.
	ExpiresAt time.Time
	// CancelRequested is true when someone asked the job to stop.
	CancelRequested bool
}

// Heartbeat extends the lease l by d from now. It returns ErrLeaseLost when
// l no longer holds the job.
func (c *Client) Heartbeat(ctx context.Context, l Lease, d time.Duration) (Renewal, error) {
	t := now()
	update := bson.D{{Key: "$set", Value: bson.D{
		{Key: "leaseExpiresAt", Value: t.Add(d)},
		{Key: "heartbeatAt", Value: t},
	}}}
	// No projection: FerretDB v1 does not implement findAndModify's fields.
	opts := options.FindOneAndUpdate().SetReturnDocument(options.After)
	var got struct {
		CancelRequestedAt *time.Time `bson:"cancelRequestedAt"`
	}
	err := c.coll.FindOneAndUpdate(ctx, fence(l), update, opts).Decode(&got)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return Renewal{}, fmt.Errorf("queue: heartbeat job %s: %w", l.JobID, ErrLeaseLost)
	}
	if err != nil {
		return Renewal{}, fmt.Errorf("queue: heartbeat job %s: %w", l.JobID, err)
	}
	return Renewal{ExpiresAt: t.Add(d), CancelRequested: got.CancelRequestedAt != nil}, nil
}

// finish returns the update that moves a job to the final state s at t,
// freeing its unique key.
func finish(s jobs.State, t time.Time, set ...bson.E) bson.D {
	set = append(set,
		bson.E{Key: "state", Value: s},
		bson.E{Key: "finishedAt", Value: t},
		bson.E{Key: "updatedAt", Value: t},
	)
	return bson.D{
		{Key: "$set", Value: bson.D(set)},
		{Key: "$unset", Value: bson.D{{Key: "leaseExpiresAt", Value: ""}}},
		{Key: "$rename", Value: bson.D{{Key: "uniqueKey", Value: "finishedUniqueKey"}}},
	}
}

// Complete marks the job l holds succeeded. On a Client made by
// WithBatchedCompletion, the write joins concurrent completions in one
// updateMany; the outcome is the same.
func (c *Client) Complete(ctx context.Context, l Lease) error {
	if c.completions != nil {
		return c.completions.complete(ctx, l)
	}
	return c.fencedUpdate(ctx, "complete", l, finish(jobs.StateSucceeded, now()))
}

// Cancelled marks the job l holds cancelled, recording why.
func (c *Client) Cancelled(ctx context.Context, l Lease, j *jobs.Job, reason string) error {
	t := now()
	errs := jobs.AppendError(j.Errors, jobs.AttemptError{Attempt: j.Attempt, At: t, Owner: j.Owner, Message: reason})
	return c.fencedUpdate(ctx, "cancel", l, finish(jobs.StateCancelled, t, bson.E{Key: "errors", Value: errs}))
}

// Failure is the outcome of a failed attempt.
type Failure struct {
	// State is where the job went: available (to retry) or dead.
	State jobs.State
	// RunAt is when the retry may run, for State available.
	RunAt time.Time
}

// Fail records that the attempt of j held by l failed with cause. The job
// is retried after a backoff unless cause is permanent or the attempts are
// used up, in which case it is dead.
func (c *Client) Fail(ctx context.Context, l Lease, j *jobs.Job, cause error) (Failure, error) {
	t := now()
	errs := jobs.AppendError(j.Errors, jobs.AttemptError{Attempt: j.Attempt, At: t, Owner: j.Owner, Message: cause.Error()})
	f, update := c.failure(j, t, jobs.IsPermanent(cause), errs)
	return f, c.fencedUpdate(ctx, "fail", l, update)
}

// failure returns where a failed attempt of j sends it and the update that
// does so.
func (c *Client) failure(j *jobs.Job, t time.Time, permanent bool, errs []jobs.AttemptError) (Failure, bson.D) {
	maxAttempts := j.MaxAttempts
	if maxAttempts <= 0 { // a plain insert may leave it out
		maxAttempts = jobs.DefaultMaxAttempts
	}
	if permanent || j.Attempt >= maxAttempts {
		return Failure{State: jobs.StateDead}, finish(jobs.StateDead, t, bson.E{Key: "errors", Value: errs})
	}
	runAt := t.Add(Backoff(j.Attempt, c.cfg.RetryBase, c.cfg.RetryMax))
	return Failure{State: jobs.StateAvailable, RunAt: runAt}, requeue(t, runAt, bson.E{Key: "errors", Value: errs})
}

// requeue returns the update that makes a running job available at runAt,
// dropping its lease.
func requeue(t, runAt time.Time, set ...bson.E) bson.D {
	set = append(set,
		bson.E{Key: "state", Value: jobs.StateAvailable},
		bson.E{Key: "runAt", Value: runAt},
		bson.E{Key: "updatedAt", Value: t},
	)
	return bson.D{
		{Key: "$set", Value: bson.D(set)},
		{Key: "$unset", Value: bson.D{
			{Key: "leaseToken", Value: ""},
			{Key: "leaseExpiresAt", Value: ""},
			{Key: "heartbeatAt", Value: ""},
		}},
	}
}

// Release gives the job l holds back to the queue at once, as if this
// attempt had not been made: a worker shutting down uses it.
func (c *Client) Release(ctx context.Context, l Lease) error {
	t := now()
	update := requeue(t, t)
	update = append(update, bson.E{Key: "$inc", Value: bson.D{{Key: "attempt", Value: -1}}})
	return c.fencedUpdate(ctx, "release", l, update)
}
