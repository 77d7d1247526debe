package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// CancelOutcome says what Cancel did.
type CancelOutcome int

// The outcomes of Cancel.
const (
	// Cancelled: the job was available or blocked and is now cancelled.
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

// ErrUnknownState is returned by Cancel, and is the ActionResult.Err of
// Retry, for a job whose state is none of the six (written by another
// app): docket does not know how to stop or rerun it.
var ErrUnknownState = errors.New("unknown job state")

// ErrNotCancellable is returned by Cancel when the cancel hook of the job's
// kind refused: the application's work can no longer be stopped (a money
// transfer that has started applying). The job is left as it was.
var ErrNotCancellable = errors.New("cannot be cancelled")

// A CancelHook is an application's side of cancelling a job of its kind:
// it runs before Cancel cancels an unfinished job of that kind, with the
// job's id and its args as stored (a nil Raw when the job has none), and
// stops what the job's work has started (rolls a transfer back). It may
// run more than once for one job, and after the job started or finished:
// it must be idempotent, and safe when there is nothing left to stop. An
// error (wrapping ErrNotCancellable when the work cannot be stopped any
// more) leaves the job untouched and is what Cancel returns.
type CancelHook func(ctx context.Context, id JobID, args bson.Raw) error

// cancelHooks are a Client's cancel hooks by kind, shared by its copies.
type cancelHooks struct {
	mu     sync.RWMutex
	byKind map[string]CancelHook
}

// OnCancel makes Cancel (and CancelJobID) run hook before it cancels an
// unfinished job of kind, replacing the hook kind had; a nil hook removes
// it. Register hooks on every client that cancels jobs: the dashboard's
// and docketctl's as well as a worker's. Safe for concurrent use.
func (c *Client) OnCancel(kind string, hook CancelHook) {
	c.cancels.mu.Lock()
	defer c.cancels.mu.Unlock()
	if hook == nil {
		delete(c.cancels.byKind, kind)
		return
	}
	if c.cancels.byKind == nil {
		c.cancels.byKind = map[string]CancelHook{}
	}
	c.cancels.byKind[kind] = hook
}

// runCancelHook runs the cancel hook of the job's kind, if it has one and
// the job is unfinished.
func (c *Client) runCancelHook(ctx context.Context, jobID JobID) error {
	c.cancels.mu.RLock()
	n := len(c.cancels.byKind)
	c.cancels.mu.RUnlock()
	if n == 0 {
		return nil
	}
	// Read only what is needed, as it is: another application may have
	// written the job with fields docket's Job does not decode.
	raw, err := c.coll.FindOne(ctx, bson.D{{Key: "_id", Value: jobID.v}},
		options.FindOne().SetProjection(bson.D{{Key: "kind", Value: 1}, {Key: "state", Value: 1}, {Key: "args", Value: 1}})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil // Cancel says so
	}
	if err != nil {
		return err
	}
	kind, _ := raw.Lookup("kind").StringValueOK()
	state, _ := raw.Lookup("state").StringValueOK()
	c.cancels.mu.RLock()
	hook := c.cancels.byKind[kind]
	c.cancels.mu.RUnlock()
	if hook == nil || jobs.State(state).Finished() {
		return nil
	}
	args, _ := raw.Lookup("args").DocumentOK()
	return hook(ctx, jobID, args)
}

// cancelTries bounds how many times Cancel tries again when the job moves
// between available and running under it.
const cancelTries = 10

// Cancel stops a job: an available or blocked job is cancelled at once, and
// so are the jobs that wait for it (docs/WORKFLOWS.md); a running one is
// flagged, and ends cancelled at its next transition: its worker cancels
// the handler at its next heartbeat, and a failure, a release or a reap
// also end it cancelled. First, the cancel hook of the job's kind, if any
// (OnCancel), stops the application's side of its work.
func (c *Client) Cancel(ctx context.Context, id string) (CancelOutcome, error) {
	return c.CancelJobID(ctx, StringJobID(id))
}

// CancelJobID is Cancel for an id of any type (a job another application
// wrote with _id 7).
func (c *Client) CancelJobID(ctx context.Context, jobID JobID) (CancelOutcome, error) {
	if jobID.IsZero() {
		return 0, fmt.Errorf("queue: cancel job with no id: %w", ErrNotFound)
	}
	key, id := jobID.v, jobID.String()
	if err := c.runCancelHook(ctx, jobID); err != nil {
		return 0, fmt.Errorf("queue: cancel job %s: %w", id, err)
	}
	for range cancelTries {
		t := c.now()
		// A blocked job (waiting for its parents) is cancelled as an
		// available one is; finish unsets linking too (deps.go).
		res, err := c.coll.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: key}, {Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{jobs.StateAvailable, jobs.StateBlocked}}}}},
			store.AlsoIn(store.Finish(jobs.StateCancelled, t), "$unset", bson.E{Key: linkingField, Value: ""}))
		if err != nil {
			return 0, fmt.Errorf("queue: cancel job %s: %w", id, err)
		}
		if res.MatchedCount == 1 {
			c.settleNow(ctx, key)
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
			return 0, fmt.Errorf("queue: cancel job %s: %w %q: not one of blocked, available, running, succeeded, dead, cancelled", id, ErrUnknownState, st)
		}
		// It moved between available and running under us: try again.
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("queue: cancel job %s: %w", id, err)
		}
	}
	return 0, fmt.Errorf("queue: cancel job %s: it moved between available and running %d times while cancelling; try again", id, cancelTries)
}
