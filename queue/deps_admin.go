package queue

// The operator's side of workflows (deps.go): what Retry, Delete and
// docketctl show do with jobs that wait for others or that others wait
// for.

import (
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
	"go.uber.org/zap"
)

// ErrHasDependents is an operator's action refused on a job that other
// jobs wait for, or waited for: deleting it before they have been told of
// its outcome would strand them, and running a succeeded one again would
// not run them again.
var ErrHasDependents = errors.New("other jobs wait for it")

// ErrWaitingForParents is Retry refused on a blocked job: it runs when its
// parents have succeeded.
var ErrWaitingForParents = errors.New("job waits for its parents")

// retryFilter matches the job of r for Retry's write: still in the state
// it was decided on, without parents (retryWithParents retries those) and,
// when it succeeded, without dependents.
func retryFilter(r *ActionResult) bson.D {
	return unlessDependents(r, bson.D{{Key: "_id", Value: r.JobID.v}, {Key: "state", Value: r.From}, {Key: afterField + ".0", Value: bson.D{{Key: "$exists", Value: false}}}})
}

// unlessDependents adds to the filter f of Retry's write, for a job r that
// succeeded, that it still has no dependents: one linked since was
// released by that success, and would not run again.
func unlessDependents(r *ActionResult, f bson.D) bson.D {
	if r.From == string(jobs.StateSucceeded) {
		f = append(f, noDependents, store.NotDue)
	}
	return f
}

// retryWithParents is Retry for a job that waits, or waited, for
// parents, or that others wait for. done is false when Retry's own write
// is the one to make.
func (c *Client) retryWithParents(ctx context.Context, r *ActionResult, t time.Time, limits map[string]int) (done bool, err error) {
	if r.From == string(jobs.StateBlocked) {
		r.Err = ErrWaitingForParents
		return true, nil
	}
	raw, err := c.coll.FindOne(ctx, bson.D{{Key: "_id", Value: r.JobID.v}}, options.FindOne().SetProjection(bson.D{
		{Key: afterField, Value: 1}, {Key: runAnywayField, Value: 1}, {Key: dependentsField, Value: 1}, {Key: dependentsDueField, Value: 1},
		{Key: workflowField, Value: 1},
	})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		r.Err = fmt.Errorf("it was deleted meanwhile")
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("queue: retry job %s: %w", r.ID, err)
	}
	if err := depsStep(ctx, "retry:read"); err != nil {
		return false, err
	}
	_, marked := raw.LookupErr(dependentsField)
	_, due := raw.LookupErr(dependentsDueField)
	if r.From == string(jobs.StateSucceeded) && (marked == nil || due == nil) {
		r.Err = fmt.Errorf("%w: it succeeded and they were released; enqueue a new job to run it again", ErrHasDependents)
		return true, nil
	}
	afterRaw, err := raw.LookupErr(afterField)
	if err != nil {
		return false, nil
	}
	after, ok := stringIDs(afterRaw)
	if !ok || len(after) == 0 {
		return false, nil
	}
	if _, bounded := limits[r.queue]; bounded {
		r.Err = fmt.Errorf("a job with parents in a bounded queue is not retried: enqueue it again")
		return true, nil
	}
	runAnyway, _ := raw.Lookup(runAnywayField).BooleanOK()
	update := rerun(jobs.StateBlocked, jobs.State(r.From), t,
		bson.E{Key: waitingOnField, Value: after}, bson.E{Key: linkingField, Value: true})
	// Conditioned on what was read: its state and its parents.
	filter := unlessDependents(r, bson.D{{Key: "_id", Value: r.JobID.v}, {Key: "state", Value: r.From}, {Key: afterField, Value: afterRaw}})
	res, err := c.coll.UpdateOne(ctx, filter, update)
	switch {
	case mongo.IsDuplicateKeyError(err):
		r.Err = ErrUniqueKeyHeld
		return true, nil
	case err != nil:
		return false, fmt.Errorf("queue: retry job %s: %w", r.ID, err)
	case res.MatchedCount == 0 && r.From == string(jobs.StateSucceeded):
		r.Err = fmt.Errorf("its state changed from %s meanwhile, or %w now; left alone", r.From, ErrHasDependents)
		return true, nil
	case res.MatchedCount == 0:
		r.Err = fmt.Errorf("its state changed from %s meanwhile; left alone", r.From)
		return true, nil
	}
	// A task's gate cancels it even when it runs anyway, as the leader's
	// link (readDependent) has it: one deleted since must not let it run.
	gate, _ := raw.Lookup(workflowField).StringValueOK()
	if err := c.link(ctx, []dependent{{id: r.JobID.v, waitingOn: after, runAnyway: runAnyway, gate: gate}}); err != nil {
		c.log.Warn("a retried job waits for its parents again; linking it failed, the leader's pass links it", zap.String("job_id", r.ID), zap.Error(err))
	}
	return true, nil
}

