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

// handoffSetup sets a limit of 1 on kind k long ago, enqueues a job of
// priority 1 (claimed first) and n of priority 0, claims the first with
// s, and reads the successors ahead.
func handoffSetup(t *testing.T, b bundle, s *store.Store, n int) (*jobs.Job, []*store.Successor) {
	t.Helper()
	// A loaded machine may take seconds between the reads and the
	// hand-off: the caches must not go stale meanwhile.
	store.SetPauseRefresh(s, time.Hour)
	store.SetLimitRefresh(s, time.Hour)
	setLimitLongAgo(t, b, queue.KindLimit("k"), 1)
	_, err := b.q.Enqueue(b.ctx, "k", bson.M{"first": true}, queue.InsertOpts{Priority: 1})
	require.NoError(t, err)
	enqueueN(t, b, n)
	a, err := s.Claim(b.ctx, claimAll)
	require.NoError(t, err)
	require.NotNil(t, a)
	require.True(t, s.HoldsRunSlot(a.ID))
	require.True(t, s.SuccessorsWanted(a.ID), "a limit of 1 held by a is full")
	succ, err := s.ReadSuccessors(b.ctx, claimAll, "k", "default", 4)
	require.NoError(t, err)
	require.Len(t, succ, min(n, 4))
	return a, succ
}

// handoffParams is claimAll with a fresh token.
func handoffParams(token string) store.ClaimParams {
	p := claimAll
	p.Token = token
	return p
}

// runningOfK returns the ids of the running jobs of kind k.
func runningOfK(t *testing.T, b bundle) []string {
	t.Helper()
	cur, err := b.db.Collection("jobs").Find(b.ctx, bson.D{{Key: "state", Value: jobs.StateRunning}, {Key: "kind", Value: "k"}})
	require.NoError(t, err)
	var docs []struct {
		ID string `bson:"_id"`
	}
	require.NoError(t, cur.All(b.ctx, &docs))
	var ids []string
	for _, d := range docs {
		ids = append(ids, d.ID)
	}
	return ids
}

// TestHandoffCompletesAndClaimsInOneCommand: a job holding the one run
// slot of a limit succeeds and hands the slot to a job read ahead, with
// one command on the jobs: the job is succeeded, the successor running
// in the slot under the given token and lease, and this client knows it
// holds it.
func TestHandoffCompletesAndClaimsInOneCommand(t *testing.T) {
	b := setup(t)
	_, s, cmds := monitoredStore(t, b)
	a, succ := handoffSetup(t, b, s, 3)
	before := jobsCommands(cmds())
	sent := time.Now()
	got, err := s.CompleteHandingOff(b.ctx, store.LeaseOf(a), succ[0], handoffParams("handoff-1"))
	require.NoError(t, err)
	require.Equal(t, 1, jobsCommands(cmds())-before, "one bulkWrite")
	require.NotNil(t, got)
	require.Equal(t, succ[0].Job.ID, got.ID)
	require.Equal(t, jobs.StateRunning, got.State)
	require.Equal(t, "handoff-1", got.LeaseToken)
	require.Equal(t, 1, got.Attempt)
	require.WithinDuration(t, sent.Add(claimAll.Lease), *got.LeaseExpiresAt, time.Second, "the lease is counted from before the send")
	require.Equal(t, jobs.StateSucceeded, b.get(t, a.ID).State)
	stored := b.get(t, got.ID)
	require.Equal(t, jobs.StateRunning, stored.State)
	require.Equal(t, "handoff-1", stored.LeaseToken)
	require.Equal(t, got.Args, stored.Args, "the successor is as read")
	ks, _ := runSlots(t, b, got.ID)
	require.Equal(t, "k/0", ks, "the slot the first job freed")
	require.False(t, s.HoldsRunSlot(a.ID))
	require.True(t, s.HoldsRunSlot(got.ID))
	require.Equal(t, []string{got.ID}, runningOfK(t, b))

	// The successor hands on in turn; a candidate read before it was
	// handed the slot is not offered twice by the store: its stamp does
	// not match.
	got2, err := s.CompleteHandingOff(b.ctx, store.LeaseOf(got), succ[0], handoffParams("handoff-2"))
	require.NoError(t, err)
	require.Nil(t, got2, "succ[0] already ran")
	require.Equal(t, jobs.StateSucceeded, b.get(t, got.ID).State)
	require.Empty(t, runningOfK(t, b))
	require.Empty(t, slotsHeld(t, b), "the slot is free: the next claim takes it")
}

