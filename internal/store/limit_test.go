package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// runSlots returns the run slots job id holds: its kindRunSlot and
// queueRunSlot, "" for none.
func runSlots(t *testing.T, b bundle, id string) (kind, q string) {
	t.Helper()
	raw, err := b.db.Collection("jobs").FindOne(b.ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	require.NoError(t, err)
	kind, _ = raw.Lookup("kindRunSlot").StringValueOK()
	q, _ = raw.Lookup("queueRunSlot").StringValueOK()
	return kind, q
}

// partSlots returns the partition run slots job id holds, "" for none.
func partSlots(t *testing.T, b bundle, id string) (kind, q string) {
	t.Helper()
	raw, err := b.db.Collection("jobs").FindOne(b.ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	require.NoError(t, err)
	kind, _ = raw.Lookup("kindPartSlot").StringValueOK()
	q, _ = raw.Lookup("queuePartSlot").StringValueOK()
	return kind, q
}

// slotsHeld counts the jobs that hold a run slot of kind k, by state.
func slotsHeld(t *testing.T, b bundle) map[string]int {
	t.Helper()
	cur, err := b.db.Collection("jobs").Find(b.ctx, bson.D{{Key: "kindRunSlot", Value: bson.D{{Key: "$exists", Value: true}}}})
	require.NoError(t, err)
	var docs []struct {
		State string `bson:"state"`
	}
	require.NoError(t, cur.All(b.ctx, &docs))
	out := map[string]int{}
	for _, d := range docs {
		out[d.State]++
	}
	return out
}

// TestLimitEveryExitFreesTheSlot: under a limit of 1 on kind k and 1 on
// queue default, a claimed job holds both run slots and a second claim
// finds nothing; each way an attempt ends or is given back frees both
// slots in its own write, after which the next claim takes a job.
func TestLimitEveryExitFreesTheSlot(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cases := []struct {
		name      string
		attempts  int                                                       // maxAttempts; 0: default
		cancelReq bool                                                      // a cancel is requested first
		exit      func(t *testing.T, b bundle, s *store.Store, j *jobs.Job) // ends the attempt
		want      jobs.State
	}{
		{name: "complete", want: jobs.StateSucceeded, exit: func(t *testing.T, b bundle, s *store.Store, j *jobs.Job) {
			require.NoError(t, s.Complete(b.ctx, store.LeaseOf(j)))
		}},
		{name: "complete many", want: jobs.StateSucceeded, exit: func(t *testing.T, b bundle, s *store.Store, j *jobs.Job) {
			lost, err := s.CompleteMany(b.ctx, []store.Lease{store.LeaseOf(j)})
			require.NoError(t, err)
			require.Empty(t, lost)
		}},
		{name: "batched complete", want: jobs.StateSucceeded, exit: func(t *testing.T, b bundle, _ *store.Store, j *jobs.Job) {
			require.NoError(t, store.Of(b.q).WithBatchedCompletion(time.Millisecond).Complete(b.ctx, store.LeaseOf(j)))
		}},
		{name: "fail, retried", want: jobs.StateAvailable, exit: func(t *testing.T, b bundle, s *store.Store, j *jobs.Job) {
			f, err := s.Fail(b.ctx, store.LeaseOf(j), j, boom)
			require.NoError(t, err)
			require.Equal(t, jobs.StateAvailable, f.State)
		}},
		{name: "fail, dead", attempts: 1, want: jobs.StateDead, exit: func(t *testing.T, b bundle, s *store.Store, j *jobs.Job) {
			f, err := s.Fail(b.ctx, store.LeaseOf(j), j, boom)
			require.NoError(t, err)
			require.Equal(t, jobs.StateDead, f.State)
		}},
		{name: "fail, permanent", want: jobs.StateDead, exit: func(t *testing.T, b bundle, s *store.Store, j *jobs.Job) {
			_, err := s.Fail(b.ctx, store.LeaseOf(j), j, jobs.Permanent(boom))
			require.NoError(t, err)
		}},
		{name: "fail, cancelled instead of retried", cancelReq: true, want: jobs.StateCancelled, exit: func(t *testing.T, b bundle, s *store.Store, j *jobs.Job) {
			f, err := s.Fail(b.ctx, store.LeaseOf(j), j, boom)
			require.NoError(t, err)
			require.Equal(t, jobs.StateCancelled, f.State)
		}},
		{name: "cancelled", cancelReq: true, want: jobs.StateCancelled, exit: func(t *testing.T, b bundle, s *store.Store, j *jobs.Job) {
			require.NoError(t, s.Cancelled(b.ctx, store.LeaseOf(j), j, "cancel requested"))
		}},
		{name: "release", want: jobs.StateAvailable, exit: func(t *testing.T, b bundle, s *store.Store, j *jobs.Job) {
			require.NoError(t, s.Release(b.ctx, store.LeaseOf(j)))
		}},
		{name: "release, cancelled instead", cancelReq: true, want: jobs.StateCancelled, exit: func(t *testing.T, b bundle, s *store.Store, j *jobs.Job) {
			require.NoError(t, s.Release(b.ctx, store.LeaseOf(j)))
		}},
		{name: "release claim", want: jobs.StateAvailable, exit: func(t *testing.T, b bundle, s *store.Store, j *jobs.Job) {
			n, err := s.ReleaseClaim(b.ctx, j.LeaseToken)
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}},
		{name: "reaped, re-queued", want: jobs.StateAvailable, exit: reapAfterLease},
		{name: "reaped, dead", attempts: 1, want: jobs.StateDead, exit: reapAfterLease},
		{name: "reaped, cancelled", cancelReq: true, want: jobs.StateCancelled, exit: reapAfterLease},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 1, "test"))
			require.NoError(t, b.q.SetLimit(b.ctx, queue.QueueLimit("default"), 1, "test"))
			// And partitioned: the jobs, without a field c, are in c's
			// partition of null.
			require.NoError(t, b.q.SetPartitionLimit(b.ctx, queue.KindLimit("k"), "c", 1, "test"))
			require.NoError(t, b.q.SetPartitionLimit(b.ctx, queue.QueueLimit("default"), "c", 1, "test"))
			for range 2 {
				_, err := b.q.Enqueue(b.ctx, "k", bson.M{}, queue.InsertOpts{MaxAttempts: tc.attempts})
				require.NoError(t, err)
			}
			s := store.Of(b.q)
			j, err := s.Claim(b.ctx, claimAll)
			require.NoError(t, err)
			require.NotNil(t, j)
			ks, qs := runSlots(t, b, j.ID)
			require.Equal(t, "k/0", ks)
			require.Equal(t, "default/0", qs)
			kp, qp := partSlots(t, b, j.ID)
			require.Regexp(t, `^k/[0-9a-f]{16}/0$`, kp)
			require.Regexp(t, `^default/[0-9a-f]{16}/0$`, qp)
			other, err := s.ClaimBatch(b.ctx, claimAsW2, 5)
			require.NoError(t, err)
			require.Empty(t, other, "the limit is full")

			if tc.cancelReq {
				_, err := b.q.Cancel(b.ctx, j.ID)
				require.NoError(t, err)
			}
			tc.exit(t, b, s, j)

			var got struct {
				State string `bson:"state"`
			}
			require.NoError(t, b.db.Collection("jobs").FindOne(b.ctx, bson.D{{Key: "_id", Value: j.ID}}).Decode(&got))
			require.Equal(t, string(tc.want), got.State)
			ks, qs = runSlots(t, b, j.ID)
			require.Empty(t, ks, "the kind's slot is freed")
			require.Empty(t, qs, "the queue's slot is freed")
			kp, qp = partSlots(t, b, j.ID)
			require.Empty(t, kp, "the kind's partition slot is freed")
			require.Empty(t, qp, "the queue's partition slot is freed")
			next, err := s.Claim(b.ctx, claimAsW2)
			require.NoError(t, err)
			require.NotNil(t, next, "the next claim takes a job")
		})
	}
}

