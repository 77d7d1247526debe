package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// progressOf reads job id's stored progress field as it is: nil when the
// job has none.
func (b bundle) progressOf(t *testing.T, id string) bson.RawValue {
	t.Helper()
	raw, err := store.Of(b.q).Collection().FindOne(b.ctx, bson.M{"_id": id}).Raw()
	require.NoError(t, err)
	return raw.Lookup("progress")
}

func report(f float64, msg string) jobs.ProgressReport {
	return jobs.ProgressReport{Fraction: f, Message: msg, At: time.Now().Truncate(time.Millisecond).UTC()}
}

// TestHeartbeatWritesProgressInTheSameCommand: a renewal that carries the
// progress of some of its jobs is still one command; those jobs hold
// their progress, the others none, and every lease is renewed.
func TestHeartbeatWritesProgressInTheSameCommand(t *testing.T) {
	b := setup(t)
	enqueueN(t, b, 4)
	var leases []store.Lease
	batch, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 3) // one token for three
	require.NoError(t, err)
	for _, j := range batch {
		leases = append(leases, store.LeaseOf(j))
	}
	leases = append(leases, store.LeaseOf(b.claim(t, claimAll)))
	progress := map[store.Lease]jobs.ProgressReport{leases[0]: report(0.25, "a quarter"), leases[3]: report(1, "")}

	q, cmds := b.monitored(t)
	got, err := store.Of(q).HeartbeatMany(b.ctx, leases, progress, time.Hour)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"update": 1}, cmds.reset(), "the renewal and the progress in one command")
	for _, l := range leases {
		require.NoError(t, got[l].Err, l.JobID)
		_, exp := b.leaseOf(t, l.JobID)
		require.True(t, exp.Equal(got[l].ExpiresAt), "job %s renewed", l.JobID)
		want, ok := progress[l]
		if !ok {
			require.Zero(t, b.progressOf(t, l.JobID).Type, "job %s has no progress", l.JobID)
			continue
		}
		require.Equal(t, &want, b.get(t, l.JobID).Progress)
	}

	// A later renewal with a new value replaces it; one without leaves it.
	progress = map[store.Lease]jobs.ProgressReport{leases[0]: report(0.5, "half")}
	_, err = store.Of(q).HeartbeatMany(b.ctx, leases, progress, time.Hour)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"update": 1}, cmds.reset())
	require.Equal(t, 0.5, b.get(t, leases[0].JobID).Progress.Fraction)
	require.Equal(t, 1.0, b.get(t, leases[3].JobID).Progress.Fraction)
}

// TestHeartbeatWritesProgressOfAJobAskedToStop: a job whose cancel was
// requested is renewed by the second update while its handler winds
// down, and its progress with it.
func TestHeartbeatWritesProgressOfAJobAskedToStop(t *testing.T) {
	b := setup(t)
	enqueueN(t, b, 2)
	stopping, plain := b.claim(t, claimAll), b.claim(t, claimAll)
	_, err := b.q.Cancel(b.ctx, stopping.ID)
	require.NoError(t, err)
	leases := []store.Lease{store.LeaseOf(stopping), store.LeaseOf(plain)}
	progress := map[store.Lease]jobs.ProgressReport{leases[0]: report(0.8, "winding down"), leases[1]: report(0.1, "plain")}
	got, err := store.Of(b.q).HeartbeatMany(b.ctx, leases, progress, time.Hour)
	require.NoError(t, err)
	require.True(t, got[leases[0]].CancelRequested)
	for _, l := range leases {
		require.NoError(t, got[l].Err)
		want := progress[l]
		require.Equal(t, &want, b.get(t, l.JobID).Progress)
	}
}

