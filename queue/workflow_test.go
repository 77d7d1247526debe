package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// diamond is a workflow a → (b1, b2) → c, with d after b1 that runs
// anyway: the task a gate's cancel must stop though its rule lets it run.
func diamond(id string) *queue.Workflow {
	wf := queue.NewWorkflow(id)
	a := wf.Add("a", "k", nil, queue.TaskOpts{})
	b1 := wf.Add("b1", "k", nil, queue.TaskOpts{After: []string{a}})
	b2 := wf.Add("b2", "k", nil, queue.TaskOpts{After: []string{a}})
	wf.Add("c", "k", nil, queue.TaskOpts{After: []string{b1, b2}})
	wf.Add("d", "k", nil, queue.TaskOpts{After: []string{b1}, AfterRunAnyway: true})
	return wf
}

var diamondTasks = []string{"a", "b1", "b2", "c", "d"}

func taskIDs(wf string, names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = queue.TaskID(wf, n)
	}
	return out
}

// errDied is the error a step hook returns to stop the builder there.
var errDied = errors.New("builder died")

// stopAt returns ctx whose InsertWorkflow stops after step, first running
// meanwhile (what others do while the builder is stalled there).
func (b bundle) stopAt(step string, meanwhile func()) context.Context {
	return queue.WithWorkflowStep(b.ctx, func(_ context.Context, s string) error {
		if s != step {
			return nil
		}
		if meanwhile != nil {
			meanwhile()
		}
		return errDied
	})
}

// resumeAt is stopAt for a builder that stalls at step and then goes on.
func (b bundle) resumeAt(step string, meanwhile func()) context.Context {
	return queue.WithWorkflowStep(b.ctx, func(_ context.Context, s string) error {
		if s == step {
			meanwhile()
		}
		return nil
	})
}

// drainInOrder claims and succeeds every runnable task, checking that each
// runs after its parents, and returns the order.
func (b bundle) drainInOrder(t *testing.T) []string {
	t.Helper()
	var order []string
	done := map[string]bool{}
	for {
		j := b.claim(t, claimAll)
		if j == nil {
			return order
		}
		for _, p := range j.After {
			if strings.Contains(p, queue.TaskSeparator) {
				require.True(t, done[p], "%s ran before its parent %s", j.ID, p)
			}
		}
		b.end(t, j, jobs.StateSucceeded)
		_, err := b.q.SettleDependentsOf(b.ctx, j.ID)
		require.NoError(t, err)
		done[j.ID] = true
		order = append(order, j.ID)
	}
}

func (b bundle) sweep(t *testing.T) int {
	t.Helper()
	n, err := b.q.SweepWorkflows(b.ctx, 0, 100)
	require.NoError(t, err)
	return n
}

func TestWorkflowRunsInOrderOncePublished(t *testing.T) {
	b := setup(t)
	res, err := b.q.InsertWorkflow(b.ctx, diamond("wf1"))
	require.NoError(t, err)
	require.Equal(t, "wf1", res.ID)
	require.Equal(t, "wf1/c", res.Tasks["c"])
	order := b.drainInOrder(t)
	require.ElementsMatch(t, taskIDs("wf1", diamondTasks...), order)
	require.Equal(t, "wf1/a", order[0])

	// Every task carries the workflow's fields; the gate is published.
	raw, err := store.Of(b.q).Collection().FindOne(b.ctx, bson.M{"_id": "wf1/b2"}).Raw()
	require.NoError(t, err)
	require.Equal(t, "wf1", raw.Lookup("workflow").StringValue())
	require.Equal(t, "b2", raw.Lookup("workflowTask").StringValue())
	b.requireState(t, jobs.StateSucceeded, "wf1")
	require.Equal(t, queue.WorkflowGateKind, b.get(t, "wf1").Kind)
}

// A builder that dies after any write before the publish leaves nothing
// runnable; calling it again with the same id finishes it.
func TestWorkflowStoppedBeforePublishRunsNothingUntilRetried(t *testing.T) {
	for _, step := range []string{"gate", "tasks"} {
		t.Run(step, func(t *testing.T) {
			b := setup(t)
			_, err := b.q.InsertWorkflow(b.stopAt(step, nil), diamond("wf"))
			require.ErrorIs(t, err, errDied)
			b.requireNothingToClaim(t)
			// The leader's passes change nothing within the grace.
			_, err = b.q.SettleDependents(b.ctx, 0, 100)
			require.NoError(t, err)
			n, err := b.q.SweepWorkflows(b.ctx, time.Hour, 100)
			require.NoError(t, err)
			require.Zero(t, n)
			b.requireNothingToClaim(t)

			res, err := b.q.InsertWorkflow(b.ctx, diamond("wf"))
			require.NoError(t, err)
			require.False(t, res.Existed)
			require.ElementsMatch(t, taskIDs("wf", diamondTasks...), b.drainInOrder(t))
		})
	}
}

