package queue

// Results: what a handler sets with jobs.SetResult, stored by the write
// that records its job's success, read by the jobs that wait for it.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ErrNoResult is wrapped by ParentResult.Decode's error for a parent that
// has no result: its handler set none (jobs.SetResult), or the parent is
// no longer in the collection.
var ErrNoResult = errors.New("no result")

// ParentResult is the result of one parent of a job, as its handler reads
// it.
type ParentResult struct {
	// ID is the parent's id.
	ID string
	// Result is what the parent's handler set with jobs.SetResult; nil
	// when it set none, or the parent is no longer in the collection.
	Result bson.Raw
}

// Decode decodes the parent's result into v, as bson.Unmarshal does. A
// parent without a result is an error naming it that wraps ErrNoResult,
// not a decoding error.
func (p ParentResult) Decode(v any) error {
	if p.Result == nil {
		return fmt.Errorf("parent %s: %w: it set none, or is no longer in the collection", p.ID, ErrNoResult)
	}
	if err := bson.Unmarshal(p.Result, v); err != nil {
		return fmt.Errorf("parent %s: decode its result: %w", p.ID, err)
	}
	return nil
}

// ParentResults returns the results of job's parents, one per parent in
// the order of job.After, for its handler to read. A workflow task's
// job.After also holds its workflow's gate, which it waits for but which
// is no task and has no result: it is left out, so the parents listed are
// the tasks it was added after.
func (c *Client) ParentResults(ctx context.Context, job *jobs.Job) ([]ParentResult, error) {
	if len(job.After) == 0 {
		return nil, nil
	}
	ids := append(slices.Clone(job.After), job.ID)
	cur, err := c.coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: "result", Value: 1}, {Key: workflowField, Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("queue: read the results of the parents of %s: %w", job.ID, err)
	}
	results := map[string]bson.Raw{}
	var gate string
	err = store.EachRaw(ctx, cur, func(d bson.Raw) error {
		id, ok := d.Lookup("_id").StringValueOK()
		switch r, isDoc := d.Lookup("result").DocumentOK(); {
		case ok && id == job.ID:
			gate, _ = d.Lookup(workflowField).StringValueOK() // of another type: no gate
		case ok && isDoc:
			results[id] = r
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: read the results of the parents of %s: %w", job.ID, err)
	}
	out := make([]ParentResult, 0, len(job.After))
	for _, id := range job.After {
		if id != gate {
			out = append(out, ParentResult{ID: id, Result: results[id]})
		}
	}
	return out, nil
}
