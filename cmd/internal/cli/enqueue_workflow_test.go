package cli

import (
	"strings"
	"testing"

	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// `enqueue workflow --id ID` inserts the lines as one workflow, "after"
// naming tasks; a rerun adds nothing; a cycle is bad input, nothing
// written.
func TestEnqueueWorkflow(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	in := `{"name": "load", "kind": "noop", "after": ["t1", "t2"]}
{"name": "extract", "kind": "noop", "args": {"day": "2026-11-24"}}
{"name": "t1", "kind": "noop", "after": ["extract"]}
{"name": "t2", "kind": "noop", "after": ["extract"], "priority": 3}
`
	out, stderr, code := runEnqueue(t, uri, db, in, "workflow", "--id", "nightly")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "nightly", strings.TrimSpace(out))
	coll := db.Collection("jobs")
	var task bson.M
	require.NoError(t, coll.FindOne(t.Context(), bson.M{"_id": "nightly/t2"}).Decode(&task))
	require.Equal(t, "nightly", task["workflow"])
	require.Equal(t, "t2", task["workflowTask"])
	require.Equal(t, "blocked", task["state"])
	var root bson.M
	require.NoError(t, coll.FindOne(t.Context(), bson.M{"_id": "nightly/extract"}).Decode(&root))
	require.Equal(t, "available", root["state"])

	_, stderr, code = runEnqueue(t, uri, db, in, "workflow", "--id", "nightly")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "already published")

	cycle := `{"name": "a", "kind": "noop", "after": ["b"]}
{"name": "b", "kind": "noop", "after": ["a"]}
`
	_, stderr, code = runEnqueue(t, uri, db, cycle, "workflow", "--id", "loop")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "cycle")
	n, err := coll.CountDocuments(t.Context(), bson.M{"_id": bson.M{"$regex": "^loop"}})
	require.NoError(t, err)
	require.Zero(t, n)
}
