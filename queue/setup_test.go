package queue_test

import (
	"context"
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
