package queue

// Results: what a handler sets with jobs.SetResult, stored by the write
// that records its job's success, read by the jobs that wait for it.

import (
	"context"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// resultKey is the context key of a job's result for Complete.
type resultKey struct{}

// WithResult returns ctx carrying result, which Complete under it stores
// in the job's result field by the write that records its success. A
// worker passes what the handler set (jobs.SetResult).
func WithResult(ctx context.Context, result bson.Raw) context.Context {
	if result == nil {
		return ctx
	}
	return context.WithValue(ctx, resultKey{}, result)
}

// resultOf is the $set element of the result ctx carries, nil without.
func resultOf(ctx context.Context) []bson.E {
	if r, ok := ctx.Value(resultKey{}).(bson.Raw); ok {
		return []bson.E{{Key: "result", Value: r}}
	}
	return nil
}

// Results returns the results of the jobs ids (a job's After: its
// parents) that have one, by id: a handler reads its parents' results
// with it. A job without a result, or not in the collection, is absent.
func (c *Client) Results(ctx context.Context, ids []string) (map[string]bson.Raw, error) {
	out := make(map[string]bson.Raw, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	cur, err := c.coll.Find(ctx, bson.D{
		{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}},
		{Key: "result", Value: bson.D{{Key: "$type", Value: "object"}}},
	}, options.Find().SetProjection(bson.D{{Key: "result", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("queue: read the results of %d jobs: %w", len(ids), err)
	}
	err = eachRaw(ctx, cur, func(d bson.Raw) error {
		id, ok := d.Lookup("_id").StringValueOK()
		if r, isDoc := d.Lookup("result").DocumentOK(); ok && isDoc {
			out[id] = slices.Clone(r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: read the results of %d jobs: %w", len(ids), err)
	}
	return out, nil
}
