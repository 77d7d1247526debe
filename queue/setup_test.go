package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// bundle is what a test of package queue works with; the lease-level
// tests, in internal/store, have one of their own.
type bundle struct {
	ctx context.Context
	db  *mongo.Database
	q   *queue.Client
}

func setup(t *testing.T) bundle {
	t.Helper()
	t.Parallel()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, q.EnsureIndexes(ctx))
	return bundle{ctx: ctx, db: db, q: q}
}

var claimAll = store.ClaimParams{Owner: "w1", Queues: []string{"default"}, Kinds: []string{"k"}, Lease: time.Minute}

func (b bundle) claim(t *testing.T, p store.ClaimParams) *jobs.Job {
	t.Helper()
	j, err := store.Of(b.q).Claim(b.ctx, p)
	require.NoError(t, err)
	return j
}

func (b bundle) get(t *testing.T, id string) *jobs.Job {
	t.Helper()
	j, err := b.q.Get(b.ctx, id)
	require.NoError(t, err)
	return j
}

// expire moves the lease of job id a minute into the past.
func (b bundle) expire(t *testing.T, id string) {
	t.Helper()
	_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": id}, bson.M{"$set": bson.M{"leaseExpiresAt": time.Now().Add(-time.Minute)}})
	require.NoError(t, err)
}

// end ends the claimed job j in state s, with its lease.
func (b bundle) end(t *testing.T, j *jobs.Job, s jobs.State) {
	t.Helper()
	st := store.Of(b.q)
	switch s {
	case jobs.StateSucceeded:
		require.NoError(t, st.Complete(b.ctx, store.LeaseOf(j)))
	case jobs.StateDead:
		_, err := st.Fail(b.ctx, store.LeaseOf(j), j, jobs.Permanent(errors.New("bad")))
		require.NoError(t, err)
	case jobs.StateCancelled:
		require.NoError(t, st.Cancelled(b.ctx, store.LeaseOf(j), j, "stop"))
	}
}

// claimID claims the one runnable job, which must be id.
func (b bundle) claimID(t *testing.T, id string) *jobs.Job {
	t.Helper()
	j := b.claim(t, claimAll)
	require.Equal(t, id, j.ID)
	return j
}

// retry retries the job id, which must be retried.
func (b bundle) retry(t *testing.T, id string) {
	t.Helper()
	out, err := b.q.Retry(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(id)}})
	require.NoError(t, err)
	require.Len(t, out, 1)
	require.NoError(t, out[0].Err)
}

// finishAs ends the jobs ids in state s, 48 h ago.
func (b bundle) finishAs(t *testing.T, s jobs.State, ids ...string) {
	t.Helper()
	for range ids {
		b.end(t, b.claim(t, claimAll), s)
	}
	b.finishedAgo(t, bson.M{"$in": ids}, len(ids))
}

// finishedLongAgo moves the end of the succeeded jobs ids 48 h back.
func (b bundle) finishedLongAgo(t *testing.T, ids ...string) {
	t.Helper()
	b.finishedAgo(t, bson.M{"$in": ids}, len(ids), bson.E{Key: "state", Value: jobs.StateSucceeded})
}

// finishedAgo moves the end of the n jobs whose _id matches id 48 h back.
func (b bundle) finishedAgo(t *testing.T, id bson.M, n int, also ...bson.E) {
	t.Helper()
	filter := append(bson.D{{Key: "_id", Value: id}}, also...)
	r, err := store.Of(b.q).Collection().UpdateMany(b.ctx, filter,
		bson.M{"$set": bson.M{"finishedAt": time.Now().Add(-48 * time.Hour)}})
	require.NoError(t, err)
	require.EqualValues(t, n, r.MatchedCount)
}
