package docket

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
)

// UseInsert adds middleware around every insert of the client (Insert,
// InsertMany; not InsertWorkflow); the first given runs outermost. It may
// be called at any time: it applies to the inserts that begin after it.
func (c *Client) UseInsert(mw ...InsertMiddleware) error {
	for _, m := range mw {
		if m == nil {
			return errors.New("docket: UseInsert: nil middleware")
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.insertMiddleware = append(c.insertMiddleware, mw...)
	return nil
}

// wrapInsert returns insert wrapped in the client's insert middleware.
func (c *Client) wrapInsert(insert InsertFunc) InsertFunc {
	c.mu.Lock()
	mw := slices.Clone(c.insertMiddleware)
	c.mu.Unlock()
	for i := len(mw) - 1; i >= 0; i-- {
		insert = mw[i](insert)
	}
	return insert
}

// ErrQueueFull is wrapped by the error of an Insert into a bounded queue
// (QueueSetCapacity, Config.Capacities) that has no free capacity: the job was not
// added. The error is a *QueueFullError naming the queue and its
// capacity; an InsertMany reports it per job (InsertResult.Err).
var ErrQueueFull = queue.ErrQueueFull

// QueueFullError is the error of an insert refused by a full bounded
// queue: its Queue and Capacity. errors.Is(err, ErrQueueFull) holds.
type QueueFullError = queue.QueueFullError

// ValidationError is the error of an Insert or InsertMany refused before
// any write: Index is the job's place in the batch, Field what is wrong
// with it and Reason why; it wraps the args' Validate error, if that was
// the reason.
type ValidationError = queue.ValidationError

// ErrOutcomeUnknown is wrapped by the error of a write whose outcome could
// not be learned, the read that would have told having failed too: an
// InsertMany's InsertResult.Err for a job that may or may not have been
// inserted (inserting it again with the same InsertOpts.ID adds it at most
// once), and a worker's renewal or final write of an attempt, which the
// worker tries again.
var ErrOutcomeUnknown = queue.ErrOutcomeUnknown

// ErrNotInserted is wrapped by the InsertResult.Err of a job a failed
// InsertMany did not insert: the server refused it, the call stopped
// before it, or it was not in the collection when looked up after the
// failure. Inserting it again with the same InsertOpts.ID is safe.
var ErrNotInserted = queue.ErrNotInserted

// InsertManyError is the error of an InsertMany that failed after its
// jobs were validated: how many jobs are in the collection (inserted,
// there already, their unique key held), how many are not (NotInserted,
// Refused by a full queue) and how many are Unknown; Err is what failed.
// The results come with it, one per job.
type InsertManyError = queue.EnqueueError

// Insert adds one job of the kind args names. Args that have a Validate
// method (jobs.Validator, on the value or a pointer) are checked with it
// first, as the worker checks them: args it refuses are not inserted, and
// the error is a *ValidationError naming the kind that wraps
// Validate's error (errors.Is and errors.As reach it). Its id is made by
// the client, so after an error the job may or may not exist
// (ErrOutcomeUnknown says so): the result comes with the error when the
// job got as far as an id, and inserting again with that InsertOpts.ID
// adds it at most once.
func (c *Client) Insert(ctx context.Context, args jobs.Args, opts *InsertOpts) (InsertResult, error) {
	res, err := c.InsertMany(ctx, []InsertManyParams{{Args: args, Opts: opts}})
	if len(res) != 1 {
		return InsertResult{}, err
	}
	return res[0], err
}

// InsertMany adds jobs in insert commands of at most 1,000 jobs and 4 MiB
// of args each (queue.ChunkJobs, queue.ChunkBytes); a job whose unique key
// is held costs a read of its own, which finds the holder. Every job is validated before the first write, its args with
// their Validate too (see Insert): when one is invalid, none is inserted,
// and the error is a *ValidationError whose Index is that job's.
// Insert and InsertMany run through the client's insert middleware
// (UseInsert).
func (c *Client) InsertMany(ctx context.Context, params []InsertManyParams) ([]InsertResult, error) {
	res, err := c.wrapInsert(c.insertMany)(ctx, params)
	if err == nil && len(res) != len(params) {
		// An insert middleware broke its contract: the jobs may have been
		// inserted, and their results are not known.
		return nil, fmt.Errorf("docket: InsertMany: the insert middleware returned %d results for %d jobs: %w", len(res), len(params), ErrOutcomeUnknown)
	}
	return res, err
}

// insertMany is InsertMany without the insert middleware.
func (c *Client) insertMany(ctx context.Context, params []InsertManyParams) ([]InsertResult, error) {
	ins := make([]queue.Insert, len(params))
	for i, p := range params {
		if err := validateArgs(i, p.Args); err != nil {
			return nil, err
		}
		var o InsertOpts
		if p.Opts != nil {
			o = *p.Opts
		}
		ins[i] = queue.Insert{Kind: p.Args.Kind(), Args: p.Args, Opts: InsertOptsFor(p.Args, o)}
	}
	return c.q.EnqueueMany(ctx, ins)
}
