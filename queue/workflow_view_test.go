package queue_test

import (
	"fmt"
	"testing"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestWorkflowTasksBounds: a job's graph is walked up and down through
// after, at most ten times the limit, and says how many it left out
// (exactly, or at least that many when the walk stopped); a workflow's
// tasks are counted when there are more than the limit; an id that names
// neither is ErrNotFound.
func TestWorkflowTasksBounds(t *testing.T) {
	b := setup(t)
	root := b.enqueueK(t, queue.InsertOpts{ID: "root"})
	for i := range 12 {
		b.enqueueK(t, queue.InsertOpts{ID: fmt.Sprintf("leaf-%02d", i), After: []string{root}})
	}
	b.enqueueK(t, queue.InsertOpts{ID: "grandchild", After: []string{"leaf-03"}})
	b.enqueueK(t, queue.InsertOpts{ID: "alone"})

	v, err := b.q.WorkflowTasks(b.ctx, queue.StringJobID("grandchild"), 100)
	require.NoError(t, err)
	require.Len(t, v.Tasks, 14, "up to the root, and down to its other leaves")
	require.Equal(t, "root", v.Tasks[0].ID)
	require.Equal(t, 0, v.LeftOut)
	require.False(t, v.AtLeast)
	require.True(t, v.Job.Equal(queue.StringJobID("grandchild")))

	v, err = b.q.WorkflowTasks(b.ctx, queue.StringJobID("leaf-05"), 3)
	require.NoError(t, err)
	require.Len(t, v.Tasks, 3)
	require.Equal(t, 11, v.LeftOut)
	require.False(t, v.AtLeast)

	v, err = b.q.WorkflowTasks(b.ctx, queue.StringJobID("root"), 1)
	require.NoError(t, err)
	require.Equal(t, []string{"root"}, []string{v.Tasks[0].ID})
	require.Equal(t, 9, v.LeftOut, "the walk stops at 10 jobs")
	require.True(t, v.AtLeast)

	_, err = store.Of(b.q).Collection().UpdateMany(b.ctx, bson.M{"_id": bson.M{"$regex": "^leaf-"}}, bson.M{"$set": bson.M{"workflow": "root"}})
	require.NoError(t, err)
	v, err = b.q.WorkflowTasks(b.ctx, queue.StringJobID("root"), 5)
	require.NoError(t, err)
	require.Equal(t, "root", v.Workflow, "a workflow's id before a job's")
	require.True(t, v.Gate, "the job of the workflow's id is listed with its tasks, as a builder's gate")
	require.Len(t, v.Tasks, 6)
	require.Equal(t, []string{"root", "leaf-00"}, []string{v.Tasks[0].ID, v.Tasks[1].ID})
	require.Equal(t, 7, v.LeftOut)

	_, err = b.q.WorkflowTasks(b.ctx, queue.StringJobID("nope"), 5)
	require.ErrorIs(t, err, queue.ErrNotFound)
}
