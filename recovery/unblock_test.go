package recovery_test

import (
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/stretchr/testify/require"
)

// A worker that died between a parent's finishing write and telling its
// dependents leaves the outcome due: the reaper's pass tells them, before
// retention, which would otherwise delete the parent.
func TestReaperSettlesDependentsLeftDue(t *testing.T) {
	b := reaperSetup(t)
	parent, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	child, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{After: []string{parent.ID}})
	require.NoError(t, err)
	j, err := store.Of(b.q).Claim(b.ctx, store.ClaimParams{Owner: "w", Queues: []string{"default"}, Kinds: []string{"k"}, Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, parent.ID, j.ID)
	require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(j))) // and the worker dies

	// Retention with no age: the parent is due, so kept until settled.
	_, err = b.reaper(t, recovery.ReaperConfig{SucceededRetention: time.Nanosecond}).RunOnce(b.ctx)
	require.NoError(t, err)
	c, err := b.q.Get(b.ctx, child.ID)
	require.NoError(t, err)
	require.Equal(t, jobs.StateAvailable, c.State)
}

// A builder that died before publishing its workflow: the reaper's pass
// leaves it alone within queue.DefaultWorkflowGrace, then cancels it
// whole, its tasks with it.
func TestReaperSweepsUnpublishedWorkflows(t *testing.T) {
	b := reaperSetup(t)
	// What the builder left: the gate, and the tasks waiting for it.
	now := time.Now()
	_, err := store.Of(b.q).Collection().InsertOne(b.ctx, map[string]any{
		"_id": "wf", "kind": queue.WorkflowGateKind, "queue": queue.WorkflowGateQueue, "state": "blocked",
		"args": map[string]any{}, "errors": []any{}, "dependents": true, "runAt": now, "createdAt": now, "updatedAt": now,
	})
	require.NoError(t, err)
	_, err = b.q.EnqueueMany(b.ctx, []queue.Insert{
		{Kind: "k", Opts: queue.InsertOpts{ID: "wf/a", After: []string{"wf"}}},
		{Kind: "k", Opts: queue.InsertOpts{ID: "wf/b", After: []string{"wf", "wf/a"}, AfterRunAnyway: true}},
	})
	require.NoError(t, err)

	r := b.reaper(t, recovery.ReaperConfig{})
	_, err = r.RunOnce(b.ctx)
	require.NoError(t, err)
	g, err := b.q.Get(b.ctx, "wf")
	require.NoError(t, err)
	require.Equal(t, jobs.StateBlocked, g.State)

	_, err = store.Of(b.q).Collection().UpdateOne(b.ctx, map[string]any{"_id": "wf"},
		map[string]any{"$set": map[string]any{"updatedAt": time.Now().Add(-queue.DefaultWorkflowGrace - time.Minute)}})
	require.NoError(t, err)
	_, err = r.RunOnce(b.ctx)
	require.NoError(t, err)
	for _, id := range []string{"wf", "wf/a", "wf/b"} {
		j, err := b.q.Get(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobs.StateCancelled, j.State, id)
	}
}