// TestHeartbeatProgressStallThenResume: a worker stalls with a renewal
// carrying progress pending; meanwhile its job is reaped and claimed by
// another worker, which reports its own progress. Whether the stall comes
// before the renewal is sent or before the renewal of the jobs asked to
// stop, the stale worker writes no progress: the new holder's stays.
func TestHeartbeatProgressStallThenResume(t *testing.T) {
	for _, step := range []string{"before the batch", "renew cancelled"} {
		t.Run(step, func(t *testing.T) {
			b := setup(t)
			enqueueN(t, b, 2)
			victim := b.claim(t, claimAll)
			kept := b.claim(t, claimAll)
			if step == "renew cancelled" {
				_, err := b.q.Cancel(b.ctx, victim.ID)
				require.NoError(t, err)
			}
			// The old attempt's own earlier progress is written. (For a
			// minute: renewed for an hour in the millisecond of the next
			// beat, its lease would count as renewed by that beat, which
			// would then not renew it again, nor stall there.)
			_, err := store.Of(b.q).HeartbeatMany(b.ctx, []store.Lease{store.LeaseOf(victim)},
				map[store.Lease]jobs.ProgressReport{store.LeaseOf(victim): report(0.1, "old")}, time.Minute)
			require.NoError(t, err)

			theirs := report(0.2, "the new holder's")
			takeOver := func() {
				if step == "renew cancelled" {
					// A reap cancels a job asked to stop: another holder
					// takes it by hand.
					_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": victim.ID}, bson.M{"$set": bson.M{
						"leaseToken": "another attempt's", "owner": "w2", "progress": theirs}})
					require.NoError(t, err)
					return
				}
				now := b.takeOver(t, victim)
				require.Zero(t, b.progressOf(t, victim.ID).Type, "the re-queue and the claim cleared the old attempt's progress")
				_, err := store.Of(b.q).HeartbeatMany(b.ctx, []store.Lease{store.LeaseOf(now)},
					map[store.Lease]jobs.ProgressReport{store.LeaseOf(now): theirs}, time.Hour)
				require.NoError(t, err)
			}
			if step == "before the batch" {
				takeOver()
			}
			leases := []store.Lease{store.LeaseOf(victim), store.LeaseOf(kept)}
			mine := map[store.Lease]jobs.ProgressReport{leases[0]: report(0.9, "stale"), leases[1]: report(0.3, "kept")}
			stalls := 0
			got, err := store.HeartbeatManyReportingWithStall(b.ctx, store.Of(b.q), leases, mine, time.Hour, func(at string) {
				if at == step {
					stalls++
					takeOver()
				}
			})
			require.NoError(t, err)
			if step != "before the batch" {
				require.Equal(t, 1, stalls)
			}
			require.ErrorIs(t, got[leases[0]].Err, jobs.ErrLeaseLost)
			require.Equal(t, &theirs, b.get(t, victim.ID).Progress, "the stale worker wrote over the new holder's progress")
			require.NoError(t, got[leases[1]].Err)
			require.Equal(t, 0.3, b.get(t, kept.ID).Progress.Fraction)
		})
	}
}

// TestProgressBelongsToItsAttempt: a retried, released or snoozed job
// shows no progress of the attempt that gave it back, nor does a job
// retried by hand; a job that finishes keeps its last progress; a job
// another application wrote with a progress of another type is claimed
// (not buried as malformed) and its progress cleared.
func TestProgressBelongsToItsAttempt(t *testing.T) {
	b := setup(t)
	enqueueN(t, b, 1)
	beat := func(j *jobs.Job, p jobs.ProgressReport) {
		t.Helper()
		_, err := store.Of(b.q).HeartbeatMany(b.ctx, []store.Lease{store.LeaseOf(j)},
			map[store.Lease]jobs.ProgressReport{store.LeaseOf(j): p}, time.Hour)
		require.NoError(t, err)
		require.NotNil(t, b.get(t, j.ID).Progress)
	}
	j := b.claim(t, claimAll)
	beat(j, report(0.4, "first"))
	_, err := store.Of(b.q).Fail(b.ctx, store.LeaseOf(j), j, errors.New("again"))
	require.NoError(t, err)
	require.Nil(t, b.get(t, j.ID).Progress, "retried")

	b.clock.Advance(time.Minute)
	j = b.claim(t, claimAll)
	require.NotNil(t, j)
	beat(j, report(0.5, "second"))
	require.NoError(t, store.Of(b.q).Release(b.ctx, store.LeaseOf(j)))
	require.Nil(t, b.get(t, j.ID).Progress, "released")

	j = b.claim(t, claimAll)
	beat(j, report(0.6, "third"))
	_, _, err = store.Of(b.q).Snooze(b.ctx, store.LeaseOf(j), j, time.Millisecond)
	require.NoError(t, err)
	require.Nil(t, b.get(t, j.ID).Progress, "snoozed")

	b.clock.Advance(time.Minute)
	j = b.claim(t, claimAll)
	beat(j, report(0.7, "last"))
	require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(j)))
	require.Equal(t, "last", b.get(t, j.ID).Progress.Message, "a finished job keeps its last progress")
	_, err = b.q.Retry(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(j.ID)}})
	require.NoError(t, err)
	require.Nil(t, b.get(t, j.ID).Progress, "retried by hand")

	// Another application's job, its progress a string.
	_, err = store.Of(b.q).Collection().InsertOne(b.ctx, bson.M{"_id": "foreign", "kind": "k", "queue": "default", "state": "available",
		"args": bson.M{}, "runAt": time.Now().Add(-time.Hour), "createdAt": time.Now().Add(-time.Hour), "attempt": 0, "maxAttempts": 3,
		"priority": 100, "progress": "\x1b[2J half"})
	require.NoError(t, err)
	f := b.claim(t, claimAll)
	if f != nil && f.ID != "foreign" { // the job retried by hand came first
		f = b.claim(t, claimAll)
	}
	require.NotNil(t, f)
	require.Equal(t, "foreign", f.ID)
	require.Equal(t, jobs.StateRunning, f.State)
	require.Nil(t, f.Progress)
	require.Zero(t, b.progressOf(t, "foreign").Type)
}

