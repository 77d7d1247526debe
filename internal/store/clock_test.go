package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestClockStandsForTime: one clock stamps and compares on both sides of
// each wait, so moving it forward (not sleeping) brings a delayed job due,
// expires a lease for the reaper, and ends a failure's backoff, with the
// default retry timings of an hour's scale.
func TestClockStandsForTime(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{}) // RetryBase 1 s, RetryMax 1 h
	require.NoError(t, err)
	clock := &store.ShiftedClock{}
	s := store.Of(q)
	s.SetClock(clock.Now)
	b := bundle{ctx: t.Context(), db: db, q: q, clock: clock}
	require.NoError(t, q.EnsureIndexes(b.ctx))

	_, err = q.Enqueue(b.ctx, "k", bson.M{}, queue.InsertOpts{Delay: time.Hour})
	require.NoError(t, err)
	require.Nil(t, b.claim(t, claimAll), "not due for an hour")
	clock.Advance(time.Hour)
	j := b.claim(t, claimAll)
	require.NotNil(t, j, "due an hour on")

	res, err := s.Reap(b.ctx, 0, 10)
	require.NoError(t, err)
	require.Zero(t, res.Settled(), "its lease of a minute holds")
	clock.Advance(claimAll.Lease + time.Second)
	res, err = s.Reap(b.ctx, 0, 10)
	require.NoError(t, err)
	require.Equal(t, 1, res.Requeued, "the lease expired a minute on")
	require.Nil(t, b.claim(t, claimAll), "re-queued after a backoff, as a failure")
	clock.Advance(time.Hour)
	j = b.claim(t, claimAll)
	require.NotNil(t, j, "the reaped attempt's backoff (at most an hour) is over")
	f, err := s.Fail(b.ctx, store.LeaseOf(j), j, errors.New("boom"))
	require.NoError(t, err)
	require.Equal(t, jobs.StateAvailable, f.State)
	require.True(t, f.RunAt.After(clock.Now()), "a backoff of its own")
	require.Nil(t, b.claim(t, claimAll), "within its backoff")
	clock.Advance(time.Hour)
	require.NotNil(t, b.claim(t, claimAll), "its backoff (at most an hour) is over")
}
