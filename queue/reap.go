package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// ReapResult counts what one reap did.
type ReapResult struct {
	// Requeued jobs went back to available.
	Requeued int
	// Dead jobs had used up their attempts.
	Dead int
	// Cancelled jobs had a cancel requested: they end cancelled rather than
	// run again.
	Cancelled int
	// Buried jobs did not decode (a field of the wrong type, written by
	// another app): they went to dead with what is wrong, without a retry.
	Buried int
	// Skipped jobs could not be written (logged); the next pass tries again.
	Skipped int
}

// Settled is how many jobs the reap moved out of running.
func (r ReapResult) Settled() int { return r.Requeued + r.Dead + r.Cancelled + r.Buried }

// Add returns the sum of r and o.
func (r ReapResult) Add(o ReapResult) ReapResult {
	return ReapResult{
		Requeued:  r.Requeued + o.Requeued,
		Dead:      r.Dead + o.Dead,
		Cancelled: r.Cancelled + o.Cancelled,
		Buried:    r.Buried + o.Buried,
		Skipped:   r.Skipped + o.Skipped,
	}
}

// eachRaw calls fn with every document of cur, one at a time, so that a
// document that does not decode as its caller expects is the caller's to
// handle and does not fail the others (cur.All into typed values would).
func eachRaw(ctx context.Context, cur *mongo.Cursor, fn func(bson.Raw) error) error {
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	for cur.Next(ctx) {
		if err := fn(cur.Current); err != nil {
			return err
		}
	}
	return cur.Err()
}

// Reap re-queues up to limit running jobs whose lease expired more than
// grace ago (their worker died or stalled), or sends them to dead when
// their attempts are used up, or to cancelled when someone asked them to
// stop. Each write is fenced on the lease token and expiry it read, so a
// job renewed, finished or claimed again in between is left alone, and any
// number of reapers may run at once. A job that does not decode (written
// by another app with a field of the wrong type) is buried: dead, with the
// decoding error, fenced the same way; it never stops the pass.
func (c store) Reap(ctx context.Context, grace time.Duration, limit int) (ReapResult, error) {
	var res ReapResult
	t := now()
	cur, err := c.coll.Find(ctx,
		bson.D{
			{Key: "state", Value: jobs.StateRunning},
			{Key: "leaseExpiresAt", Value: bson.D{{Key: "$lt", Value: t.Add(-grace)}}},
		},
		options.Find().SetLimit(int64(limit)).SetProjection(bson.D{{Key: "args", Value: 0}}))
	if err != nil {
		return res, fmt.Errorf("queue: find expired leases: %w", err)
	}
	// Read the batch first, then write: writing while the cursor is open
	// would hold it across many round trips.
	var expired []bson.Raw
	if err := eachRaw(ctx, cur, func(d bson.Raw) error {
		expired = append(expired, append(bson.Raw(nil), d...))
		return nil
	}); err != nil {
		return res, fmt.Errorf("queue: read expired leases: %w", err)
	}
	for _, raw := range expired {
		r, err := c.reapOne(ctx, raw, t)
		if err != nil {
			return res, err
		}
		res = res.Add(r)
	}
	return res, nil
}

