package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// commands counts, by name, the commands a client sends to the jobs
// collection.
type commands struct {
	mu     sync.Mutex
	byName map[string]int
}

func (c *commands) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := c.byName
	c.byName = map[string]int{}
	return got
}

// monitored returns a queue client on b's database whose commands to the
// jobs collection are counted.
func (b bundle) monitored(t *testing.T) (*queue.Client, *commands) {
	t.Helper()
	cmds := &commands{byName: map[string]int{}}
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if coll, _ := e.Command.Lookup(e.CommandName).StringValueOK(); coll != queue.DefaultCollection {
			return
		}
		cmds.mu.Lock()
		cmds.byName[e.CommandName]++
		cmds.mu.Unlock()
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(mon))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	q, err := queue.New(client.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	return q, cmds
}

// leaseOf reads job id's lease token and expiry, field by field (a
// hand-written field of another type does not stop it).
func (b bundle) leaseOf(t *testing.T, id string) (string, time.Time) {
	t.Helper()
	raw, err := store.Of(b.q).Collection().FindOne(b.ctx, bson.M{"_id": id}).Raw()
	require.NoError(t, err)
	token, _ := raw.Lookup("leaseToken").StringValueOK()
	exp, ok := raw.Lookup("leaseExpiresAt").TimeOK()
	require.True(t, ok, "job %s has no lease expiry", id)
	return token, exp
}

// heartbeat renews the one lease l as the worker's batched renewal does,
// and returns what it learned of it.
func heartbeat(ctx context.Context, s *store.Store, l store.Lease, d time.Duration) (store.Renewal, error) {
	beats, err := s.HeartbeatMany(ctx, []store.Lease{l}, nil, d)
	if err != nil {
		return store.Renewal{}, err
	}
	return beats[l].Renewal, beats[l].Err
}

// TestHeartbeatManyRenewsEveryLeaseInOneCommand: the leases of jobs
// claimed one by one and by a batch claim (which share a token) are all
// renewed by a single updateMany, each to the same new expiry.
func TestHeartbeatManyRenewsEveryLeaseInOneCommand(t *testing.T) {
	b := setup(t)
	enqueueN(t, b, 6)
	var leases []store.Lease
	for range 2 {
		leases = append(leases, store.LeaseOf(b.claim(t, claimAll)))
	}
	batch, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 4)
	require.NoError(t, err)
	require.Len(t, batch, 4)
	for _, j := range batch {
		leases = append(leases, store.LeaseOf(j))
	}

	q, cmds := b.monitored(t)
	got, err := store.Of(q).HeartbeatMany(b.ctx, leases, nil, time.Hour)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"update": 1}, cmds.reset(), "one updateMany for six leases")
	require.Len(t, got, 6)
	for _, l := range leases {
		beat := got[l]
		require.NoError(t, beat.Err, l.JobID)
		require.False(t, beat.CancelRequested)
		require.WithinDuration(t, time.Now().Add(time.Hour), beat.ExpiresAt, time.Minute)
		token, exp := b.leaseOf(t, l.JobID)
		require.Equal(t, l.Token, token)
		require.True(t, exp.Equal(beat.ExpiresAt), "job %s expires at %s in the database, %s reported", l.JobID, exp, beat.ExpiresAt)
	}

	// Nothing to renew: no command.
	none, err := store.Of(q).HeartbeatMany(b.ctx, nil, nil, time.Hour)
	require.NoError(t, err)
	require.Empty(t, none)
	require.Empty(t, cmds.reset())
}

// TestHeartbeatManyReportsEachLeaseOnItsOwn: among leases renewed
// together, one whose job was reaped and claimed by another worker and one
// whose job this attempt already finished are reported lost and left as
// they are; one whose job someone asked to stop is still renewed and
// reported cancel-requested (as is a hand-written request of another
// type); the others are renewed.
func TestHeartbeatManyReportsEachLeaseOnItsOwn(t *testing.T) {
	b := setup(t)
	enqueueN(t, b, 5)
	taken := b.claim(t, claimAll)
	finished := b.claim(t, claimAll)
	cancelled := b.claim(t, claimAll)
	oddCancel := b.claim(t, claimAll)
	plain := b.claim(t, claimAll)
	other := b.takeOver(t, taken)
	otherToken, otherExp := b.leaseOf(t, taken.ID)
	require.Equal(t, other.LeaseToken, otherToken)
	require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(finished)))
	before := b.get(t, finished.ID)
	out, err := b.q.Cancel(b.ctx, cancelled.ID)
	require.NoError(t, err)
	require.Equal(t, queue.CancelRequested, out)
	_, err = store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": oddCancel.ID}, bson.M{"$set": bson.M{"cancelRequestedAt": "please stop"}})
	require.NoError(t, err)

	q, cmds := b.monitored(t)
	leases := []store.Lease{store.LeaseOf(taken), store.LeaseOf(finished), store.LeaseOf(cancelled), store.LeaseOf(oddCancel), store.LeaseOf(plain)}
	got, err := store.Of(q).HeartbeatMany(b.ctx, leases, nil, time.Hour)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"update": 2, "find": 1}, cmds.reset(),
		"the updateMany, a read back, and an updateMany of the two asked to stop")

	require.ErrorIs(t, got[store.LeaseOf(taken)].Err, jobs.ErrLeaseLost)
	token, exp := b.leaseOf(t, taken.ID)
	require.Equal(t, otherToken, token, "the new holder's lease is untouched")
	require.True(t, exp.Equal(otherExp), "the new holder's expiry is untouched")

	require.ErrorIs(t, got[store.LeaseOf(finished)].Err, jobs.ErrLeaseLost)
	require.Equal(t, before, b.get(t, finished.ID), "a finished job is not written")

	for _, j := range []*jobs.Job{cancelled, oddCancel} {
		beat := got[store.LeaseOf(j)]
		require.NoError(t, beat.Err, j.ID)
		require.True(t, beat.CancelRequested, j.ID)
		_, exp := b.leaseOf(t, j.ID)
		require.True(t, exp.Equal(beat.ExpiresAt), "job %s renewed while its handler stops", j.ID)
		require.WithinDuration(t, time.Now().Add(time.Hour), exp, time.Minute)
	}
	beat := got[store.LeaseOf(plain)]
	require.NoError(t, beat.Err)
	require.False(t, beat.CancelRequested)
	_, exp = b.leaseOf(t, plain.ID)
	require.True(t, exp.Equal(beat.ExpiresAt))
}