// TestHandoffSuccessorTakenMeanwhile: a successor another worker claimed
// after it was read matches nothing: the job is completed and its slot
// freed; HandOnFreed stamps another successor into it, and once that one
// ends, the caller's next claim takes it.
func TestHandoffSuccessorTakenMeanwhile(t *testing.T) {
	b := setup(t)
	s := store.Of(b.q)
	a, succ := handoffSetup(t, b, s, 3)
	// Another worker claims succ[0] and gives it back: it is available
	// again, but not as read (its updatedAt moved).
	_, err := b.db.Collection("jobs").UpdateOne(b.ctx, bson.D{{Key: "_id", Value: succ[0].Job.ID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "updatedAt", Value: time.Now().Add(time.Second)}}}})
	require.NoError(t, err)
	got, err := s.CompleteHandingOff(b.ctx, store.LeaseOf(a), succ[0], handoffParams("handoff-1"))
	require.NoError(t, err)
	require.Nil(t, got)
	require.Equal(t, jobs.StateSucceeded, b.get(t, a.ID).State)
	require.Equal(t, jobs.StateAvailable, b.get(t, succ[0].Job.ID).State)
	require.Empty(t, slotsHeld(t, b))

	// One more stamp hands the freed slot to another successor read
	// ahead; a taken one matches nothing.
	got, err = s.HandOnFreed(b.ctx, a.ID, succ[0], handoffParams("handoff-2"))
	require.NoError(t, err)
	require.Nil(t, got, "still not as read")
	got, err = s.HandOnFreed(b.ctx, a.ID, succ[1], handoffParams("handoff-3"))
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Equal(t, succ[1].Job.ID, got.ID)
	require.Equal(t, "handoff-3", b.get(t, got.ID).LeaseToken)
	require.Equal(t, []string{got.ID}, runningOfK(t, b))
	require.True(t, s.HoldsRunSlot(got.ID))
	require.False(t, s.HoldsRunSlot(a.ID))
	_, err = s.HandOnFreed(b.ctx, a.ID, succ[0], handoffParams("handoff-4"))
	require.ErrorIs(t, err, store.ErrNoHandoff, "a's slots went to got")
	require.NoError(t, s.Complete(b.ctx, store.LeaseOf(got)))
	s.RunEnded(got.ID)
	next, err := s.Claim(b.ctx, claimAll)
	require.NoError(t, err)
	require.NotNil(t, next)
}

