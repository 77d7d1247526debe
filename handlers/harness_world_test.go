package handlers_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Worlds: what else happens while attempt A is stalled. A schedule of two
// attempts runs one world (see harnessSchedules): at A's stall, while A
// still holds the job ("cancel", "capacity"), or once B is done and the
// case's interference ran, just before A resumes (the others). Each runs
// its passes and actions to completion.
const (
	worldNone = "none"
	// worldCapacity: the job's queue gets a capacity, then loses it, then
	// gets it back and lowered, around enqueues; admissions must never
	// take the queue's unfinished jobs (A's running job among them) past
	// the capacity, and what is reported is the real count.
	worldCapacity = "capacity"
	// worldRetry: an operator retries the job (when finished): it runs
	// again, and its effects must still happen once.
	worldRetry = "retry"
	// worldMaintenance: every maintenance pass runs to completion: the
	// reaper, the stranded-slot sweep, the rename sweep, transfer
	// recovery, the ledger sweep, the tree sweep keeping one version, and
	// retention of every finished state with no retention at all.
	worldMaintenance = "maintenance"
	// worldCancel: an operator cancels the job while A holds it; the
	// reaper ends it cancelled; no other attempt runs. A's late writes
	// must leave the data whole (the case's either check).
	worldCancel = "cancel"
	// worldPurge: an operator purges every finished job.
	worldPurge = "purge"
	// worldDelete: an operator deletes the job (forced).
	worldDelete = "delete"
	// worldLimit: the job's kind has a concurrency limit of 1 from before
	// A's claim, so A holds its run slot. While A holds it, the limit is
	// lowered to 0, raised to 2, lowered to 1, cleared and set back to 1
	// around claims of a copy of the job; then the reaper re-queues A's
	// job, B claims it under the limit and A resumes. At every step no
	// more running jobs of the kind than the limit (or than ran when it
	// was lowered), only running jobs hold a run slot, and at the end none
	// does (limitWorld, checkLimit).
	worldLimit = "limit"
	// worldRate: the job's kind has a rate limit of two starts an hour,
	// A's claim taking the first. While A holds the job, a copy takes the
	// second and is given back, a claim gets nothing, and the burst is
	// raised by two, for the copy and B; after B, exactly four starts were
	// reserved (harness_rate_test.go).
	worldRate = "rate"
	// worldPartition: the job's kind is partitioned, 1 running job per
	// value of its first args field (or of customerId, which it lacks),
	// with no total, from before A's claim, so A holds its partition's
	// only slot. While A holds it, copies of the job of A's partition,
	// of another and of the numbers 7 and 7.0 are claimed around the
	// partition limit lowered, raised under a total, lowered and cleared
	// (partitionWorld); then B claims the job under the limit and A
	// resumes. At every step no partition runs more jobs than its limit
	// (or than ran when it was lowered), each running job holds a
	// partition slot of its own, only running jobs hold one, and at the
	// end none does (checkPartition).
	worldPartition = "partition"
)

// harnessWorlds, in the order harnessSchedules turns through them.
var harnessWorlds = []string{worldNone, worldCapacity, worldRetry, worldMaintenance, worldCancel, worldPurge, worldDelete, worldLimit, worldRate, worldPartition}

// atStall reports whether world w runs while A still holds the job.
func atStall(w string) bool {
	return w == worldCancel || w == worldCapacity || w == worldLimit || w == worldRate || w == worldPartition
}

