package docket

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// DefaultWaitPollInterval is the longest WaitIdle waits between two reads
// of the jobs collection.
const DefaultWaitPollInterval = 500 * time.Millisecond

// WaitParams say which jobs WaitIdle waits for.
type WaitParams struct {
	// Queues limits the wait to these queues. Defaults to every queue.
	Queues []string
	// Kinds limits the wait to these kinds. Defaults to every kind.
	Kinds []string
	// IgnorePeriodic leaves out the jobs periodic jobs inserted (their ids
	// are periodic:NAME:TICK): a schedule's next tick does not hold the
	// wait up.
	IgnorePeriodic bool
	// PollInterval is the longest wait between two reads: WaitIdle reads
	// again after 10 ms, then twice as long each time up to this. Defaults
	// to DefaultWaitPollInterval.
	PollInterval time.Duration
}

// WaitIdle returns nil once no job the params select is running or
// available to run now, or ctx's error when it ends first. It reads the
// jobs collection, so it sees the jobs of every process, inserted by any
// program; a client need not be started to call it. Jobs waiting for a
// later time (a retry's backoff, a delay) do not hold it up; the available
// jobs of a paused queue do.
func (c *Client) WaitIdle(ctx context.Context, p WaitParams) error {
	if p.PollInterval < 0 {
		return errors.New("docket: WaitIdle: poll interval must not be negative")
	}
	if p.PollInterval == 0 {
		p.PollInterval = DefaultWaitPollInterval
	}
	coll := store.Of(c.q).Collection()
	wait := min(10*time.Millisecond, p.PollInterval)
	for {
		busy, err := busyJob(ctx, coll, p, time.Now())
		if err != nil {
			return fmt.Errorf("docket: WaitIdle: %w", err)
		}
		if !busy {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("docket: WaitIdle: %w", context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, p.PollInterval)
	}
}

// busyJob reports whether a job p selects is running or available at now.
func busyJob(ctx context.Context, coll *mongo.Collection, p WaitParams, now time.Time) (bool, error) {
	filter := bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "state", Value: jobs.StateRunning}},
		bson.D{{Key: "state", Value: jobs.StateAvailable}, {Key: "runAt", Value: bson.D{{Key: "$lte", Value: now}}}},
	}}}
	if len(p.Queues) > 0 {
		filter = append(filter, bson.E{Key: "queue", Value: bson.D{{Key: "$in", Value: p.Queues}}})
	}
	if len(p.Kinds) > 0 {
		filter = append(filter, bson.E{Key: "kind", Value: bson.D{{Key: "$in", Value: p.Kinds}}})
	}
	if p.IgnorePeriodic {
		filter = append(filter, bson.E{Key: "_id", Value: bson.D{{Key: "$not", Value: bson.Regex{Pattern: "^periodic:"}}}})
	}
	err := coll.FindOne(ctx, filter, options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	return err == nil, err
}