// TestHandoffStalledAndReaped: the job handing its slot on stalled past
// its lease and was reaped, which freed its slot. When another worker
// re-claimed its job into the slot, the successor's stamp is refused (a
// duplicate key): nothing more runs. When no one took the slot, the
// successor takes it, as any claim could. Either way the completion
// reports the lease lost, the limit of 1 is never passed, and no job runs
// twice.
func TestHandoffStalledAndReaped(t *testing.T) {
	t.Parallel()
	for _, reclaimed := range []bool{true, false} {
		t.Run(map[bool]string{true: "slot re-taken", false: "slot free"}[reclaimed], func(t *testing.T) {
			b := setup(t)
			s := store.Of(b.q)
			a, succ := handoffSetup(t, b, s, 2)
			reapAfterLease(t, b, s, a)
			b.clock.Advance(20 * time.Millisecond) // the retry's backoff
			var owner *jobs.Job
			if reclaimed {
				// Another process, with caches of its own.
				oq, err := queue.New(testdb.Client(t).Database(b.db.Name()), queue.Config{})
				require.NoError(t, err)
				store.Of(oq).SetClock(b.clock.Now)
				owner, err = store.Of(oq).Claim(b.ctx, claimAsW2)
				require.NoError(t, err)
				require.Equal(t, a.ID, owner.ID, "the stalled job, claimed again")
			}
			got, err := s.CompleteHandingOff(b.ctx, store.LeaseOf(a), succ[0], handoffParams("handoff-1"))
			require.ErrorIs(t, err, jobs.ErrLeaseLost)
			if reclaimed {
				require.Nil(t, got, "the slot is held: the stamp is refused")
				require.Equal(t, []string{owner.ID}, runningOfK(t, b))
				j := b.get(t, succ[0].Job.ID)
				require.Equal(t, jobs.StateAvailable, j.State)
				require.Zero(t, j.Attempt)
			} else {
				require.NotNil(t, got, "the slot was free")
				require.Equal(t, succ[0].Job.ID, got.ID)
				require.Equal(t, []string{got.ID}, runningOfK(t, b))
				require.Equal(t, jobs.StateAvailable, b.get(t, a.ID).State, "the stalled job waits, re-queued")
			}
			require.Equal(t, map[string]int{"running": 1}, slotsHeld(t, b))
			// A third process finds the limit full.
			tq, err := queue.New(testdb.Client(t).Database(b.db.Name()), queue.Config{})
			require.NoError(t, err)
			store.Of(tq).SetClock(b.clock.Now)
			third, err := store.Of(tq).Claim(b.ctx, store.ClaimParams{Owner: "w3", Queues: []string{"default"}, Kinds: []string{"k"}, Lease: time.Minute})
			require.NoError(t, err)
			require.Nil(t, third, "the limit is full")
			// The successor offered again (a stale read) is not claimed
			// twice: nothing is sent when the slots went to it, or when
			// a refused stamp made the views of the slots untrusted.
			again, err := s.CompleteHandingOff(b.ctx, store.LeaseOf(a), succ[0], handoffParams("handoff-2"))
			require.ErrorIs(t, err, store.ErrNoHandoff)
			require.Nil(t, again)
			require.Equal(t, map[string]int{"running": 1}, slotsHeld(t, b))
		})
	}
}

// TestHandoffRefusedAfterTheCompletion: the completion is applied and the
// successor's stamp refused, its slot held by a job of another process
// (here one whose slot an app rewrote, so that another claim took the
// slot the ending job's client knows it by): the job is completed, the
// successor left available, and the limit holds.
func TestHandoffRefusedAfterTheCompletion(t *testing.T) {
	b := setup(t)
	s := store.Of(b.q)
	setLimitLongAgo(t, b, queue.KindLimit("k"), 2)
	_, err := b.q.Enqueue(b.ctx, "k", bson.M{"first": true}, queue.InsertOpts{Priority: 1})
	require.NoError(t, err)
	enqueueN(t, b, 3)
	store.SetPauseRefresh(s, time.Hour)
	store.SetLimitRefresh(s, time.Hour)
	two, err := s.ClaimBatch(b.ctx, claimAll, 2)
	require.NoError(t, err)
	require.Len(t, two, 2)
	a := two[0]
	if ks, _ := runSlots(t, b, a.ID); ks != "k/0" {
		a = two[1]
	}
	for _, j := range two {
		if j != a {
			require.NoError(t, s.Complete(b.ctx, store.LeaseOf(j)))
			s.RunEnded(j.ID)
		}
	}
	ks, _ := runSlots(t, b, a.ID)
	require.Equal(t, "k/0", ks)
	// a's slot rewritten above the limit: another claim counts it and
	// may take k/0 only.
	_, err = b.db.Collection("jobs").UpdateOne(b.ctx, bson.D{{Key: "_id", Value: a.ID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "kindRunSlot", Value: "k/9"}}}})
	require.NoError(t, err)
	oq, err := queue.New(testdb.Client(t).Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	other, err := store.Of(oq).Claim(b.ctx, claimAsW2)
	require.NoError(t, err)
	require.NotNil(t, other)
	oks, _ := runSlots(t, b, other.ID)
	require.Equal(t, ks, oks, "the other process took the slot a's client knows a by")

	succ, err := s.ReadSuccessors(b.ctx, claimAll, "k", "default", 4)
	require.NoError(t, err)
	require.NotEmpty(t, succ)
	got, err := s.CompleteHandingOff(b.ctx, store.LeaseOf(a), succ[0], handoffParams("handoff-1"))
	require.NoError(t, err, "completed")
	require.Nil(t, got, "the stamp was refused")
	require.Equal(t, jobs.StateSucceeded, b.get(t, a.ID).State)
	require.Equal(t, jobs.StateAvailable, b.get(t, succ[0].Job.ID).State)
	require.Equal(t, []string{other.ID}, runningOfK(t, b))
	require.Equal(t, map[string]int{"running": 1}, slotsHeld(t, b))
}