// runWorld runs world w.
func (h *harnessEnv) runWorld(t *testing.T, w string) {
	t.Helper()
	h.must(t, "read the job", func() error {
		j, err := h.q.Get(h.ctx, h.subject)
		if err == nil {
			h.before = j
		}
		if errors.Is(err, queue.ErrNotFound) {
			return nil
		}
		return err
	})
	if w == worldMaintenance || w == worldPurge || w == worldDelete {
		h.must(t, "read the jobs", func() error {
			cur, err := store.Of(h.q).Collection().Find(h.ctx, bson.D{})
			if err != nil {
				return err
			}
			return cur.All(h.ctx, &h.gone)
		})
	}
	switch w {
	case worldNone:
	case worldCapacity:
		h.capacityWorld(t)
	case worldRetry:
		var out []queue.ActionResult
		h.must(t, "retry", func() (err error) {
			out, err = h.q.Retry(h.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(h.subject)}})
			return err
		})
		// A retry runs the job again when it had finished; one that a
		// failure reply had sent back to wait for a retry (devdb's
		// --faults) is accepted too, and only moves its wait.
		if len(out) == 1 && out[0].Err == nil && h.before != nil && h.before.State.Finished() {
			h.retried = true
		}
	case worldMaintenance:
		h.maintenance(t)
	case worldCancel:
		err := testdb.Retry(t.Logf, "cancel", func() error { _, err := h.q.Cancel(h.ctx, h.subject); return err })
		if errors.Is(err, queue.ErrNotCancellable) {
			// The kind's cancel hook refused (a transfer already
			// applying): the job runs on to its end, as without a cancel.
			break
		}
		require.NoError(t, err)
		h.cancelled = true
	case worldPurge:
		for _, s := range []jobs.State{jobs.StateSucceeded, jobs.StateDead, jobs.StateCancelled} {
			h.must(t, "purge", func() error { _, err := h.q.Purge(h.ctx, s, -time.Hour); return err })
		}
	case worldDelete:
		h.must(t, "delete", func() error {
			_, err := h.q.Delete(h.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(h.subject)}}, true)
			return err
		})
		h.deleted = h.before != nil && !h.before.State.Finished() && h.subjectRaw(t) == nil
	case worldLimit:
		h.limitWorld(t)
	case worldRate:
		h.rateWorld(t)
	case worldPartition:
		h.partitionWorld(t)
	default:
		t.Fatalf("unknown world %q", w)
	}
}

// maintenance runs every maintenance pass once, to completion.
func (h *harnessEnv) maintenance(t *testing.T) {
	t.Helper()
	{
		h.reap(t)
		h.must(t, "free stranded slots", func() error { return h.q.RepairForeignWrites(h.ctx) })
		harnessRenameSweep(t, h)
		harnessTransferRecovery(t, h)
		harnessLedgerSweep(t, h)
		h.must(t, "sweep trees", func() error { _, err := handlers.SweepTrees(h.ctx, h.db, 1, h.log); return err })
		for _, s := range []jobs.State{jobs.StateSucceeded, jobs.StateDead, jobs.StateCancelled} {
			h.must(t, "retention", func() error { _, err := store.Of(h.q).Clean(h.ctx, s, -time.Hour, 1000); return err })
		}
	}
}

// unfinished counts the default queue's available and running jobs.
func (h *harnessEnv) unfinished(t *testing.T) int {
	t.Helper()
	n, err := store.Of(h.q).Collection().CountDocuments(h.ctx, bson.D{
		{Key: "queue", Value: jobs.DefaultQueue}, {Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{jobs.StateAvailable, jobs.StateRunning}}}}})
	require.NoError(t, err)
	return int(n)
}

// capacityWorld: capacity on (at what the queue holds), off, on again, and
// lowered, with enqueues between; each admission is checked against the
// capacity, and Occupied against the real count. The jobs it enqueued are
// cancelled at the end, and the capacity cleared.
func (h *harnessEnv) capacityWorld(t *testing.T) {
	t.Helper()
	var extra []string
	enqueue := func(capacity int) bool {
		t.Helper()
		r, err := h.enqueueJob(t, "noop", handlers.NoopArgs{}, queue.InsertOpts{})
		if errors.Is(err, queue.ErrQueueFull) {
			return false
		}
		require.NoError(t, err)
		extra = append(extra, r.ID)
		if capacity >= 0 {
			require.LessOrEqual(t, h.unfinished(t), capacity, "an admission took the queue past its capacity %d", capacity)
		}
		return true
	}
	occupied := func() {
		t.Helper()
		var n int
		h.must(t, "occupied", func() (err error) { n, err = h.q.Occupied(h.ctx, jobs.DefaultQueue); return err })
		require.Equal(t, h.unfinished(t), n, "Occupied is not the real count of unfinished jobs")
	}
	setCapacity := func(n int) {
		t.Helper()
		h.must(t, "set capacity", func() error { return h.q.SetCapacity(h.ctx, jobs.DefaultQueue, n, "harness") })
	}
	clearCapacity := func() {
		t.Helper()
		h.must(t, "clear capacity", func() error { _, err := h.q.ClearCapacity(h.ctx, jobs.DefaultQueue, "harness"); return err })
	}
	u := h.unfinished(t)
	setCapacity(u)
	require.False(t, enqueue(u), "capacity %d over %d unfinished jobs admitted one more", u, u)
	occupied()
	clearCapacity()
	require.True(t, enqueue(-1))
	setCapacity(u + 2)
	require.True(t, enqueue(u+2))
	require.False(t, enqueue(u+2), "capacity %d admitted past it", u+2)
	occupied()
	setCapacity(u + 1)
	require.False(t, enqueue(u+1), "a lowered capacity admitted")
	occupied()
	clearCapacity()
	for _, id := range extra {
		// Sent again after a failure reply, a cancel finds the job its
		// first send cancelled (no worker runs these).
		tries := 0
		h.must(t, "cancel", func() error {
			tries++
			_, err := h.q.Cancel(h.ctx, id)
			if tries > 1 && errors.Is(err, queue.ErrFinished) {
				return nil
			}
			return err
		})
	}
}

