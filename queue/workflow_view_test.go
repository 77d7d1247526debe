package queue_test

import (
	"fmt"
	"testing"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestWorkflowTasksPages: a job's graph is walked up and down through
// after, at most Walk jobs (then it says "at least"), and read a page at
// a time, nearest the job first; a workflow's tasks are read a page at a
// time by creation, the gate on the first page; both count every task by
// state; an id that names neither is ErrNotFound.
func TestWorkflowTasksPages(t *testing.T) {
	b := setup(t)
	root := b.enqueueK(t, queue.InsertOpts{ID: "root"})
	for i := range 12 {
		b.enqueueK(t, queue.InsertOpts{ID: fmt.Sprintf("leaf-%02d", i), After: []string{root}})
	}
	b.enqueueK(t, queue.InsertOpts{ID: "grandchild", After: []string{"leaf-03"}})
	b.enqueueK(t, queue.InsertOpts{ID: "alone"})
	ids := func(v queue.WorkflowView) []string {
		var out []string
		for _, task := range v.Tasks {
			out = append(out, task.ID)
		}
		return out
	}

	v, err := b.q.WorkflowTasks(b.ctx, queue.StringJobID("grandchild"), queue.WorkflowPage{Limit: 100})
	require.NoError(t, err)
	require.Len(t, v.Tasks, 14, "up to the root, and down to its other leaves")
	require.Equal(t, "root", v.Tasks[0].ID)
	require.Equal(t, 14, v.Total)
	require.False(t, v.AtLeast)
	require.True(t, v.Job.Equal(queue.StringJobID("grandchild")))
	require.Equal(t, []queue.StateCount{{State: "blocked", N: 13}, {State: "available", N: 1}}, v.States)

	var all []string
	for off := 0; off < 14; off += 3 {
		v, err = b.q.WorkflowTasks(b.ctx, queue.StringJobID("leaf-05"), queue.WorkflowPage{Offset: off, Limit: 3})
		require.NoError(t, err)
		require.Equal(t, off, v.Offset)
		require.Equal(t, 14, v.Total)
		require.Len(t, v.Tasks, min(3, 14-off))
		all = append(all, ids(v)...)
	}
	require.Equal(t, []string{"root", "leaf-00", "leaf-05"}, all[:3], "nearest first, parents first")
	require.ElementsMatch(t, ids(must(b.q.WorkflowTasks(b.ctx, queue.StringJobID("leaf-05"), queue.WorkflowPage{Limit: 100}))), all, "the pages hold every job once")

	v, err = b.q.WorkflowTasks(b.ctx, queue.StringJobID("root"), queue.WorkflowPage{Limit: 1, Walk: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"root"}, ids(v))
	require.Equal(t, 10, v.Total, "the walk stops at 10 jobs")
	require.True(t, v.AtLeast)

	_, err = store.Of(b.q).Collection().UpdateMany(b.ctx, bson.M{"_id": bson.M{"$regex": "^leaf-"}}, bson.M{"$set": bson.M{"workflow": "root"}})
	require.NoError(t, err)
	v, err = b.q.WorkflowTasks(b.ctx, queue.StringJobID("root"), queue.WorkflowPage{Limit: 5})
	require.NoError(t, err)
	require.Equal(t, "root", v.Workflow, "a workflow's id before a job's")
	require.True(t, v.Gate, "the job of the workflow's id is listed with its tasks, as a builder's gate")
	require.Equal(t, []string{"root", "leaf-00", "leaf-01", "leaf-02", "leaf-03", "leaf-04"}, ids(v))
	require.Equal(t, 5, v.Shown())
	require.Equal(t, 12, v.Total)
	require.Equal(t, []queue.StateCount{{State: "blocked", N: 12}}, v.States)
	v, err = b.q.WorkflowTasks(b.ctx, queue.StringJobID("root"), queue.WorkflowPage{Offset: 10, Limit: 5})
	require.NoError(t, err)
	require.False(t, v.Gate, "the gate is on the first page")
	require.Equal(t, []string{"leaf-10", "leaf-11"}, ids(v))
	v, err = b.q.WorkflowTasks(b.ctx, queue.StringJobID("root"), queue.WorkflowPage{Offset: 20, Limit: 5})
	require.NoError(t, err)
	require.Empty(t, v.Tasks)
	require.Equal(t, 12, v.Total)

	for _, p := range []queue.WorkflowPage{{}, {Limit: queue.MaxWorkflowPage + 1}, {Offset: -1, Limit: 1}} {
		_, err = b.q.WorkflowTasks(b.ctx, queue.StringJobID("root"), p)
		require.Error(t, err, "%+v", p)
	}
	_, err = b.q.WorkflowTasks(b.ctx, queue.StringJobID("nope"), queue.WorkflowPage{Limit: 5})
	require.ErrorIs(t, err, queue.ErrNotFound)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestWorkflowTasksManyStates: a workflow whose tasks another application
// wrote in 70 states of its own, and one not a string, is counted whole,
// in at most 64 states and "" for the rest.
func TestWorkflowTasksManyStates(t *testing.T) {
	b := setup(t)
	docs := []any{bson.D{{Key: "_id", Value: "int"}, {Key: "workflow", Value: "odd"}, {Key: "state", Value: int32(3)}}}
	for i := range 70 {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprint(i)}, {Key: "workflow", Value: "odd"}, {Key: "state", Value: fmt.Sprintf("s-%02d", i)}})
	}
	_, err := store.Of(b.q).Collection().InsertMany(b.ctx, docs)
	require.NoError(t, err)
	v, err := b.q.WorkflowTasks(b.ctx, queue.StringJobID("odd"), queue.WorkflowPage{Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 71, v.Total)
	require.LessOrEqual(t, len(v.States), 65)
	sum := 0
	for _, s := range v.States {
		sum += s.N
	}
	require.Equal(t, 71, sum)
	require.Equal(t, jobs.State(""), v.States[len(v.States)-1].State, "the others last, under \"\"")
}