// TestHandoffLostReply: a hand-off applied whose reply is lost reports
// neither done nor lost; the successor its stamp claimed is given back
// with ReleaseClaim, uncounted, and Complete tried again finds the
// completion applied.
func TestHandoffLostReply(t *testing.T) {
	b := setup(t)
	s := store.Of(b.q)
	a, succ := handoffSetup(t, b, s, 2)
	lost := store.WithLostFinishReply(s, "handoff", 1, errReset)
	got, err := store.Of(lost).CompleteHandingOff(b.ctx, store.LeaseOf(a), succ[0], handoffParams("handoff-1"))
	require.ErrorIs(t, err, errReset)
	require.NotErrorIs(t, err, jobs.ErrLeaseLost)
	require.Nil(t, got)
	require.Equal(t, jobs.StateRunning, b.get(t, succ[0].Job.ID).State, "applied")

	n, err := s.ReleaseClaim(b.ctx, "handoff-1")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	requireReleasedUncounted(t, b, succ[0].Job.ID)
	require.NoError(t, s.Complete(b.ctx, store.LeaseOf(a)), "the completion is read back")
	require.Equal(t, jobs.StateSucceeded, b.get(t, a.ID).State)
	require.Empty(t, slotsHeld(t, b))
}

// TestHandoffOnlyWhereAClaimWouldGiveTheSlot: no hand-off is sent (and
// nothing is read ahead) when a claim would not give the successor the
// slot the job frees: a rate on the kind, its queue paused, a successor
// of another kind or queue, a partition limit on the kind, a limit lowered
// below the slot, a limit far from full. The job is then completed as usual.
func TestHandoffOnlyWhereAClaimWouldGiveTheSlot(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		before func(t *testing.T, b bundle, s *store.Store, a *jobs.Job, next *store.Successor)
	}{
		{"rate", func(t *testing.T, b bundle, s *store.Store, _ *jobs.Job, _ *store.Successor) {
			require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 100, Per: time.Second}, "test"))
			_, err := s.ReadSuccessors(b.ctx, claimAll, "k", "default", 4) // reads the limits, rates with them
			require.NoError(t, err)
		}},
		{"paused", func(t *testing.T, b bundle, s *store.Store, _ *jobs.Job, _ *store.Successor) {
			_, err := b.q.Pause(b.ctx, "default", "test")
			require.NoError(t, err)
			got, err := s.ReadSuccessors(b.ctx, claimAll, "k", "default", 4)
			require.NoError(t, err)
			require.Empty(t, got)
		}},
		{"another kind", func(t *testing.T, _ bundle, _ *store.Store, _ *jobs.Job, next *store.Successor) {
			next.Job.Kind = "other"
		}},
		{"partitioned", func(t *testing.T, b bundle, s *store.Store, _ *jobs.Job, _ *store.Successor) {
			// Set after a's claim, so a holds no partition slot: its
			// successor would run without one.
			require.NoError(t, b.q.SetPartitionLimit(b.ctx, queue.KindLimit("k"), "c", 1, "test"))
			got, err := s.ReadSuccessors(b.ctx, claimAll, "k", "default", 4)
			require.NoError(t, err)
			require.Empty(t, got)
		}},
		{"lowered", func(t *testing.T, b bundle, s *store.Store, _ *jobs.Job, _ *store.Successor) {
			require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 0, "test"))
			backdateLimit(t, b, queue.KindLimit("k"))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			s := store.Of(b.q)
			a, succ := handoffSetup(t, b, s, 2)
			tc.before(t, b, s, a, succ[0])
			got, err := s.CompleteHandingOff(b.ctx, store.LeaseOf(a), succ[0], handoffParams("handoff-1"))
			require.ErrorIs(t, err, store.ErrNoHandoff)
			require.Nil(t, got)
			require.Equal(t, jobs.StateRunning, b.get(t, a.ID).State, "nothing sent")
			require.NoError(t, s.Complete(b.ctx, store.LeaseOf(a)))
		})
	}

	t.Run("far from full", func(t *testing.T) {
		b := setup(t)
		setLimitLongAgo(t, b, queue.KindLimit("k"), 10)
		enqueueN(t, b, 3)
		s := store.Of(b.q)
		a, err := s.Claim(b.ctx, claimAll)
		require.NoError(t, err)
		require.True(t, s.HoldsRunSlot(a.ID))
		require.False(t, s.SuccessorsWanted(a.ID), "1 of 10 held: no read ahead")
	})
}

