package store_test

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
)

// MongoDB kills a cursor (an idle timeout, an operator's killCursors, a
// restart) and answers its next getMore with CursorNotFound (43). These
// tests read more jobs than a find's first batch (101) from a devdb that
// answers every getMore so: a pass whose read is cut writes nothing on the
// strength of it and says so, and leaves its work for the next pass.

// killedJobs is more than a find's first batch.
const killedJobs = 150

// killedCursorSetup is setup on a devdb of the test's own that kills every
// cursor at its first getMore, with killedJobs jobs enqueued.
func killedCursorSetup(t *testing.T) bundle {
	t.Helper()
	db := testdb.CursorKilledDB(t)
	q, err := queue.New(db, queue.Config{RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond})
	require.NoError(t, err)
	clock := &store.ShiftedClock{}
	store.Of(q).SetClock(clock.Now)
	b := bundle{ctx: context.Background(), db: db, q: q, clock: clock}
	require.NoError(t, q.EnsureIndexes(b.ctx))
	enqueueN(t, b, killedJobs)
	return b
}

// TestCleanCursorKilledDeletesNothingThenResumes: retention reads the ids
// to delete before it deletes them. A read cut after its first batch
// deletes nothing and returns the error; passes whose batch fits a first
// batch then delete every job, each once.
func TestCleanCursorKilledDeletesNothingThenResumes(t *testing.T) {
	b := killedCursorSetup(t)
	_, err := store.Of(b.q).Collection().UpdateMany(b.ctx, bson.D{}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "state", Value: jobs.StateSucceeded}, {Key: "finishedAt", Value: time.Now().Add(-time.Hour)},
	}}})
	require.NoError(t, err)

	n, err := store.Of(b.q).Clean(b.ctx, jobs.StateSucceeded, time.Minute, 1000)
	testdb.RequireCursorKilled(t, err)
	require.Zero(t, n)
	require.EqualValues(t, killedJobs, countState(t, b, jobs.StateSucceeded))

	deleted := 0
	for pass := 0; pass < 5 && deleted < killedJobs; pass++ {
		n, err := store.Of(b.q).Clean(b.ctx, jobs.StateSucceeded, time.Minute, 100)
		require.NoError(t, err)
		deleted += n
	}
	require.Equal(t, killedJobs, deleted)
	require.Zero(t, countState(t, b, jobs.StateSucceeded))
}

// TestReleaseClaimCursorKilledLeavesJobsToTheReaper: a claim whose reply
// was lost stamped more jobs than a first batch; ReleaseClaim reads them
// before it gives them back. Its read cut, it releases none and says so
// (it does not report the first batch as all the claim took), and the
// jobs stay running under the lost token, fenced, for the reaper: once
// their lease expires, one reap puts every one back, none lost, none left
// running.
func TestReleaseClaimCursorKilledLeavesJobsToTheReaper(t *testing.T) {
	b := killedCursorSetup(t)
	const token = "lost-claim"
	_, err := store.Of(b.q).Collection().UpdateMany(b.ctx, bson.D{}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "state", Value: jobs.StateRunning}, {Key: "owner", Value: "w1"}, {Key: "leaseToken", Value: token},
		{Key: "attempt", Value: 1}, {Key: "heartbeatAt", Value: b.clock.Now()},
		{Key: "leaseExpiresAt", Value: b.clock.Now().Add(time.Minute)},
	}}})
	require.NoError(t, err)

	n, err := store.Of(b.q).ReleaseClaim(b.ctx, token)
	testdb.RequireCursorKilled(t, err)
	require.Zero(t, n)
	require.EqualValues(t, killedJobs, countState(t, b, jobs.StateRunning))

	b.clock.Advance(2 * time.Minute)
	res, err := store.Of(b.q).Reap(b.ctx, 0, 1000)
	require.NoError(t, err)
	require.Equal(t, store.ReapResult{Requeued: killedJobs}, res)
	require.Zero(t, countState(t, b, jobs.StateRunning))
	require.EqualValues(t, killedJobs, countState(t, b, jobs.StateAvailable))
}
