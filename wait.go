package docket

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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
	// FailingFor bounds how long reads may keep failing with replies that
	// a read sent again may not meet (an election, a killed cursor, a
	// time limit): past it, WaitIdle returns the failure rather than read
	// again, as a scan that times out at every try would forever. Defaults
	// to DefaultWaitFailingFor.
	FailingFor time.Duration
}

// DefaultWaitFailingFor is WaitParams.FailingFor's default: longer than a
// replica set's election.
const DefaultWaitFailingFor = 30 * time.Second

// WaitIdle returns nil once no job the params select is running, available
// to run now, or blocked on parents that can still move now, or ctx's
// error when it ends first. It reads the jobs collection, so it sees the
// jobs of every process, inserted by any program; a client need not be
// started to call it. Jobs waiting for a later time (a retry's backoff, a
// delay) do not hold it up; the available jobs of a paused queue do.
//
// A blocked job (one enqueued after other jobs, docs/WORKFLOWS.md) holds
// it up while the engine can still move it without waiting for a later
// time: while it is being linked to its parents, or one of its parents
// (of any queue or kind) is running, available to run now, blocked and
// holding it up by this same rule, or finished with its dependents not
// told yet. A parent's success releases the job, which then runs; a dead
// or cancelled parent cancels it (unless it runs anyway): either way it
// leaves the blocked state, which the workers and the leader's pass do, so
// WaitIdle waits for them. A blocked job whose parents wait for a later
// time, or are an unpublished workflow's gate (its builder publishes it,
// or the leader's sweep cancels it in time), or are not in the collection,
// does not hold it up.
//
// A read that fails with a reply MongoDB's drivers read again after (an
// election, a network error, a cursor the server killed, a time limit) is
// read again until ctx ends, the error then wrapping ctx's and the read's,
// or until reads have failed so for p.FailingFor, when that failure is
// returned. Other errors are returned at once.
func (c *Client) WaitIdle(ctx context.Context, p WaitParams) error {
	if p.PollInterval < 0 {
		return errors.New("docket: WaitIdle: poll interval must not be negative")
	}
	p.PollInterval = cmp.Or(p.PollInterval, DefaultWaitPollInterval)
	if p.FailingFor <= 0 {
		p.FailingFor = DefaultWaitFailingFor
	}
	coll := store.Of(c.q).Collection()
	wait := min(10*time.Millisecond, p.PollInterval)
	var transient error        // the last read's transient failure, if it failed
	var failingSince time.Time // the first of the reads failing in a row
	for {
		busy, err := busyJob(ctx, coll, p, time.Now())
		switch {
		case err != nil && ctx.Err() == nil && transientRead(err) &&
			(transient == nil || time.Since(failingSince) < p.FailingFor):
			// Busy until a read says otherwise: a killed cursor's first
			// batch is not the whole collection.
			if transient == nil {
				failingSince = time.Now()
			}
			transient = err
		case err != nil:
			return waitError(err, transient)
		case !busy:
			return nil
		default:
			transient = nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return waitError(context.Cause(ctx), transient)
		case <-t.C:
		}
		wait = min(2*wait, p.PollInterval)
	}
}

// waitError is WaitIdle's error for err, with the transient failure of
// the read before it when there was one.
func waitError(err, transient error) error {
	if transient != nil {
		return fmt.Errorf("docket: WaitIdle: %w (the last read failed: %w)", err, transient)
	}
	return fmt.Errorf("docket: WaitIdle: %w", err)
}

// busyJob reports whether a job p selects is running or available at now,
// or blocked and able to move at now (blockedMoves).
func busyJob(ctx context.Context, coll *mongo.Collection, p WaitParams, now time.Time) (bool, error) {
	var sel bson.D
	if len(p.Queues) > 0 {
		sel = append(sel, bson.E{Key: "queue", Value: bson.D{{Key: "$in", Value: p.Queues}}})
	}
	if len(p.Kinds) > 0 {
		sel = append(sel, bson.E{Key: "kind", Value: bson.D{{Key: "$in", Value: p.Kinds}}})
	}
	if p.IgnorePeriodic {
		sel = append(sel, bson.E{Key: "_id", Value: bson.D{{Key: "$not", Value: bson.Regex{Pattern: "^periodic:"}}}})
	}
	filter := append(bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "state", Value: jobs.StateRunning}},
		bson.D{{Key: "state", Value: jobs.StateAvailable}, {Key: "runAt", Value: bson.D{{Key: "$lte", Value: now}}}},
	}}}, sel...)
	err := coll.FindOne(ctx, filter, options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err()
	if err == nil || !errors.Is(err, mongo.ErrNoDocuments) {
		return err == nil, err
	}
	return blockedMoves(ctx, coll, append(bson.D{{Key: "state", Value: jobs.StateBlocked}}, sel...), now)
}

