package queue_test

import (
	"testing"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

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