// A builder that dies after any write before the publish, once the grace
// has passed, is cancelled whole by the leader's pass, the task that runs
// anyway too; a retry then says so and runs nothing.
func TestWorkflowStoppedBeforePublishIsSweptWhole(t *testing.T) {
	for _, step := range []string{"gate", "tasks"} {
		t.Run(step, func(t *testing.T) {
			b := setup(t)
			_, err := b.q.InsertWorkflow(b.stopAt(step, nil), diamond("wf"))
			require.ErrorIs(t, err, errDied)
			require.Equal(t, 1, b.sweep(t))
			b.requireState(t, jobs.StateCancelled, "wf")
			_, err = b.q.SettleDependents(b.ctx, 0, 100)
			require.NoError(t, err)
			if step == "tasks" {
				b.requireState(t, jobs.StateCancelled, taskIDs("wf", diamondTasks...)...)
			}
			b.requireNothingToClaim(t)

			_, err = b.q.InsertWorkflow(b.ctx, diamond("wf"))
			require.ErrorIs(t, err, queue.ErrWorkflowCancelled)
			b.requireNothingToClaim(t)
		})
	}
}

// A builder stalled at any step while the leader's pass cancels its
// workflow, then resuming with what it had: its publish fails, and every
// task it inserts late is cancelled, none runs.
func TestWorkflowSweptWhileBuilderStalled(t *testing.T) {
	for _, step := range []string{"gate", "tasks"} {
		t.Run(step, func(t *testing.T) {
			b := setup(t)
			ctx := b.resumeAt(step, func() { require.Equal(t, 1, b.sweep(t)) })
			_, err := b.q.InsertWorkflow(ctx, diamond("wf"))
			require.ErrorIs(t, err, queue.ErrWorkflowCancelled)
			_, err = b.q.SettleDependents(b.ctx, 0, 100)
			require.NoError(t, err)
			b.requireState(t, jobs.StateCancelled, taskIDs("wf", diamondTasks...)...)
			b.requireNothingToClaim(t)
		})
	}
}

// The publish applied but its reply was lost: a retry finds it published
// and the tasks run once.
func TestWorkflowPublishReplyLost(t *testing.T) {
	b := setup(t)
	_, err := b.q.InsertWorkflow(b.stopAt("publish", nil), diamond("wf"))
	require.ErrorIs(t, err, errDied)
	res, err := b.q.InsertWorkflow(b.ctx, diamond("wf"))
	require.NoError(t, err)
	require.True(t, res.Existed)
	require.ElementsMatch(t, taskIDs("wf", diamondTasks...), b.drainInOrder(t))
}

func TestWorkflowCancelPublished(t *testing.T) {
	b := setup(t)
	_, err := b.q.InsertWorkflow(b.ctx, diamond("wf"))
	require.NoError(t, err)
	b.run(t, "wf/a", jobs.StateSucceeded)
	b.settle(t, "wf/a")
	b1 := b.claimID(t, "wf/b1") // running while the workflow is cancelled
	res, err := b.q.CancelWorkflow(b.ctx, "wf")
	require.NoError(t, err)
	require.False(t, res.Unpublished)
	require.Equal(t, queue.WorkflowCancelResult{Cancelled: 3, Running: 1}, res)
	b.end(t, b1, jobs.StateSucceeded)
	_, err = b.q.SettleDependentsOf(b.ctx, "wf/b1")
	require.NoError(t, err)
	b.requireState(t, jobs.StateCancelled, taskIDs("wf", "b2", "c", "d")...)
	b.requireNothingToClaim(t)
	// Again: nothing left to cancel.
	res, err = b.q.CancelWorkflow(b.ctx, "wf")
	require.NoError(t, err)
	require.Equal(t, queue.WorkflowCancelResult{}, res)
}

func TestWorkflowCancelUnpublished(t *testing.T) {
	b := setup(t)
	_, err := b.q.InsertWorkflow(b.stopAt("tasks", nil), diamond("wf"))
	require.ErrorIs(t, err, errDied)
	res, err := b.q.CancelWorkflow(b.ctx, "wf")
	require.NoError(t, err)
	require.True(t, res.Unpublished)
	require.Equal(t, 5, res.Cancelled)
	b.requireState(t, jobs.StateCancelled, taskIDs("wf", diamondTasks...)...)
	_, err = b.q.InsertWorkflow(b.ctx, diamond("wf"))
	require.ErrorIs(t, err, queue.ErrWorkflowCancelled)
	b.requireNothingToClaim(t)
	// Its gate is not retried (it would be available with no handler).
	out, err := b.q.Retry(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID("wf")}})
	require.NoError(t, err)
	require.ErrorIs(t, out[0].Err, queue.ErrWorkflowGate)
	b.requireState(t, jobs.StateCancelled, "wf")
}