// blockedMoves reports whether one of the blocked jobs filter matches can
// move at now, as the engine settles it (docs/WORKFLOWS.md): the job, or
// one of the parents it waits on, walking up the graph, moves by itself
// (jobMoves). A parent that waits for a later time, one not in the
// collection and an unpublished workflow's gate (which its builder
// publishes, or the leader's sweep cancels in time) move nothing now.
// It reads every blocked job filter matches, then their parents, a level
// of the graph a read.
func blockedMoves(ctx context.Context, coll *mongo.Collection, filter bson.D, now time.Time) (bool, error) {
	seen := map[string]bool{}
	next, moves, err := readMoves(ctx, coll, filter, now, seen)
	for !moves && err == nil && len(next) > 0 {
		var level []any
		// A level's parents are read waitBatch ids a command, so that no
		// $in grows with the graph.
		for batch := range slices.Chunk(next, waitBatch) {
			var ids []any
			ids, moves, err = readMoves(ctx, coll, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: batch}}}}, now, seen)
			if moves || err != nil {
				return moves, err
			}
			level = append(level, ids...)
		}
		next = level
	}
	return moves, err
}

// waitBatch bounds the parent ids of one read of blockedMoves.
const waitBatch = 500

// readMoves reads the jobs filter matches, one at a time: moves reports
// that one of them moves at now by itself; else next are the parents they
// wait on that seen did not hold yet (added to it).
func readMoves(ctx context.Context, coll *mongo.Collection, filter bson.D, now time.Time, seen map[string]bool) (next []any, moves bool, err error) {
	cur, err := coll.Find(ctx, filter, options.Find().SetProjection(bson.D{
		{Key: "state", Value: 1}, {Key: "runAt", Value: 1}, {Key: "after", Value: 1}, {Key: "waitingOn", Value: 1},
		{Key: store.LinkingField, Value: 1}, {Key: store.DependentsDueField, Value: 1},
	}))
	if err != nil {
		return nil, false, err
	}
	defer store.CloseCursor(ctx, cur)
	for cur.Next(ctx) {
		moves, after := jobMoves(cur.Current, now)
		if moves {
			return nil, true, nil
		}
		for _, v := range after {
			if id, ok := v.StringValueOK(); ok && !seen[id] {
				seen[id] = true
				next = append(next, id)
			}
		}
	}
	return next, false, cur.Err()
}

// jobMoves reports whether the job d moves at now by itself: it is
// running, available at now, finished with its dependents not told yet
// (dependentsDue), or blocked and linking. Else, when it is blocked, it
// returns the parents it waits on: those in waitingOn, or when that is
// empty (the settle that emptied it has not released it yet) those in
// after, of which the settle's is left due.
func jobMoves(d bson.Raw, now time.Time) (bool, []bson.RawValue) {
	st, _ := d.Lookup("state").StringValueOK()
	switch s := jobs.State(st); {
	case s == jobs.StateRunning:
		return true, nil
	case s == jobs.StateAvailable:
		runAt, ok := d.Lookup("runAt").TimeOK()
		return ok && !runAt.After(now), nil
	case s.Finished():
		_, err := d.LookupErr(store.DependentsDueField)
		return err == nil, nil
	case s == jobs.StateBlocked:
		if linking, _ := d.Lookup(store.LinkingField).BooleanOK(); linking {
			return true, nil
		}
		waiting, ok := d.Lookup("waitingOn").ArrayOK()
		if !ok {
			return false, nil
		}
		vals, _ := waiting.Values()
		if len(vals) == 0 {
			after, _ := d.Lookup("after").ArrayOK()
			vals, _ = after.Values()
		}
		return false, vals
	}
	return false, nil
}
