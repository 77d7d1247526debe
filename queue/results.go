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
