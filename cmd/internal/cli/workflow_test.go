package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// `enqueue job --after` and a batch line's "after" make jobs that wait;
// `docketctl show` lists a job's parents and dependents with their states.
func TestEnqueueAfterAndShowRelatives(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	out, stderr, code := runEnqueue(t, uri, db, "", "job", "--kind", "noop", "--id", "extract")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "extract", strings.TrimSpace(out))
	_, stderr, code = runEnqueue(t, uri, db, "", "job", "--kind", "noop", "--id", "load", "--after", "extract,transform", "--after", "check")
	require.Equal(t, 0, code, stderr)

	in := `{"id": "transform", "kind": "noop"}
{"id": "check", "kind": "noop", "after": ["extract"]}
{"id": "report", "kind": "noop", "after": ["load"], "afterRunAnyway": true}
`
	_, stderr, code = runEnqueue(t, uri, db, in, "batch")
	require.Equal(t, 0, code, stderr)

	out, stderr, code = runCtl(t, uri, db, "show", "load")
	require.Equal(t, 0, code, stderr)
	// transform was enqueued after load: not in the collection at load's
	// link, so load was cancelled, saying why.
	require.Contains(t, out, "state:             cancelled")
	require.Contains(t, out, "parent transform is not in the collection")
	require.Contains(t, out, "  parents:\n    extract available (waited for)\n    transform available (waited for)\n    check blocked (waited for)\n")
	// report runs anyway: its parent has ended.
	require.Contains(t, out, "  dependents:\n    report available\n")

	out, stderr, code = runCtl(t, uri, db, "show", "report")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "runAnyway:         true")
	require.Contains(t, out, "  parents:\n    load cancelled\n")

	_, err := db.Collection("jobs").UpdateByID(context.Background(), "extract", bson.M{"$set": bson.M{"result": bson.M{"rows": 7}}})
	require.NoError(t, err)
	out, stderr, code = runCtl(t, uri, db, "show", "extract")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "  result:            {\"rows\":7}\n")
	require.Contains(t, out, "  dependents:\n    check blocked\n    load cancelled\n")

	_, stderr, code = runEnqueue(t, uri, db, "", "job", "--kind", "noop", "--after", "extract,extract")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `"extract" is named twice`)
}
