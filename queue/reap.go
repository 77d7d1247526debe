package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// ReapResult counts what one reap did.
type ReapResult struct {
	// Requeued jobs went back to available.
	Requeued int
	// Dead jobs had used up their attempts.
	Dead int
}

// Reap re-queues up to limit running jobs whose lease expired more than
// grace ago (their worker died or stalled), or sends them to dead when
// their attempts are used up. Each write is fenced on the lease token and
// expiry it read, so a job renewed, finished or claimed again in between is
// left alone, and any number of reapers may run at once.
func (c *Client) Reap(ctx context.Context, grace time.Duration, limit int) (ReapResult, error) {
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
	var expired []jobs.Job
	if err := cur.All(ctx, &expired); err != nil {
		return res, fmt.Errorf("queue: read expired leases: %w", err)
	}
	for i := range expired {
		j := &expired[i]
		msg := fmt.Sprintf("lease expired at %s: worker %s stopped renewing it", j.LeaseExpiresAt.Format(time.RFC3339Nano), j.Owner)
		errs := jobs.AppendError(j.Errors, jobs.AttemptError{Attempt: j.Attempt, At: t, Owner: j.Owner, Message: msg})
		f, update := c.failure(j, t, false, errs)
		filter := append(fence(LeaseOf(j)), bson.E{Key: "leaseExpiresAt", Value: j.LeaseExpiresAt})
		r, err := c.coll.UpdateOne(ctx, filter, update)
		if err != nil {
			return res, fmt.Errorf("queue: re-queue job %s: %w", j.ID, err)
		}
		if r.MatchedCount == 0 {
			continue // renewed, finished or reaped by someone else meanwhile
		}
		if f.State == jobs.StateDead {
			res.Dead++
		} else {
			res.Requeued++
		}
		c.log.Info("reaped expired lease", j.LogFields(zap.String("owner", j.Owner), zap.String("state", string(f.State)))...)
	}
	return res, nil
}

// Clean deletes jobs that finished in state s before now minus age, at
// most limit of them, and returns how many it deleted.
func (c *Client) Clean(ctx context.Context, s jobs.State, age time.Duration, limit int) (int, error) {
	cur, err := c.coll.Find(ctx,
		bson.D{{Key: "state", Value: s}, {Key: "finishedAt", Value: bson.D{{Key: "$lt", Value: now().Add(-age)}}}},
		options.Find().SetLimit(int64(limit)).SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("queue: find %s jobs to clean: %w", s, err)
	}
	var ids []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &ids); err != nil {
		return 0, fmt.Errorf("queue: read %s jobs to clean: %w", s, err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	in := make(bson.A, len(ids))
	for i, d := range ids {
		in[i] = d.ID
	}
	r, err := c.coll.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}, {Key: "state", Value: s}})
	if err != nil {
		return 0, fmt.Errorf("queue: clean %s jobs: %w", s, err)
	}
	return int(r.DeletedCount), nil
}
