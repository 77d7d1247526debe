package store_test

import (
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

const reapGrace = 5 * time.Second

// expiredAgo inserts a running job of owner whose lease of length lease
// (its last heartbeat to its expiry) expired ago.
func (b bundle) expiredAgo(t *testing.T, id, owner string, ago, lease time.Duration) {
	t.Helper()
	exp := time.Now().Add(-ago)
	b.runningByHand(t, id, bson.E{Key: "owner", Value: owner},
		bson.E{Key: "leaseExpiresAt", Value: exp}, bson.E{Key: "heartbeatAt", Value: exp.Add(-lease)})
}

// beat enters worker id in the registry as a worker process does.
func (b bundle) beat(t *testing.T, id string) {
	t.Helper()
	require.NoError(t, b.q.Beat(b.ctx, queue.WorkerInfo{ID: id, BeatEvery: 10 * time.Second}))
}

func (b bundle) state(t *testing.T, id string) jobs.State {
	t.Helper()
	return b.get(t, id).State
}

// TestReapSparesAliveButSlowOwners: issue 22. A job whose lease expired but
// whose owner beats in the workers registry is left alone for one more
// lease past the grace (its renewals may be stuck behind a slow server),
// then reaped all the same; a job whose owner has no entry, or an entry
// older than its missed beats, is reaped as before.
func TestReapSparesAliveButSlowOwners(t *testing.T) {
	b := setup(t)
	const lease = time.Minute
	b.beat(t, "alive")
	// Its lease expired 40 s ago: past the grace (5 s), within grace and
	// one more lease (65 s).
	b.expiredAgo(t, "slow", "alive", 40*time.Second, lease)
	// Expired past grace and one more lease: stuck, alive owner or not.
	b.expiredAgo(t, "stuck", "alive", 70*time.Second, lease)
	// No entry: a dead worker, or a process that never registered.
	b.expiredAgo(t, "orphan", "gone", 40*time.Second, lease)
	// An entry that stopped beating 31 s ago, at a beat every 10 s.
	_, err := b.db.Collection(queue.DefaultWorkersCollection).InsertOne(b.ctx, bson.D{
		{Key: "_id", Value: "dead"}, {Key: "lastSeen", Value: time.Now().Add(-31 * time.Second)}, {Key: "beatEveryMs", Value: 10000},
	})
	require.NoError(t, err)
	b.expiredAgo(t, "of-dead", "dead", 40*time.Second, lease)

	res, err := store.Of(b.q).Reap(b.ctx, reapGrace, 100)
	require.NoError(t, err)
	require.Equal(t, store.ReapResult{Requeued: 3, Spared: 1}, res)
	require.Equal(t, jobs.StateRunning, b.state(t, "slow"), "spared within one more lease")
	for _, id := range []string{"stuck", "orphan", "of-dead"} {
		require.Equal(t, jobs.StateAvailable, b.state(t, id), id)
	}

	// Later, the same job, still expired and its owner still beating: past
	// the extra lease, it is reaped. (Moved back in time rather than
	// waited for; the reap is fenced on the expiry it reads.)
	b.beat(t, "alive")
	_, err = store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": "slow"}, bson.M{"$set": bson.M{
		"leaseExpiresAt": time.Now().Add(-66 * time.Second), "heartbeatAt": time.Now().Add(-126 * time.Second),
	}})
	require.NoError(t, err)
	res, err = store.Of(b.q).Reap(b.ctx, reapGrace, 100)
	require.NoError(t, err)
	require.Equal(t, store.ReapResult{Requeued: 1}, res)
	require.Equal(t, jobs.StateAvailable, b.state(t, "slow"))
}

// TestReapSparedJobsDoNotFillTheBatch: jobs spared for a live owner are
// passed over, so that a batch still takes the dead owners' jobs behind
// them.
func TestReapSparedJobsDoNotFillTheBatch(t *testing.T) {
	b := setup(t)
	b.beat(t, "alive")
	for _, id := range []string{"s1", "s2", "s3"} {
		b.expiredAgo(t, id, "alive", 10*time.Second, time.Minute)
	}
	b.expiredAgo(t, "d1", "gone", 10*time.Second, time.Minute)
	b.expiredAgo(t, "d2", "gone", 10*time.Second, time.Minute)
	res, err := store.Of(b.q).Reap(b.ctx, reapGrace, 1)
	require.NoError(t, err)
	require.Equal(t, 1, res.Requeued)
	res2, err := store.Of(b.q).Reap(b.ctx, reapGrace, 1)
	require.NoError(t, err)
	require.Equal(t, 1, res2.Requeued)
	for _, id := range []string{"d1", "d2"} {
		require.Equal(t, jobs.StateAvailable, b.state(t, id), id)
	}
	for _, id := range []string{"s1", "s2", "s3"} {
		require.Equal(t, jobs.StateRunning, b.state(t, id), id)
	}
}

