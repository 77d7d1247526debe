package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/internal/testdb/asworker"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestWorkerReapRunsOnePass: `worker reap` re-queues expired leases once,
// from the command line, with the reaper's settings, and leaves live ones
// alone.
func TestWorkerReapRunsOnePass(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	ctx := context.Background()
	res := enqueueMany(t, q, []queue.Insert{{Kind: "record", Opts: queue.InsertOpts{Priority: 1}}, {Kind: "record"}})
	p := store.ClaimParams{Owner: "gone", Queues: []string{"default"}, Kinds: []string{"record"}, Lease: time.Minute}
	for range 2 {
		// As a worker claims: a claim whose reply failed gives its job back.
		j, err := asworker.Claim(ctx, t.Logf, store.Of(q), p, nil)
		require.NoError(t, err)
		require.NotNil(t, j)
	}
	must(t, "expire the lease", func() error {
		_, err := store.Of(q).Collection().UpdateOne(ctx, bson.M{"_id": res[0].ID}, bson.M{"$set": bson.M{"leaseExpiresAt": time.Now().Add(-time.Hour)}})
		return err
	})

	op := &operator{t: t, bin: workerBinary(t), db: db}
	// The pass is configured as the worker's reaper: a grace longer than
	// the hour the lease is past leaves it alone.
	out, stderr, code := op.run("reap", "--reap-grace", "2h")
	require.Equal(t, 0, code, stderr)
	if !op.resent {
		require.Equal(t, "requeued 0, dead 0", strings.TrimSpace(out))
	}
	out, stderr, code = op.run("reap")
	require.Equal(t, 0, code, stderr)
	if !op.resent { // else the first run's pass, its reply lost, is read below
		require.Equal(t, "requeued 1, dead 0", strings.TrimSpace(out))
	}
	var j *jobs.Job
	must(t, "read the reaped job", func() (err error) { j, err = q.Get(ctx, res[0].ID); return err })
	require.Equal(t, jobs.StateAvailable, j.State)
	require.Contains(t, j.Errors[0].Message, "worker gone stopped renewing")
	must(t, "read the running job", func() (err error) { j, err = q.Get(ctx, res[1].ID); return err })
	require.Equal(t, jobs.StateRunning, j.State)
}