// TestHandoffNeverPassesTheLimit: processes handing their slots on and
// claiming beside each other, with stale successors among them, never
// run more jobs of the limit than it allows, and every job runs once.
func TestHandoffNeverPassesTheLimit(t *testing.T) {
	b := setup(t)
	const limit, n = 2, 40
	setLimitLongAgo(t, b, queue.KindLimit("k"), limit)
	enqueueN(t, b, n)
	type proc struct {
		s *store.Store
		p store.ClaimParams
	}
	var procs []proc
	for w := range 3 {
		q, err := queue.New(testdb.Client(t).Database(b.db.Name()), queue.Config{})
		require.NoError(t, err)
		p := claimAll
		p.Owner = "w" + string(rune('a'+w))
		procs = append(procs, proc{store.Of(q), p})
	}
	ran := map[string]int{}
	most := 0
	check := func() {
		running := runningOfK(t, b)
		most = max(most, len(running))
		require.LessOrEqual(t, len(running), limit)
	}
	var held []*jobs.Job
	var owners []int
	handed := 0
	for round := 0; len(ran) < n && round < 10*n; round++ {
		i := round % len(procs)
		pr := procs[i]
		// Each process runs one job at a time: claim one, or end its own
		// with a hand-off to a successor read ahead (maybe stale).
		mine := -1
		for h, o := range owners {
			if o == i {
				mine = h
			}
		}
		if mine < 0 {
			got, err := pr.s.ClaimBatch(b.ctx, pr.p, 1)
			require.NoError(t, err)
			for _, j := range got {
				ran[j.ID]++
				held, owners = append(held, j), append(owners, i)
			}
			check()
			continue
		}
		j := held[mine]
		succ, err := pr.s.ReadSuccessors(b.ctx, pr.p, "k", "default", 3)
		require.NoError(t, err)
		if len(succ) == 0 {
			require.NoError(t, pr.s.Complete(b.ctx, store.LeaseOf(j)))
			pr.s.RunEnded(j.ID)
			held, owners = append(held[:mine], held[mine+1:]...), append(owners[:mine], owners[mine+1:]...)
			continue
		}
		p := pr.p
		p.Token = "t" + j.ID + time.Now().String()
		got, err := pr.s.CompleteHandingOff(b.ctx, store.LeaseOf(j), succ[len(succ)-1], p)
		if errors.Is(err, store.ErrNoHandoff) {
			require.NoError(t, pr.s.Complete(b.ctx, store.LeaseOf(j)))
			got = nil
		} else {
			require.NoError(t, err)
		}
		if got == nil {
			pr.s.RunEnded(j.ID)
			held, owners = append(held[:mine], held[mine+1:]...), append(owners[:mine], owners[mine+1:]...)
		} else {
			handed++
			ran[got.ID]++
			held[mine] = got
		}
		check()
	}
	for _, j := range held {
		require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(j)))
	}
	require.Len(t, ran, n, "every job ran")
	for id, times := range ran {
		require.Equal(t, 1, times, "job %s ran once", id)
	}
	require.Equal(t, limit, most, "the limit was reached")
	require.Positive(t, handed, "slots were handed on")
	require.Empty(t, slotsHeld(t, b))
	t.Logf("%d of %d jobs started by a hand-off", handed, n)
}
