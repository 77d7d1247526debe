package queue

// The graph of a job for the workflow view: the jobs connected to it
// through after, walked by ids in commands of bounded size, then one page
// of them read whole.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// workflowOfJob reads a page of the graph of the job id: its jobs nearest
// first, walked by ids, the page's read whole, all counted by state.
func (c *Client) workflowOfJob(ctx context.Context, id JobID, p WorkflowPage) (WorkflowView, error) {
	order, atLeast, err := c.walkGraph(ctx, id, p.Walk)
	if err != nil {
		return WorkflowView{}, err
	}
	v := WorkflowView{Job: id, Offset: p.Offset, AtLeast: atLeast}
	counts := map[jobs.State]int{}
	for batch := range slices.Chunk(order, idChunk) {
		if err := c.countStates(ctx, idsIn(batch), counts); err != nil {
			return WorkflowView{}, fmt.Errorf("queue: count the graph of job %s: %w", id, err)
		}
	}
	v.setStates(counts)
	page := order[min(p.Offset, len(order)):min(p.Offset+p.Limit, len(order))]
	var tasks []WorkflowTask
	for batch := range slices.Chunk(page, idChunk) {
		cur, err := c.coll.Find(ctx, idsIn(batch), options.Find().SetProjection(workflowProjection))
		if err == nil {
			tasks, err = readWorkflowTasks(ctx, cur, tasks)
		}
		if err != nil {
			return WorkflowView{}, fmt.Errorf("queue: read the graph of job %s: %w", id, err)
		}
	}
	v.Tasks = topoOrder(tasks)
	return v, nil
}

// walkGraph lists the ids of the jobs connected to the job id through
// after, the job first, then level by level (its parents and dependents,
// theirs, and so on), each level in id order, at most walk of them;
// atLeast says it stopped there. Each job is asked for once per direction,
// in batches of at most idChunk ids, and each reply holds ids alone, at
// most walk+1 of them: a graph of many edges costs what its jobs cost.
func (c *Client) walkGraph(ctx context.Context, id JobID, walk int) (order []bson.RawValue, atLeast bool, err error) {
	err = c.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id.v}}, options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, false, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, false, fmt.Errorf("queue: read the graph of job %s: %w", id, err)
	}
	seen := map[string]bool{idKey(id.v): true}
	order = []bson.RawValue{id.v}
	for level := order; len(level) > 0 && !atLeast; {
		var next []bson.RawValue
		for batch := range slices.Chunk(level, idChunk) {
			found, err := c.relatives(ctx, batch, walk+1)
			if err != nil {
				return nil, false, fmt.Errorf("queue: read the graph of job %s: %w", id, err)
			}
			for _, v := range found {
				if seen[idKey(v)] {
					continue
				}
				if len(order)+len(next) >= walk {
					atLeast = true
					break
				}
				seen[idKey(v)] = true
				next = append(next, v)
			}
			if atLeast {
				break
			}
		}
		slices.SortFunc(next, compareIDs)
		order = append(order, next...)
		level = next
	}
	return order, atLeast, nil
}

// relatives are the ids of the parents of the jobs ids (each once: the
// server unwinds and groups their after arrays), then of their
// dependents, at most limit of each.
func (c *Client) relatives(ctx context.Context, ids []bson.RawValue, limit int) ([]bson.RawValue, error) {
	cur, err := c.coll.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$match", Value: idsIn(ids)}},
		{{Key: "$unwind", Value: "$" + afterField}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$" + afterField}}}},
		{{Key: "$limit", Value: limit}},
	})
	if err != nil {
		return nil, err
	}
	var out []bson.RawValue
	collect := func(d bson.Raw) error {
		out = append(out, d.Lookup("_id"))
		return nil
	}
	if err := store.EachRaw(ctx, cur, collect); err != nil {
		return nil, err
	}
	cur, err = c.coll.Find(ctx, bson.D{{Key: afterField, Value: bson.D{{Key: "$in", Value: bsonA(ids)}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(limit)))
	if err != nil {
		return nil, err
	}
	return out, store.EachRaw(ctx, cur, collect)
}

// idsIn is the filter of the jobs whose ids are ids.
func idsIn(ids []bson.RawValue) bson.D { return bson.D{idIn(bsonA(ids))} }

// compareIDs orders ids by type, strings by their text, others by their
// bytes.
func compareIDs(a, b bson.RawValue) int {
	if a.Type != b.Type {
		return int(a.Type) - int(b.Type)
	}
	if s, ok := a.StringValueOK(); ok {
		t, _ := b.StringValueOK()
		return strings.Compare(s, t)
	}
	return bytes.Compare(a.Value, b.Value)
}
