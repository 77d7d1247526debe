package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// The enqueue command's queue client is configured as a docket.Client of
// the file's settings: a job goes to the file's queue.collection.
func TestEnqueueConfigReachesTheQueue(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{Collection: "otherjobs"})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(context.Background())) // as runEnqueue's setUp does for "jobs"
	path := filepath.Join(t.TempDir(), "docket.yaml")
	require.NoError(t, os.WriteFile(path, []byte("queue:\n  collection: otherjobs\n"), 0o600))

	out, stderr, code := runEnqueue(t, testdb.URI(), db, "", "job", "--kind", "noop", "--config", path)
	require.Equal(t, 0, code, stderr)
	n, err := db.Collection("otherjobs").CountDocuments(context.Background(), bson.M{"_id": strings.TrimSpace(out)})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Empty(t, jobIDs(t, db), "nothing in the default collection")
}
