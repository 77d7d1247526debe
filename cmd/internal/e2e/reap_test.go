package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestWorkerReapRunsOnePass: `worker reap` re-queues expired leases once,
// from the command line, and leaves live ones alone.
func TestWorkerReapRunsOnePass(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	ctx := context.Background()
	res, err := q.EnqueueMany(ctx, []queue.Insert{{Kind: "record", Opts: queue.InsertOpts{Priority: 1}}, {Kind: "record"}})
	require.NoError(t, err)
	p := store.ClaimParams{Owner: "gone", Queues: []string{"default"}, Kinds: []string{"record"}, Lease: time.Minute}
	for range 2 {
		j, err := store.Of(q).Claim(ctx, p)
		require.NoError(t, err)
		require.NotNil(t, j)
	}
	_, err = store.Of(q).Collection().UpdateOne(ctx, bson.M{"_id": res[0].ID}, bson.M{"$set": bson.M{"leaseExpiresAt": time.Now().Add(-time.Hour)}})
	require.NoError(t, err)

	out, stderr, code := run(t, workerBinary(t), db, nil, "", "reap")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "requeued 1, dead 0", strings.TrimSpace(out))
	j, err := q.Get(ctx, res[0].ID)
	require.NoError(t, err)
	require.Equal(t, jobs.StateAvailable, j.State)
	require.Contains(t, j.Errors[0].Message, "worker gone stopped renewing")
	j, err = q.Get(ctx, res[1].ID)
	require.NoError(t, err)
	require.Equal(t, jobs.StateRunning, j.State)
}