// harnessFriendsEither checks the friendships when the add-friend job may
// or may not have taken effect (it was cancelled while an attempt was
// stalled): symmetric, with or without u1-u2.
func harnessFriendsEither(t *testing.T, h *harnessEnv) {
	t.Helper()
	var u1 struct {
		Friends []string `bson:"friends"`
	}
	require.NoError(t, h.users.FindOne(h.ctx, bson.D{{Key: "_id", Value: "u1"}}).Decode(&u1))
	if slices.Contains(u1.Friends, "u2") {
		harnessRequireFriends(t, h, map[string][]string{"u1": {"u2", "u3"}, "u2": {"u1"}, "u3": {"u1"}})
	} else {
		harnessRequireFriends(t, h, map[string][]string{"u1": {"u3"}, "u2": {}, "u3": {"u1"}})
	}
}

// harnessNamesEither: u1 carries one of the names a rename of it set (or
// its first), everywhere; u2 is untouched.
func harnessNamesEither(t *testing.T, h *harnessEnv) {
	t.Helper()
	var u1 struct {
		Name string `bson:"name"`
	}
	require.NoError(t, h.users.FindOne(h.ctx, bson.D{{Key: "_id", Value: "u1"}}).Decode(&u1))
	require.Contains(t, []string{"name-u1", "Ann", "Bea"}, u1.Name)
	harnessRequireNames(t, h, map[string]string{"u1": u1.Name, "u2": "name-u2"})
}

// harnessMoneyEither: the transfer happened whole, or not at all.
func harnessMoneyEither(before, after map[string]int64) func(t *testing.T, h *harnessEnv) {
	return func(t *testing.T, h *harnessEnv) {
		t.Helper()
		var a struct {
			Balance int64 `bson:"balance"`
		}
		require.NoError(t, h.db.Collection(handlers.AccountsCollection).FindOne(h.ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&a))
		if a.Balance == after["a"] {
			harnessRequireMoney(t, h, after)
		} else {
			harnessRequireMoney(t, h, before)
		}
	}
}

// harnessLedgerEither: posted at most once; the balances are before or
// after the posting.
func harnessLedgerEither(before, after map[string]int64) func(t *testing.T, h *harnessEnv) {
	return func(t *testing.T, h *harnessEnv) {
		t.Helper()
		got := checkLedgerInvariants(t, h.db, before)
		require.Contains(t, []map[string]int64{before, after}, got)
		n, err := h.db.Collection(handlers.LedgerCollection).CountDocuments(h.ctx, bson.D{{Key: "state", Value: handlers.LedgerValid}})
		require.NoError(t, err)
		require.LessOrEqual(t, n, int64(1), "posted more than once")
	}
}

// harnessTreeIsLastPublished checks that the tree read is whole and is the
// tree of the last publish to complete (whose job is last in versions),
// and that no job published twice. trees maps a publishing job to its
// tree; the subject's is "subject".
func harnessTreeIsLastPublished(trees map[string][]handlers.TreeNode) func(t *testing.T, h *harnessEnv) {
	return func(t *testing.T, h *harnessEnv) {
		t.Helper()
		got, err := handlers.ReadTree(h.ctx, h.db, "t", 0)
		require.NoError(t, err)
		var st struct {
			Versions []struct {
				V   int64  `bson:"v"`
				Job string `bson:"job"`
			} `bson:"versions"`
			Jobs []string `bson:"jobs"`
		}
		require.NoError(t, h.db.Collection(handlers.TreesCollection).FindOne(h.ctx, bson.D{{Key: "_id", Value: "t"}}).Decode(&st))
		require.NotEmpty(t, st.Versions)
		last := st.Versions[len(st.Versions)-1]
		require.Equal(t, last.V, got.Version, "the latest version read")
		job := last.Job
		if job == h.subject {
			job = "subject"
		}
		want, ok := trees[job]
		require.True(t, ok, "version %d published by an unknown job %s", last.V, last.Job)
		requireSameTree(t, want, got.Nodes)
		seen := map[string]bool{}
		for _, j := range st.Jobs {
			require.False(t, seen[j], "job %s published twice", j)
			seen[j] = true
		}
	}
}