// reapOne re-queues, kills, cancels or buries the expired job raw.
func (c *Client) reapOne(ctx context.Context, raw bson.Raw, t time.Time) (ReapResult, error) {
	// The fence is on the values as stored, whatever their type.
	filter := bson.D{
		{Key: "_id", Value: raw.Lookup("_id")},
		{Key: "state", Value: jobs.StateRunning},
		{Key: "leaseToken", Value: rawOrNull(raw, "leaseToken")},
		{Key: "leaseExpiresAt", Value: raw.Lookup("leaseExpiresAt")},
	}
	var j jobs.Job
	if derr := bson.Unmarshal(raw, &j); derr != nil {
		owner, _ := raw.Lookup("owner").StringValueOK()
		attempt, _ := raw.Lookup("attempt").AsInt64OK()
		msg := malformed + derr.Error()
		errs := bson.A{jobs.AttemptError{Attempt: int(attempt), At: t, Owner: owner, Message: msg}}
		r, err := c.coll.UpdateOne(ctx, filter, finish(jobs.StateDead, t, bson.E{Key: "errors", Value: errs}))
		if err != nil {
			// Log and go on: one job that cannot be written must not stop
			// the pass for the others.
			c.log.Warn("reaper: cannot bury a malformed job; skipping it", zap.Any("job_id", raw.Lookup("_id")),
				zap.String("malformed", msg), zap.Error(err))
			return ReapResult{Skipped: 1}, nil
		}
		if r.MatchedCount == 0 {
			return ReapResult{}, nil
		}
		c.log.Warn("reaper: buried a malformed job: dead without running again", zap.Any("job_id", raw.Lookup("_id")), zap.String("error", msg))
		return ReapResult{Buried: 1}, nil
	}
	msg := fmt.Sprintf("lease expired at %s: worker %s stopped renewing it", j.LeaseExpiresAt.Format(time.RFC3339Nano), j.Owner)
	errs := jobs.AppendError(j.Errors, jobs.AttemptError{Attempt: j.Attempt, At: t, Owner: j.Owner, Message: msg})
	f, update := c.failure(&j, t, false, errs)
	var res ReapResult
	switch {
	case f.State == jobs.StateDead:
		r, err := c.coll.UpdateOne(ctx, filter, update)
		if err != nil {
			return res, fmt.Errorf("queue: reap job %s: %w", j.ID, err)
		}
		if r.MatchedCount == 0 {
			return res, nil // renewed, finished or reaped by someone else meanwhile
		}
		res.Dead++
	default:
		cancelled, err := c.requeueUnlessCancelled(ctx, "re-queue", filter, update, func(requestedAt string, _ bson.Raw) bson.D {
			return finish(jobs.StateCancelled, t, bson.E{Key: "errors", Value: jobs.AppendError(errs, jobs.AttemptError{
				Attempt: j.Attempt, At: t, Owner: j.Owner, Message: cancelledInstead(requestedAt, "re-queued"),
			})})
		})
		switch {
		case errorsIsLeaseLost(err):
			return res, nil // renewed, finished or reaped by someone else meanwhile
		case err != nil:
			return res, err
		case cancelled:
			f.State = jobs.StateCancelled
			res.Cancelled++
		default:
			res.Requeued++
		}
	}
	c.log.Info("reaped expired lease", j.LogFields(zap.String("owner", j.Owner), zap.String("state", string(f.State)))...)
	return res, nil
}

// Clean deletes jobs that finished in state s before now minus age, at
// most limit of them, and returns how many it deleted. Ids are used as
// stored, whatever their type.
func (c store) Clean(ctx context.Context, s jobs.State, age time.Duration, limit int) (int, error) {
	cur, err := c.coll.Find(ctx,
		bson.D{{Key: "state", Value: s}, {Key: "finishedAt", Value: bson.D{{Key: "$lt", Value: now().Add(-age)}}}},
		options.Find().SetLimit(int64(limit)).SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("queue: find %s jobs to clean: %w", s, err)
	}
	var in bson.A
	if err := eachRaw(ctx, cur, func(d bson.Raw) error {
		if id, err := d.LookupErr("_id"); err == nil {
			in = append(in, id)
		}
		return nil
	}); err != nil {
		return 0, fmt.Errorf("queue: read %s jobs to clean: %w", s, err)
	}
	if len(in) == 0 {
		return 0, nil
	}
	r, err := c.coll.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}, {Key: "state", Value: s}})
	if err != nil {
		return 0, fmt.Errorf("queue: clean %s jobs: %w", s, err)
	}
	return int(r.DeletedCount), nil
}
