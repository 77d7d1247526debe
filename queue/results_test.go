package queue_test

import (
	"testing"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// succeedWith completes the claimed job j, storing result as a handler's
// SetResult would have it stored.
func (b bundle) succeedWith(t *testing.T, j *jobs.Job, result bson.M) {
	t.Helper()
	raw, err := bson.Marshal(result)
	require.NoError(t, err)
	require.NoError(t, store.Of(b.q).Complete(store.WithResult(b.ctx, raw), store.LeaseOf(j)))
}

// requireNoResult checks that neither the job nor a dependent's
// ParentResults shows a result for id.
func (b bundle) requireNoResult(t *testing.T, id string) {
	t.Helper()
	rs, err := b.q.ParentResults(b.ctx, &jobs.Job{ID: "dependent", After: []string{id}})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.ErrorIs(t, rs[0].Decode(&bson.M{}), queue.ErrNoResult, "job %s", id)
	require.Nil(t, b.get(t, id).Result, "job %s", id)
}

// A retried job's result is only what its new attempt set: Retry clears
// the earlier success's, on each of its paths (a plain job, a job of a
// bounded queue, a job that waited for a parent), whether the new
// attempt dies or succeeds without a result.
func TestRetryClearsAnEarlierAttemptsResult(t *testing.T) {
	t.Parallel()
	type path struct {
		name    string
		enqueue func(t *testing.T, b bundle) string // a runnable job of kind k in queue default
	}
	paths := []path{
		{"plain", func(t *testing.T, b bundle) string { return b.enqueueK(t, queue.InsertOpts{}) }},
		{"bounded queue", func(t *testing.T, b bundle) string {
			require.NoError(t, b.q.SetCapacity(b.ctx, "default", 5, "test"))
			return b.enqueueK(t, queue.InsertOpts{})
		}},
		{"with a parent", func(t *testing.T, b bundle) string {
			parent := b.enqueueK(t, queue.InsertOpts{})
			child := b.after(t, parent)
			b.run(t, parent, jobs.StateSucceeded)
			b.settle(t, parent)
			return child
		}},
	}
	for _, p := range paths {
		for _, end := range []jobs.State{jobs.StateDead, jobs.StateSucceeded} {
			t.Run(p.name+"/then "+string(end), func(t *testing.T) {
				b := setup(t)
				id := p.enqueue(t, b)
				b.succeedWith(t, b.claimID(t, id), bson.M{"n": 1})
				require.NotNil(t, b.get(t, id).Result)

				b.retry(t, id)
				b.requireNoResult(t, id)
				b.run(t, id, end) // a success without SetResult, or a death
				b.requireNoResult(t, id)

				b.retry(t, id)
				b.succeedWith(t, b.claimID(t, id), bson.M{"n": 2})
				n, _ := b.get(t, id).Result.Lookup("n").AsInt64OK()
				require.EqualValues(t, 2, n, "the new attempt's own result")
			})
		}
	}
}

// A job that comes back to run by a path that left its result behind (a
// document another application moved back to available) still ends with
// only what its last attempt set: the write that finishes an attempt
// clears a result the attempt did not set.
func TestFinishingClearsAResultTheAttemptDidNotSet(t *testing.T) {
	for _, end := range []jobs.State{jobs.StateDead, jobs.StateSucceeded, jobs.StateCancelled} {
		t.Run(string(end), func(t *testing.T) {
			b := setup(t)
			id := b.enqueueK(t, queue.InsertOpts{})
			_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": id}, bson.M{"$set": bson.M{"result": bson.M{"n": 1}}})
			require.NoError(t, err)
			b.run(t, id, end)
			b.requireNoResult(t, id)
		})
	}
}

// ParentResults lists a job's parents in its After's order, leaving out
// only the gate its own workflow field names; documents other apps wrote
// (a result that is no document, a workflow field of another type) give a
// parent without a result, and no gate, instead of an error.
func TestParentResultsSkipsOnlyTheJobsOwnGate(t *testing.T) {
	b := setup(t)
	coll := store.Of(b.q).Collection()
	_, err := coll.InsertMany(b.ctx, []any{
		bson.M{"_id": "wf", "kind": "docket.workflow", "state": "succeeded"},
		bson.M{"_id": "wf/a", "kind": "k", "state": "succeeded", "result": bson.M{"n": 1}},
		bson.M{"_id": "odd", "kind": "k", "state": "succeeded", "result": "not a document"},
		bson.M{"_id": "wf/t", "kind": "k", "state": "running", "workflow": "wf"},
		bson.M{"_id": "plain", "kind": "k", "state": "running", "workflow": 7},
	})
	require.NoError(t, err)

	ids := func(rs []queue.ParentResult) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	rs, err := b.q.ParentResults(b.ctx, &jobs.Job{ID: "wf/t", After: []string{"wf", "odd", "wf/a"}})
	require.NoError(t, err)
	require.Equal(t, []string{"odd", "wf/a"}, ids(rs))
	require.ErrorIs(t, rs[0].Decode(&bson.M{}), queue.ErrNoResult)
	var got struct {
		N int `bson:"n"`
	}
	require.NoError(t, rs[1].Decode(&got))
	require.Equal(t, 1, got.N)

	rs, err = b.q.ParentResults(b.ctx, &jobs.Job{ID: "plain", After: []string{"wf", "wf/a"}})
	require.NoError(t, err)
	require.Equal(t, []string{"wf", "wf/a"}, ids(rs), "a job of no workflow lists every parent")
	require.ErrorIs(t, rs[0].Decode(&got), queue.ErrNoResult)
}