// limitBeforeClaim sets a limit of 1 on the kind of the job under test,
// before A claims it, with the run slot's unique index.
func (h *harnessEnv) limitBeforeClaim(t *testing.T) {
	t.Helper()
	j := h.get(t, h.subject)
	_, err := store.Of(h.q).Collection().Indexes().CreateOne(h.ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "kindRunSlot", Value: 1}},
		Options: options.Index().SetName(store.KindRunSlotIndex).SetUnique(true).SetSparse(true),
	})
	require.NoError(t, err)
	h.limitKind = j.Kind
	h.must(t, "set the limit", func() error { return h.q.SetLimit(h.ctx, queue.KindLimit(h.limitKind), 1, "harness") })
}

// checkLimit checks the limit of worldLimit (nothing in other worlds): at
// most bound running jobs of the kind, and no job that is not running
// holding a run slot; and the partition limit of worldPartition, per
// partition (checkPartition).
func (h *harnessEnv) checkLimit(t *testing.T, bound int) {
	t.Helper()
	h.checkPartition(t, bound) // per partition, in worldPartition
	if h.limitKind == "" {
		return
	}
	cur, err := store.Of(h.q).Collection().Find(h.ctx, bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "kindRunSlot", Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: "kind", Value: h.limitKind}, {Key: "state", Value: jobs.StateRunning}},
	}}})
	require.NoError(t, err)
	var docs []struct {
		ID    string     `bson:"_id"`
		Kind  string     `bson:"kind"`
		State jobs.State `bson:"state"`
		Slot  *string    `bson:"kindRunSlot"`
	}
	require.NoError(t, cur.All(h.ctx, &docs))
	running := 0
	for _, d := range docs {
		if d.Slot != nil {
			require.Equal(t, jobs.StateRunning, d.State, "job %s holds run slot %s", d.ID, *d.Slot)
		}
		if d.Kind == h.limitKind && d.State == jobs.StateRunning {
			running++
		}
	}
	require.LessOrEqual(t, running, bound, "running jobs of the limited kind %s: %+v", h.limitKind, docs)
}

// limitWorld runs while A holds the job and its slot under a limit of 1:
// the limit lowered, raised, lowered, cleared and set again, with claims
// of a copy of the job (same kind and args) between, each checked. The
// copy is claimed, released and completed here without running its
// handler; the limit is 1 when it returns.
func (h *harnessEnv) limitWorld(t *testing.T) {
	t.Helper()
	s := store.Of(h.q)
	name := queue.KindLimit(h.limitKind)
	claim := func() *jobs.Job {
		t.Helper()
		return h.claim(t, store.ClaimParams{
			Owner: "limit-world", Queues: []string{jobs.DefaultQueue}, Kinds: []string{h.limitKind}, Lease: time.Minute,
		})
	}
	setLimit := func(n int) {
		t.Helper()
		h.must(t, "set the limit", func() error { return h.q.SetLimit(h.ctx, name, n, "harness") })
	}
	h.checkLimit(t, 1)
	subject := h.get(t, h.subject)
	res, err := h.enqueueJob(t, subject.Kind, subject.Args, queue.InsertOpts{})
	require.NoError(t, err)
	require.Nil(t, claim(), "a claim under a full limit of 1")
	setLimit(0)
	require.Nil(t, claim(), "a claim under a limit of 0")
	h.checkLimit(t, 1) // lowering stops none
	setLimit(2)
	x := claim()
	require.NotNil(t, x, "a claim under a limit raised to 2")
	require.Equal(t, res.ID, x.ID)
	h.checkLimit(t, 2)
	setLimit(1)
	h.checkLimit(t, 2) // lowering stops none
	h.must(t, "release", func() error { return s.Release(h.ctx, store.LeaseOf(x)) })
	h.checkLimit(t, 1)
	require.Nil(t, claim(), "a claim under a limit of 1 held by the stalled attempt")
	h.must(t, "clear the limit", func() error { _, err := h.q.ClearLimit(h.ctx, name); return err })
	x = claim()
	require.NotNil(t, x, "a claim with the limit cleared")
	h.checkLimit(t, 2)
	setLimit(1)
	h.must(t, "complete", func() error { return s.Complete(h.ctx, store.LeaseOf(x)) })
	h.checkLimit(t, 1)
}