func TestWorkflowInvalidWritesNothing(t *testing.T) {
	b := setup(t)
	cycle := queue.NewWorkflow("w")
	cycle.Add("a", "k", nil, queue.TaskOpts{After: []string{"b"}})
	cycle.Add("b", "k", nil, queue.TaskOpts{After: []string{"a"}})
	unknown := queue.NewWorkflow("w")
	unknown.Add("a", "k", nil, queue.TaskOpts{After: []string{"z"}})
	twice := queue.NewWorkflow("w")
	twice.Add("a", "k", nil, queue.TaskOpts{})
	twice.Add("a", "k", nil, queue.TaskOpts{})
	for _, wf := range []*queue.Workflow{cycle, unknown, twice, queue.NewWorkflow("w")} {
		_, err := b.q.InsertWorkflow(b.ctx, wf)
		var ve *queue.ValidationError
		require.ErrorAs(t, err, &ve)
	}
	n, err := store.Of(b.q).Collection().CountDocuments(b.ctx, bson.M{})
	require.NoError(t, err)
	require.Zero(t, n)
}

// Documents another app wrote with a workflow field, or a gate's kind, of
// any shape: nothing fails, no job is touched but the malformed gate,
// which the sweep cancels; ids held by others are refused, gated.
func TestWorkflowMalformedFieldsWrittenByOthers(t *testing.T) {
	b := setup(t)
	coll := store.Of(b.q).Collection()
	now := time.Now()
	job := func(id any, extra bson.M) bson.M {
		d := bson.M{"_id": id, "kind": "k", "queue": "default", "state": "available", "args": bson.M{},
			"priority": 0, "runAt": now, "attempt": 0, "maxAttempts": 3, "errors": bson.A{}, "createdAt": now, "updatedAt": now}
		for k, v := range extra {
			d[k] = v
		}
		return d
	}
	_, err := coll.InsertMany(b.ctx, []any{
		job("x1", bson.M{"workflow": 7, "workflowTask": bson.M{"a": 1}}),
		job("x2", bson.M{"workflow": bson.A{"wf"}, "workflowTask": nil}),
		job("wf/a", bson.M{}), // holds a task's id
		job("g1", bson.M{"kind": queue.WorkflowGateKind, "state": "blocked", "updatedAt": "soon"}),
		job("g2", bson.M{"kind": queue.WorkflowGateKind, "state": 5}),
		job(int32(9), bson.M{"kind": queue.WorkflowGateKind, "state": "blocked", "workflow": 9}),
	})
	require.NoError(t, err)

	require.Equal(t, 2, b.sweep(t)) // g1 and the gate with id 9
	b.requireState(t, jobs.StateCancelled, "g1")
	// None of these is a workflow's id, or its gate is in no state docket
	// knows (g2): nothing to cancel, x2's array holding "wf" included.
	for _, id := range []string{"7", "wf", "g2", "nothing"} {
		res, err := b.q.CancelWorkflow(b.ctx, id)
		require.NoError(t, err, id)
		require.Equal(t, queue.WorkflowCancelResult{}, res, id)
	}
	_, err = b.q.InsertWorkflow(b.ctx, diamond("x1"))
	require.ErrorIs(t, err, queue.ErrWorkflowIDTaken)
	_, err = b.q.InsertWorkflow(b.ctx, diamond("wf"))
	require.ErrorIs(t, err, queue.ErrWorkflowIDTaken)
	// The foreign jobs run as before; no task of wf does.
	for _, id := range []string{"x1", "x2", "wf/a"} {
		j := b.claim(t, claimAll)
		require.NotNil(t, j)
		require.Contains(t, []string{"x1", "x2", "wf/a"}, j.ID, id)
		b.end(t, j, jobs.StateSucceeded)
	}
	b.requireNothingToClaim(t)
}

// A task that runs anyway, of a workflow cancelled before it was
// published, whose gate retention has since deleted: an operator's retry
// of it must not run it (its gate never opened), as the leader's link
// would not.
func TestWorkflowRetryOfARunAnywayTaskAfterItsGateIsDeleted(t *testing.T) {
	b := setup(t)
	_, err := b.q.InsertWorkflow(b.stopAt("tasks", nil), diamond("wf"))
	require.ErrorIs(t, err, errDied)
	_, err = b.q.CancelWorkflow(b.ctx, "wf")
	require.NoError(t, err)
	b.requireState(t, jobs.StateCancelled, taskIDs("wf", diamondTasks...)...)
	b.finishedAgo(t, bson.M{"$eq": "wf"}, 1, bson.E{Key: "state", Value: jobs.StateCancelled})
	n, err := store.Of(b.q).Clean(b.ctx, jobs.StateCancelled, time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	d := queue.TaskID("wf", "d")
	out, err := b.q.Retry(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(d)}})
	require.NoError(t, err)
	require.NoError(t, out[0].Err)
	j := b.get(t, d)
	require.Equal(t, jobs.StateCancelled, j.State, "errors: %v", j.Errors)
	b.requireNothingToClaim(t)
}