// TestHeartbeatManyStallThenResume: a process stalls while its batched
// renewal is pending, and its jobs are reaped and claimed again by another
// worker in the meantime. Whether the stall comes before the batch is
// sent, between its updateMany and its read back, or before the renewal of
// the jobs asked to stop, a job now held by someone else is reported lost
// and its new holder's lease is never touched; the others are renewed.
func TestHeartbeatManyStallThenResume(t *testing.T) {
	for _, step := range []string{"before the batch", "read", "renew cancelled"} {
		t.Run(step, func(t *testing.T) {
			b := setup(t)
			enqueueN(t, b, 3)
			victim := b.claim(t, claimAll)
			kept := b.claim(t, claimAll)
			stopping := b.claim(t, claimAll)
			// A cancel request keeps one job out of the first updateMany,
			// so that every step is taken.
			_, err := b.q.Cancel(b.ctx, stopping.ID)
			require.NoError(t, err)
			if step == "renew cancelled" {
				victim = stopping // only it is left for that step
			}
			var otherToken string
			var otherExp time.Time
			takeOver := func() {
				if victim == stopping {
					// A reap cancels a job asked to stop rather than
					// re-queue it: another holder takes it by hand.
					_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": victim.ID},
						bson.M{"$set": bson.M{"leaseToken": "another attempt's", "owner": "w2", "leaseExpiresAt": time.Now().Add(time.Minute)}})
					require.NoError(t, err)
				} else {
					b.takeOver(t, victim)
				}
				otherToken, otherExp = b.leaseOf(t, victim.ID)
			}
			if step == "before the batch" {
				takeOver()
			}
			stalls := 0
			leases := []store.Lease{store.LeaseOf(victim), store.LeaseOf(kept), store.LeaseOf(stopping)}
			got, err := store.HeartbeatManyWithStall(b.ctx, store.Of(b.q), leases, time.Hour, func(at string) {
				if at == step {
					stalls++
					takeOver()
				}
			})
			require.NoError(t, err)
			if step != "before the batch" {
				require.Equal(t, 1, stalls, "the batch took the step %q", step)
			}

			require.ErrorIs(t, got[store.LeaseOf(victim)].Err, jobs.ErrLeaseLost)
			token, exp := b.leaseOf(t, victim.ID)
			require.Equal(t, otherToken, token)
			require.True(t, exp.Equal(otherExp), "the new holder's expiry %s was changed to %s", otherExp, exp)
			for _, j := range []*jobs.Job{kept, stopping} {
				if j == victim {
					continue
				}
				beat := got[store.LeaseOf(j)]
				require.NoError(t, beat.Err, j.ID)
				require.Equal(t, j == stopping, beat.CancelRequested)
				_, exp := b.leaseOf(t, j.ID)
				require.True(t, exp.Equal(beat.ExpiresAt))
			}
		})
	}
}

// TestHeartbeatManyAgainAfterALostReply: a batched renewal the server
// applied, its reply lost, is simply sent again: same tokens, a later
// expiry, every lease still reported held.
func TestHeartbeatManyAgainAfterALostReply(t *testing.T) {
	b := setup(t)
	enqueueN(t, b, 3)
	var leases []store.Lease
	for range 3 {
		leases = append(leases, store.LeaseOf(b.claim(t, claimAll)))
	}
	_, err := store.Of(b.q).HeartbeatMany(b.ctx, leases, nil, time.Hour) // applied; its reply is not looked at
	require.NoError(t, err)
	first := map[string]time.Time{}
	for _, l := range leases {
		_, first[l.JobID] = b.leaseOf(t, l.JobID)
	}
	b.clock.Advance(5 * time.Millisecond) // a later now, to the millisecond the server keeps
	got, err := store.Of(b.q).HeartbeatMany(b.ctx, leases, nil, time.Hour)
	require.NoError(t, err)
	for _, l := range leases {
		require.NoError(t, got[l].Err)
		token, exp := b.leaseOf(t, l.JobID)
		require.Equal(t, l.Token, token)
		require.True(t, exp.After(first[l.JobID]))
		require.True(t, exp.Equal(got[l].ExpiresAt))
	}
}

// TestHeartbeatManyRefusesBadInput: a lease without a token (which would
// match jobs without one) and a non-positive duration are refused before
// any write, naming what is wrong.
func TestHeartbeatManyRefusesBadInput(t *testing.T) {
	b := setup(t)
	q, cmds := b.monitored(t)
	_, err := store.Of(q).HeartbeatMany(b.ctx, []store.Lease{{JobID: "a", Token: "t"}, {JobID: "b"}}, nil, time.Hour)
	require.ErrorContains(t, err, `job "b": the lease has no token`)
	_, err = store.Of(q).HeartbeatMany(b.ctx, []store.Lease{{JobID: "a", Token: "t"}}, nil, 0)
	require.ErrorContains(t, err, "duration 0s must be positive")
	require.Empty(t, cmds.reset())
}