// reapAfterLease moves the clock past j's lease and reaps it.
func reapAfterLease(t *testing.T, b bundle, s *store.Store, j *jobs.Job) {
	t.Helper()
	b.clock.Advance(j.LeaseExpiresAt.Sub(b.clock.Now()) + 10*time.Millisecond)
	res, err := s.Reap(b.ctx, 0, 10)
	require.NoError(t, err)
	require.Equal(t, 1, res.Settled())
}

// TestLimitConcurrentClaimersNeverExceedIt: 8 claimers, each with a client
// of its own (as separate processes), claim single jobs and batches of a
// kind limited to 3 mixed with an unlimited kind, and end each attempt by
// a completion, a failure retried or a release. Between a claim's return
// and its attempt's ending write no more than 3 are ever held, and a
// sampler of the database never sees more than 3 running; every job ends.
func TestLimitConcurrentClaimersNeverExceedIt(t *testing.T) {
	b := setup(t)
	const limit, limited, free = 3, 60, 30
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), limit, ""))
	var ins []queue.Insert
	for i := range limited + free {
		kind := "k"
		if i%3 == 2 {
			kind = "u"
		}
		ins = append(ins, queue.Insert{Kind: kind, Args: bson.M{"i": i}, Opts: queue.InsertOpts{MaxAttempts: 100}})
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)

	var held, maxHeld, maxSeen atomic.Int32
	bump := func(m *atomic.Int32, v int32) {
		for {
			old := m.Load()
			if v <= old || m.CompareAndSwap(old, v) {
				return
			}
		}
	}
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	done := make(chan struct{})
	var samplers sync.WaitGroup
	samplers.Add(1)
	go func() {
		defer samplers.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			n, err := b.db.Collection("jobs").CountDocuments(ctx, bson.D{{Key: "state", Value: "running"}, {Key: "kind", Value: "k"}})
			if err == nil {
				bump(&maxSeen, int32(n))
			}
			time.Sleep(time.Millisecond)
		}
	}()

	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q, err := queue.New(testdb.Client(t).Database(b.db.Name()), queue.Config{RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})
			if err != nil {
				t.Error(err)
				return
			}
			s := store.Of(q)
			p := store.ClaimParams{Owner: fmt.Sprintf("w%d", w), Queues: []string{"default"}, Kinds: []string{"k", "u"}, Lease: time.Minute}
			for ctx.Err() == nil {
				var got []*jobs.Job
				if w%2 == 0 {
					got, err = s.ClaimBatch(ctx, p, 1+rand.IntN(4))
				} else {
					var j *jobs.Job
					if j, err = s.Claim(ctx, p); j != nil {
						got = []*jobs.Job{j}
					}
				}
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if len(got) == 0 {
					n, _ := b.db.Collection("jobs").CountDocuments(ctx, bson.D{{Key: "state", Value: bson.D{{Key: "$ne", Value: "succeeded"}}}})
					if n == 0 {
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				for _, j := range got {
					if j.Kind == "k" {
						bump(&maxHeld, held.Add(1))
					}
				}
				time.Sleep(time.Duration(20+rand.IntN(30)) * time.Millisecond)
				for _, j := range got {
					if j.Kind == "k" {
						held.Add(-1) // before the write that frees the slot
					}
					switch rand.IntN(4) {
					case 0:
						_, err = s.Fail(ctx, store.LeaseOf(j), j, errors.New("flaky"))
					case 1:
						err = s.Release(ctx, store.LeaseOf(j))
					default:
						err = s.Complete(ctx, store.LeaseOf(j))
					}
					if err != nil {
						t.Errorf("end attempt of %s: %v", j.ID, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	samplers.Wait()
	require.NoError(t, ctx.Err(), "every job ended in time")
	require.LessOrEqual(t, maxHeld.Load(), int32(limit), "attempts held at once")
	require.LessOrEqual(t, maxSeen.Load(), int32(limit), "running jobs of the kind sampled in the database")
	// The claims raced up to the limit, or next to it on a loaded
	// machine (2 of 3 once in six runs under -race): with the index not
	// unique, 4 to 5 are held.
	require.GreaterOrEqual(t, maxHeld.Load(), int32(limit-1), "the claims raced near the limit (the test can fail)")
	require.Empty(t, slotsHeld(t, b), "no slot is left held")
}

// TestLimitStalledAttemptReapedAndResumed: an attempt stalls past its
// lease and is reaped, which frees its slot; another worker claims the job
// with the slot; the stalled attempt resumes and tries every write it
// could make: each finds its lease lost, and the limit's slots stay one
// held, by the new owner, so a third claim finds the limit full.
func TestLimitStalledAttemptReapedAndResumed(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 1, ""))
	for prio := range 2 { // the stalled job first, and again after its retry's backoff
		_, err := b.q.Enqueue(b.ctx, "k", bson.M{}, queue.InsertOpts{Priority: 1 - prio})
		require.NoError(t, err)
	}
	s := store.Of(b.q)
	p := claimAll
	p.Lease = time.Minute
	stalled, err := s.Claim(b.ctx, p)
	require.NoError(t, err)
	require.NotNil(t, stalled)
	full, err := s.Claim(b.ctx, claimAsW2)
	require.NoError(t, err)
	require.Nil(t, full, "held while its lease holds")
	res, err := s.Reap(b.ctx, 0, 10)
	require.NoError(t, err)
	require.Zero(t, res.Settled(), "not reaped while its lease holds")

	reapAfterLease(t, b, s, stalled)
	b.clock.Advance(20 * time.Millisecond) // the retry's backoff (at most 10 ms here)
	owner, err := s.Claim(b.ctx, claimAsW2)
	require.NoError(t, err)
	require.Equal(t, stalled.ID, owner.ID, "the stalled attempt's job, claimed again")

	l := store.LeaseOf(stalled)
	_, err = heartbeat(b.ctx, s, l, time.Minute)
	require.ErrorIs(t, err, jobs.ErrLeaseLost)
	require.ErrorIs(t, s.Complete(b.ctx, l), jobs.ErrLeaseLost)
	_, err = s.Fail(b.ctx, l, stalled, errors.New("late"))
	require.ErrorIs(t, err, jobs.ErrLeaseLost)
	require.ErrorIs(t, s.Release(b.ctx, l), jobs.ErrLeaseLost)
	require.ErrorIs(t, s.Cancelled(b.ctx, l, stalled, "late"), jobs.ErrLeaseLost)
	n, err := s.ReleaseClaim(b.ctx, l.Token)
	require.NoError(t, err)
	require.Zero(t, n)

	require.Equal(t, map[string]int{"running": 1}, slotsHeld(t, b))
	ks, _ := runSlots(t, b, owner.ID)
	require.Equal(t, "k/0", ks)
	third, err := s.Claim(b.ctx, store.ClaimParams{Owner: "w3", Queues: []string{"default"}, Kinds: []string{"k"}, Lease: time.Minute})
	require.NoError(t, err)
	require.Nil(t, third, "still full: the stalled attempt got nothing back")
	require.NoError(t, s.Complete(b.ctx, store.LeaseOf(owner)))
	require.Empty(t, slotsHeld(t, b))
}

// TestLimitFullKindIsLeftOutOfTheClaim: a kind whose limit is full, with
// a backlog at a higher priority, does not block another kind: claims
// take the other kind's jobs, and a claim that can take nothing but the
// full kind sends no claim to the jobs at all (it reads the limit's
// running jobs, one find).
func TestLimitFullKindIsLeftOutOfTheClaim(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("a"), 1, ""))
	for i := range 20 {
		_, err := b.q.Enqueue(b.ctx, "a", bson.M{"i": i}, queue.InsertOpts{Priority: 10})
		require.NoError(t, err)
	}
	for i := range 3 {
		_, err := b.q.Enqueue(b.ctx, "b", bson.M{"i": i}, queue.InsertOpts{})
		require.NoError(t, err)
	}
	mc, cmds := testdb.Monitored(t)
	q, err := queue.New(mc.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	s := store.Of(q)
	p := store.ClaimParams{Owner: "w", Queues: []string{"default"}, Kinds: []string{"a", "b"}, Lease: time.Minute}
	first, err := s.Claim(b.ctx, p)
	require.NoError(t, err)
	require.Equal(t, "a", first.Kind, "the higher priority first")

	got, err := s.ClaimBatch(b.ctx, p, 10)
	require.NoError(t, err)
	require.Len(t, got, 3)
	for _, j := range got {
		require.Equal(t, "b", j.Kind)
	}
	before := len(cmds())
	for range 3 {
		j, err := s.Claim(b.ctx, p)
		require.NoError(t, err)
		require.Nil(t, j)
	}
	require.Equal(t, []string{"find jobs", "findAndModify jobs", "find jobs", "findAndModify jobs", "find jobs", "findAndModify jobs"}, cmds()[before:],
		"each claim reads the limit's running jobs, then claims from kind b alone")
	onlyA := p
	onlyA.Kinds = []string{"a"}
	before = len(cmds())
	for range 3 {
		got, err := s.ClaimBatch(b.ctx, onlyA, 5)
		require.NoError(t, err)
		require.Empty(t, got)
	}
	require.Equal(t, []string{"find jobs", "find jobs", "find jobs"}, cmds()[before:],
		"a claim of the full kind alone reads its running jobs and sends no claim")

	require.NoError(t, s.Complete(b.ctx, store.LeaseOf(first)))
	next, err := s.Claim(b.ctx, p)
	require.NoError(t, err)
	require.Equal(t, "a", next.Kind)
}

// TestLimitCountsRunningJobsWithoutASlot: jobs running when a limit is set
// hold no slot but count: under a limit of 2 with 2 such jobs running no
// claim takes one; once one ends, one claim does; lowering a limit below
// the slots held waits for them the same way.
func TestLimitCountsRunningJobsWithoutASlot(t *testing.T) {
	b := setup(t)
	enqueueN(t, b, 6)
	s := store.Of(b.q)
	before, err := s.ClaimBatch(b.ctx, claimAll, 2)
	require.NoError(t, err)
	require.Len(t, before, 2)
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 2, ""))
	j, err := s.Claim(b.ctx, claimAll)
	require.NoError(t, err)
	require.Nil(t, j)
	require.NoError(t, s.Complete(b.ctx, store.LeaseOf(before[0])))
	got, err := s.ClaimBatch(b.ctx, claimAll, 4)
	require.NoError(t, err)
	require.Len(t, got, 1)

	require.NoError(t, s.Complete(b.ctx, store.LeaseOf(before[1])))
	got2, err := s.ClaimBatch(b.ctx, claimAll, 4)
	require.NoError(t, err)
	require.Len(t, got2, 1)
	// Two hold slots; lowered to 1, none more until both end.
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 1, ""))
	require.NoError(t, s.Complete(b.ctx, store.LeaseOf(got[0])))
	j, err = s.Claim(b.ctx, claimAll)
	require.NoError(t, err)
	require.Nil(t, j, "one still runs: the limit of 1 is full")
	require.NoError(t, s.Complete(b.ctx, store.LeaseOf(got2[0])))
	j, err = s.Claim(b.ctx, claimAll)
	require.NoError(t, err)
	require.NotNil(t, j)
}

