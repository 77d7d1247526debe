package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// `enqueue job --unique-for` and a batch line's "uniqueFor" hold the key
// for the period, after its job finished too, and a duplicate says when
// its args were dropped.
func TestEnqueueUniqueFor(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	out, stderr, code := runEnqueue(t, uri, db, "", "job", "--kind", "noop", "--args", `{"n": 1}`, "--unique-key", "daily", "--unique-for", "24h")
	require.Equal(t, 0, code, stderr)
	first := strings.TrimSpace(out)

	// Finished: the key still holds for the period.
	_, err := db.Collection("jobs").UpdateByID(context.Background(), first, bson.M{"$set": bson.M{"state": "succeeded"}})
	require.NoError(t, err)
	out, stderr, code = runEnqueue(t, uri, db, "", "job", "--kind", "noop", "--args", `{"n": 2}`, "--unique-key", "daily", "--unique-for", "24h")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, first, strings.TrimSpace(out))
	require.Contains(t, stderr, "not added: a job holds the unique key")
	require.Contains(t, stderr, "its args differ from these, which are in no job")

	in := `{"kind": "noop", "args": {"n": 1}, "uniqueKey": "daily", "uniqueFor": "24h"}
{"kind": "noop", "args": {"n": 3}, "uniqueKey": "daily", "uniqueFor": "24h"}
`
	out, stderr, code = runEnqueue(t, uri, db, in, "batch")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, []string{first, first}, strings.Fields(out))
	require.Contains(t, stderr, "2 not added (a job holds the unique key; its id printed), 1 of them with args that differ")
	require.Len(t, jobIDs(t, db), 1)

	_, stderr, code = runEnqueue(t, uri, db, `{"kind": "noop", "uniqueKey": "k", "uniqueFor": "soon"}`+"\n", "batch")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `uniqueFor: "soon" is not a duration`)
	_, stderr, code = runEnqueue(t, uri, db, "", "job", "--kind", "noop", "--unique-for", "1h")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "uniqueFor: needs a uniqueKey")
}