// TestFinishingWritesStoreTheLastProgress: the progress a finishing write
// carries (store.WithProgress: the handler's last report, not yet written
// by a renewal) is stored by a completion (batched or not), a cancel, a
// failure that ends the job dead and a release that a cancel request
// turns into cancelled; a failure that retries the job and a snooze
// clear it without error; a finishing write whose lease was lost writes
// nothing.
func TestFinishingWritesStoreTheLastProgress(t *testing.T) {
	b := setup(t)
	ids := enqueueN(t, b, 8)
	last := report(1, "done")
	ctx := store.WithProgress(b.ctx, last)
	st := store.Of(b.q)
	claimed := map[string]*jobs.Job{}
	for range ids {
		j := b.claim(t, claimAll)
		claimed[j.ID] = j
	}
	j := func(i int) *jobs.Job { return claimed[ids[i]] }
	beat := func(j *jobs.Job) { // an earlier value, written by a renewal
		_, err := st.HeartbeatMany(b.ctx, []store.Lease{store.LeaseOf(j)},
			map[store.Lease]jobs.ProgressReport{store.LeaseOf(j): report(0.5, "half")}, time.Hour)
		require.NoError(t, err)
	}
	for _, jb := range claimed {
		beat(jb)
	}
	lost := j(7) // reaped and claimed by w2, which reports its own
	now := b.takeOver(t, lost)
	beat(now)
	require.ErrorIs(t, st.Complete(ctx, store.LeaseOf(lost)), jobs.ErrLeaseLost)
	require.Equal(t, "half", b.get(t, lost.ID).Progress.Message, "the stale worker's completion wrote its progress")

	require.NoError(t, st.Complete(ctx, store.LeaseOf(j(0))))
	require.NoError(t, st.WithBatchedCompletion(time.Millisecond).Complete(ctx, store.LeaseOf(j(1))))
	require.NoError(t, st.Cancelled(ctx, store.LeaseOf(j(2)), j(2), "stop"))
	_, err := st.Fail(ctx, store.LeaseOf(j(3)), j(3), jobs.Permanent(errors.New("bad")))
	require.NoError(t, err)
	_, err = b.q.Cancel(b.ctx, ids[4])
	require.NoError(t, err)
	require.NoError(t, st.Release(ctx, store.LeaseOf(j(4))))
	for i, state := range []jobs.State{jobs.StateSucceeded, jobs.StateSucceeded, jobs.StateCancelled, jobs.StateDead, jobs.StateCancelled} {
		got := b.get(t, ids[i])
		require.Equal(t, state, got.State, "job %d", i)
		require.Equal(t, &last, got.Progress, "job %d (%s) keeps the last report", i, state)
	}

	f, err := st.Fail(ctx, store.LeaseOf(j(5)), j(5), errors.New("again"))
	require.NoError(t, err)
	require.Equal(t, jobs.StateAvailable, f.State)
	state, _, err := st.Snooze(ctx, store.LeaseOf(j(6)), j(6), time.Minute)
	require.NoError(t, err)
	require.Equal(t, jobs.StateAvailable, state)
	for _, i := range []int{5, 6} {
		require.Nil(t, b.get(t, ids[i]).Progress, "job %d was given back: its attempt's progress goes", i)
	}
}

// TestHandoffCarriesTheLastProgress: a completion that hands its run slot
// on stores the progress it carries on the job it completes, and the
// successor it claims starts without the progress an earlier attempt of
// it left.
func TestHandoffCarriesTheLastProgress(t *testing.T) {
	b := setup(t)
	_, s, _ := monitoredStore(t, b)
	a, succ := handoffSetup(t, b, s, 2)
	_, err := s.Collection().UpdateByID(b.ctx, succ[0].Job.ID, bson.M{"$set": bson.M{"progress": report(0.9, "an earlier attempt's")}})
	require.NoError(t, err)
	last := report(1, "done")
	got, err := s.CompleteHandingOff(store.WithProgress(b.ctx, last), store.LeaseOf(a), succ[0], handoffParams("handoff-1"))
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Equal(t, jobs.StateSucceeded, b.get(t, a.ID).State)
	require.Equal(t, &last, b.get(t, a.ID).Progress)
	require.Nil(t, got.Progress)
	require.Nil(t, b.get(t, got.ID).Progress, "the successor shows an earlier attempt's progress")
}
