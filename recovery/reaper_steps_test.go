package recovery_test

import (
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestReaperPassGoesOnPastAFailedStep: the reaper's first step, the
// re-queue of expired leases, is refused at every pass (NotWritablePrimary:
// on a replica set, a pass long enough to meet an election each time).
// The steps after it do not depend on it and must still run: a parent
// left due by a worker that stopped before it settled it is settled, its
// dependent released; a job past its retention deleted. A pass that
// stopped at the failed step would leave the dependent blocked for good
// (a workflow's tasks behind their published gate).
func TestReaperPassGoesOnPastAFailedStep(t *testing.T) {
	b := reaperSetup(t)
	old, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	b.runJob(t, old.ID)
	parent, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{Priority: 1})
	require.NoError(t, err)
	child, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{After: []string{parent.ID}})
	require.NoError(t, err)
	b.runJob(t, parent.ID) // and the process stops before it settles

	r := b.reaper(t, recovery.ReaperConfig{SucceededRetention: time.Nanosecond})
	refused := mongo.CommandError{Code: 10107, Name: "NotWritablePrimary", Message: "not primary"}
	r.SetStep(func(name string) error {
		if name == "reap" {
			return refused
		}
		return nil
	})
	for range 2 {
		_, err = r.RunOnce(b.ctx)
		var got mongo.CommandError
		require.ErrorAs(t, err, &got)
		require.True(t, got.HasErrorCode(10107), "%v", err)
	}
	c, err := b.q.Get(b.ctx, child.ID)
	require.NoError(t, err)
	require.Equal(t, jobs.StateAvailable, c.State, "the dependent stayed blocked behind the failed step")
	_, err = b.q.Get(b.ctx, old.ID)
	require.ErrorIs(t, err, queue.ErrNotFound, "retention did not run")
}

// runJob claims the next job, which must be id, and completes it.
func (b *reaperBundle) runJob(t *testing.T, id string) {
	t.Helper()
	j, err := store.Of(b.q).Claim(b.ctx, store.ClaimParams{Owner: "w", Queues: []string{"default"}, Kinds: []string{"k"}, Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, id, j.ID)
	require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(j)))
}

// TestReaperSweepsWorkflowsWhileSettlesFail: the pass's settles of jobs
// left due fail at every pass (a write refused each time). The sweep of
// workflows left unpublished past their grace is a step of its own and
// still runs: the workflow is cancelled, its task with it.
func TestReaperSweepsWorkflowsWhileSettlesFail(t *testing.T) {
	b := reaperSetup(t)
	old := time.Now().Add(-queue.DefaultWorkflowGrace - time.Minute)
	_, err := store.Of(b.q).Collection().InsertOne(b.ctx, map[string]any{
		"_id": "wf", "kind": queue.WorkflowGateKind, "queue": queue.WorkflowGateQueue, "state": "blocked",
		"args": map[string]any{}, "errors": []any{}, "dependents": true, "runAt": old, "createdAt": old, "updatedAt": old,
	})
	require.NoError(t, err)
	_, err = b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{ID: "wf/a", After: []string{"wf"}})
	require.NoError(t, err)

	r := b.reaper(t, recovery.ReaperConfig{})
	r.SetStep(func(name string) error {
		if name == "dependents" {
			return mongo.CommandError{Code: 10107, Name: "NotWritablePrimary", Message: "not primary"}
		}
		return nil
	})
	_, err = r.RunOnce(b.ctx)
	require.Error(t, err)
	for _, id := range []string{"wf", "wf/a"} {
		j, err := b.q.Get(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobs.StateCancelled, j.State, id)
	}
}
