package queue

import (
	"context"
	"fmt"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// CancelOutcome says what Cancel did.
type CancelOutcome int

// The outcomes of Cancel.
const (
	// Cancelled: the job was available and is now cancelled.
	Cancelled CancelOutcome = iota + 1
	// CancelRequested: the job is running; its worker stops it at its next
	// heartbeat.
	CancelRequested
)

// String names the outcome.
func (o CancelOutcome) String() string {
	switch o {
	case Cancelled:
		return "cancelled"
	case CancelRequested:
		return "cancel requested"
	}
	return "unknown"
}

// ErrFinished is returned by Cancel for a job that has already finished.
var ErrFinished = fmt.Errorf("job already finished")

// Cancel stops a job: an available job is cancelled at once; a running one
// is flagged, and its worker cancels the handler at its next heartbeat.
func (c *Client) Cancel(ctx context.Context, id string) (CancelOutcome, error) {
	t := now()
	res, err := c.coll.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: id}, {Key: "state", Value: jobs.StateAvailable}},
		finish(jobs.StateCancelled, t))
	if err != nil {
		return 0, fmt.Errorf("queue: cancel job %s: %w", id, err)
	}
	if res.MatchedCount == 1 {
		return Cancelled, nil
	}
	res, err = c.coll.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: id}, {Key: "state", Value: jobs.StateRunning}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "cancelRequestedAt", Value: t}, {Key: "updatedAt", Value: t}}}})
	if err != nil {
		return 0, fmt.Errorf("queue: cancel job %s: %w", id, err)
	}
	if res.MatchedCount == 1 {
		return CancelRequested, nil
	}
	j, err := c.Get(ctx, id)
	if err != nil {
		return 0, err
	}
	if j.State.Finished() {
		return 0, fmt.Errorf("queue: cancel job %s: %w (%s)", id, ErrFinished, j.State)
	}
	// It moved between available and running under us: try again.
	return c.Cancel(ctx, id)
}