// TestLimitsStoredAndRead: limits are set, listed with their running jobs,
// cleared; a bad name or value is refused; a limit another app wrote
// malformed is shown as such and limits nothing.
func TestLimitsStoredAndRead(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetLimit(b.ctx, "kind:k", 2, "ops"))
	require.NoError(t, b.q.SetLimit(b.ctx, "queue:default", 5, ""))
	require.ErrorContains(t, b.q.SetLimit(b.ctx, "k", 2, ""), "kind:KIND or queue:QUEUE")
	require.ErrorContains(t, b.q.SetLimit(b.ctx, "kind:", 2, ""), "empty")
	require.ErrorContains(t, b.q.SetLimit(b.ctx, "kind:k", -1, ""), "between 0 and")
	enqueueN(t, b, 3)
	got, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 3)
	require.NoError(t, err)
	require.Len(t, got, 2)

	_, err = b.db.Collection("limits").InsertOne(b.ctx, bson.D{{Key: "_id", Value: "kind:x"}, {Key: "limit", Value: "three"}})
	require.NoError(t, err)
	ls, err := b.q.RunLimits(b.ctx)
	require.NoError(t, err)
	require.Len(t, ls, 3)
	require.Equal(t, "kind:k", ls[0].Name)
	require.Equal(t, 2, ls[0].Limit)
	require.Equal(t, 2, ls[0].Running)
	require.Equal(t, "ops", ls[0].SetBy)
	require.Equal(t, "kind:x", ls[1].Name)
	require.Contains(t, ls[1].Malformed, "not an integer")
	require.Equal(t, "queue:default", ls[2].Name)
	require.Equal(t, 2, ls[2].Running)

	had, err := b.q.ClearLimit(b.ctx, "kind:k")
	require.NoError(t, err)
	require.True(t, had)
	had, err = b.q.ClearLimit(b.ctx, "kind:k")
	require.NoError(t, err)
	require.False(t, had)
	j, err := store.Of(b.q).Claim(b.ctx, claimAll)
	require.NoError(t, err)
	require.NotNil(t, j, "the kind is no longer limited")
}