// deletable is what Delete adds to its filter for a job in state s: none
// of the jobs that wait for it may be left waiting for nothing.
func deletable(s jobs.State) bson.D {
	if s.Finished() {
		return bson.D{store.NotDue}
	}
	return bson.D{store.NotDue, noDependents}
}

// whyNotDeleted says why Delete's write matched nothing for r.
func (c *Client) whyNotDeleted(ctx context.Context, r *ActionResult) error {
	raw, err := c.coll.FindOne(ctx, bson.D{{Key: "_id", Value: r.JobID.v}, {Key: "state", Value: r.From}},
		options.FindOne().SetProjection(bson.D{{Key: dependentsField, Value: 1}, {Key: dependentsDueField, Value: 1}})).Raw()
	if err == nil {
		if _, due := raw.LookupErr(dependentsDueField); due == nil {
			return fmt.Errorf("%w: they have not been told of its outcome yet; try again shortly", ErrHasDependents)
		}
		if _, marked := raw.LookupErr(dependentsField); marked == nil && !jobs.State(r.From).Finished() {
			return fmt.Errorf("%w: cancel it instead, which cancels them too", ErrHasDependents)
		}
	}
	return fmt.Errorf("its state changed from %s meanwhile; left alone", r.From)
}

// Relative is a parent or a dependent of a job, as an operator sees it.
type Relative struct {
	// ID is the related job's id.
	ID string
	// State is its state; "" when it is not in the collection.
	State jobs.State
	// Waiting is, for a parent, that the job still waits for it.
	Waiting bool
}

// Relatives returns the parents of the job j (its after, in order, each
// with its state) and up to limit of the jobs that wait, or waited, for it
// (oldest first); more reports that there are others.
func (c *Client) Relatives(ctx context.Context, j JobSummary, limit int) (parents, dependents []Relative, more bool, err error) {
	after, _ := stringIDs(j.Raw.Lookup(afterField))
	waiting, _ := stringIDs(j.Raw.Lookup(waitingOnField))
	if len(after) > 0 {
		states, _, err := c.statesOf(ctx, bsonA(after))
		if err != nil {
			return nil, nil, false, fmt.Errorf("queue: read the parents of job %s: %w", j.ID, err)
		}
		for _, p := range after {
			parents = append(parents, Relative{ID: p, State: states[p], Waiting: slices.Contains(waiting, p)})
		}
	}
	cur, err := c.coll.Find(ctx, bson.D{{Key: afterField, Value: j.JobID.v}}, options.Find().
		SetProjection(bson.D{{Key: "state", Value: 1}}).SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(limit)+1))
	if err != nil {
		return nil, nil, false, fmt.Errorf("queue: find the dependents of job %s: %w", j.ID, err)
	}
	err = store.EachRaw(ctx, cur, func(d bson.Raw) error {
		st, _ := d.Lookup("state").StringValueOK()
		dependents = append(dependents, Relative{ID: JobIDOf(d).String(), State: jobs.State(st)})
		return nil
	})
	if err != nil {
		return nil, nil, false, fmt.Errorf("queue: find the dependents of job %s: %w", j.ID, err)
	}
	if len(dependents) > limit {
		dependents, more = dependents[:limit], true
	}
	return parents, dependents, more, nil
}