// TestReapReadsAMalformedRegistry: whatever another app left in the
// workers registry, the reaper neither fails nor spares a job for it; a
// job whose own lease fields do not say its length is not spared either.
// (A registry that cannot be read at all spares no one, logged.)
func TestReapReadsAMalformedRegistry(t *testing.T) {
	b := setup(t)
	now := time.Now()
	_, err := b.db.Collection(queue.DefaultWorkersCollection).InsertMany(b.ctx, []any{
		bson.D{{Key: "_id", Value: "text-time"}, {Key: "lastSeen", Value: "just now"}, {Key: "beatEveryMs", Value: "10s"}},
		bson.D{{Key: "_id", Value: int64(7)}, {Key: "lastSeen", Value: now}},
		bson.D{{Key: "_id", Value: "long-beats"}, {Key: "lastSeen", Value: now.Add(-10 * time.Minute)}, {Key: "beatEveryMs", Value: int64(1) << 60}},
		bson.D{{Key: "_id", Value: "no-beats"}},
		// Seen a day from now: not a beat docket wrote.
		bson.D{{Key: "_id", Value: "future"}, {Key: "lastSeen", Value: now.Add(24 * time.Hour)}, {Key: "beatEveryMs", Value: 10000}},
		bson.D{{Key: "_id", Value: bson.D{{Key: "x", Value: 1}}}, {Key: "lastSeen", Value: nil}},
	})
	require.NoError(t, err)
	b.beat(t, "alive")
	for _, owner := range []string{"text-time", "7", "long-beats", "no-beats", "future"} {
		b.expiredAgo(t, "of-"+owner, owner, 10*time.Second, time.Minute)
	}
	// A live owner's job whose lease fields do not give a length.
	b.runningByHand(t, "no-heartbeat", bson.E{Key: "owner", Value: "alive"})
	b.runningByHand(t, "text-heartbeat", bson.E{Key: "owner", Value: "alive"}, bson.E{Key: "heartbeatAt", Value: "then"})
	b.runningByHand(t, "beat-after-expiry", bson.E{Key: "owner", Value: "alive"}, bson.E{Key: "heartbeatAt", Value: now})

	res, err := store.Of(b.q).Reap(b.ctx, reapGrace, 100)
	require.NoError(t, err)
	// The job with a heartbeatAt of another type does not decode: buried,
	// as before.
	require.Equal(t, store.ReapResult{Requeued: 7, Buried: 1}, res)
}

// TestReapWithNothingExpiredReadsNoRegistry: a pass that finds no expired
// lease costs its find alone; the workers registry (a hello and a find) is
// read only once an expired job is found.
func TestReapWithNothingExpiredReadsNoRegistry(t *testing.T) {
	b := setup(t)
	b.beat(t, "alive")
	q, cmds := monitoredQueue(t, b.db)
	res, err := store.Of(q).Reap(b.ctx, reapGrace, 100)
	require.NoError(t, err)
	require.Zero(t, res.Settled()+res.Spared)
	require.Equal(t, []string{"find " + queue.DefaultCollection}, cmds())

	b.expiredAgo(t, "dead-owner", "gone", time.Minute, 30*time.Second)
	res, err = store.Of(q).Reap(b.ctx, reapGrace, 100)
	require.NoError(t, err)
	require.Equal(t, 1, res.Requeued)
	require.Contains(t, cmds(), "find "+queue.DefaultWorkersCollection)
}

// monitoredQueue is a Client on db whose commands cmds lists.
func monitoredQueue(t *testing.T, db *mongo.Database) (*queue.Client, func() []string) {
	t.Helper()
	client, cmds := testdb.Monitored(t)
	q, err := queue.New(client.Database(db.Name()), queue.Config{})
	require.NoError(t, err)
	return q, cmds
}
