package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
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

// ErrUnknownState is returned by Cancel for a job whose state is none of
// the five (written by another app): docket does not know how to stop it.
var ErrUnknownState = errors.New("unknown job state")

// cancelTries bounds how many times Cancel tries again when the job moves
// between available and running under it.
const cancelTries = 10

// Cancel stops a job: an available job is cancelled at once; a running one
// is flagged, and ends cancelled at its next transition: its worker cancels
// the handler at its next heartbeat, and a failure, a release or a reap
// also end it cancelled.
func (c *Client) Cancel(ctx context.Context, id string) (CancelOutcome, error) {
	return c.CancelJobID(ctx, StringJobID(id))
}

// CancelJobID is Cancel for an id of any type (a job another application
// wrote with _id 7).
func (c *Client) CancelJobID(ctx context.Context, jobID JobID) (CancelOutcome, error) {
	key, id := jobID.v, jobID.String()
	for range cancelTries {
		t := now()
		res, err := c.coll.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: key}, {Key: "state", Value: jobs.StateAvailable}},
			finish(jobs.StateCancelled, t))
		if err != nil {
			return 0, fmt.Errorf("queue: cancel job %s: %w", id, err)
		}
		if res.MatchedCount == 1 {
			return Cancelled, nil
		}
		res, err = c.coll.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: key}, {Key: "state", Value: jobs.StateRunning}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "cancelRequestedAt", Value: t}, {Key: "updatedAt", Value: t}}}})
		if err != nil {
			return 0, fmt.Errorf("queue: cancel job %s: %w", id, err)
		}
		if res.MatchedCount == 1 {
			return CancelRequested, nil
		}
		raw, err := c.coll.FindOne(ctx, bson.D{{Key: "_id", Value: key}},
			options.FindOne().SetProjection(bson.D{{Key: "state", Value: 1}})).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			return 0, fmt.Errorf("queue: cancel job %s: %w", id, ErrNotFound)
		}
		if err != nil {
			return 0, fmt.Errorf("queue: cancel job %s: %w", id, err)
		}
		v, err := raw.LookupErr("state")
		if err != nil {
			return 0, fmt.Errorf("queue: cancel job %s: %w: the job has no state field", id, ErrUnknownState)
		}
		st, ok := v.StringValueOK()
		switch s := jobs.State(st); {
		case !ok:
			return 0, fmt.Errorf("queue: cancel job %s: %w: state is %s %s, not a string", id, ErrUnknownState, v.Type, v)
		case s.Finished():
			return 0, fmt.Errorf("queue: cancel job %s: %w (%s)", id, ErrFinished, s)
		case !s.Valid():
			return 0, fmt.Errorf("queue: cancel job %s: %w %q: not one of available, running, succeeded, dead, cancelled", id, ErrUnknownState, st)
		}
		// It moved between available and running under us: try again.
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("queue: cancel job %s: %w", id, err)
		}
	}
	return 0, fmt.Errorf("queue: cancel job %s: it moved between available and running %d times while cancelling; try again", id, cancelTries)
}