// TestLimitStrandedRunSlotsFreedOnlyWhileStranded: the reaper's
// FreeStrandedRunSlots reads the stranded jobs, then frees their slots by
// id. A job re-claimed while it stalled in between holds its new slot
// (the write is conditioned again, not only on the id read); a running
// job's slot is never touched, and one written as null is cleared.
func TestLimitStrandedRunSlotsFreedOnlyWhileStranded(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 3, ""))
	ids := enqueueN(t, b, 4)
	jobsColl := b.db.Collection("jobs")
	set := func(id string, d bson.D) {
		t.Helper()
		_, err := jobsColl.UpdateOne(b.ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: d}})
		require.NoError(t, err)
	}
	slotOf := func(id string) bson.RawValue {
		t.Helper()
		raw, err := jobsColl.FindOne(b.ctx, bson.D{{Key: "_id", Value: id}}).Raw()
		require.NoError(t, err)
		return raw.Lookup("kindRunSlot")
	}
	var running []*jobs.Job
	for range 2 {
		j, err := store.Of(b.q).Claim(b.ctx, claimAll)
		require.NoError(t, err)
		require.NotNil(t, j)
		running = append(running, j)
	}
	// Another app re-queues the first with its slot left; a job not
	// running carries a null slot.
	set(running[0].ID, bson.D{{Key: "state", Value: "available"}})
	set(ids[3], bson.D{{Key: "kindRunSlot", Value: nil}})

	// Between the read and the frees, the re-queued job is claimed again
	// (by a write of another app that keeps its slot, as a worker's stamp
	// of that slot would): it is running, and its slot is held.
	s := store.WithFindUpdateHook(store.Of(b.q), func() {
		set(running[0].ID, bson.D{{Key: "state", Value: "running"}})
	})
	n, err := s.FreeStrandedRunSlots(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the null slot was freed")
	require.Equal(t, bson.TypeString, slotOf(running[0].ID).Type, "the job running again keeps its slot")
	require.Equal(t, bson.TypeString, slotOf(running[1].ID).Type, "a running job keeps its slot")
	require.Zero(t, slotOf(ids[3]).Type, "the null slot is gone")

	// Nothing stranded: a pass changes nothing.
	n, err = store.Of(b.q).FreeStrandedRunSlots(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestLimitStrandedRunSlotsAreFreed: a job another app ended or re-queued
// with its run slot left holds it no more after FreeStrandedRunSlots.
func TestLimitStrandedRunSlotsAreFreed(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 1, ""))
	enqueueN(t, b, 2)
	j, err := store.Of(b.q).Claim(b.ctx, claimAll)
	require.NoError(t, err)
	_, err = b.db.Collection("jobs").UpdateOne(b.ctx, bson.D{{Key: "_id", Value: j.ID}}, bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "succeeded"}}}})
	require.NoError(t, err)
	n, err := store.Of(b.q).FreeStrandedRunSlots(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	next, err := store.Of(b.q).Claim(b.ctx, claimAll)
	require.NoError(t, err)
	require.NotNil(t, next)
}
