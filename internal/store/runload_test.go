package store_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// setLimitLongAgo sets limit name to n as if set an hour ago: past the
// seconds after a set when claims read the run slots every time.
func setLimitLongAgo(t *testing.T, b bundle, name string, n int) {
	t.Helper()
	require.NoError(t, b.q.SetLimit(b.ctx, name, n, "test"))
	backdateLimit(t, b, name)
}

// monitoredStore is a client of b's database whose commands are counted.
func monitoredStore(t *testing.T, b bundle) (*queue.Client, *store.Store, func() []string) {
	t.Helper()
	mc, cmds := testdb.Monitored(t)
	q, err := queue.New(mc.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	return q, store.Of(q), cmds
}

// jobsCommands counts the commands sent to the jobs collection.
func jobsCommands(cmds []string) int {
	n := 0
	for _, c := range cmds {
		if strings.HasSuffix(c, " jobs") {
			n++
		}
	}
	return n
}

// TestLimitFarFromFullIsReadOnce: under a limit far from full, batch
// claims read the limit's running jobs once, not once each: 200 jobs in
// batches of 50 cost at most one command more than without the limit.
func TestLimitFarFromFullIsReadOnce(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, limit int) int {
		b := setup(t)
		if limit > 0 {
			setLimitLongAgo(t, b, queue.KindLimit("k"), limit)
		}
		enqueueN(t, b, 200)
		_, s, cmds := monitoredStore(t, b)
		claimAndComplete(t, b, s, 200, 50)
		return jobsCommands(cmds())
	}
	var free, limited int
	t.Run("both", func(t *testing.T) {
		t.Run("no limit", func(t *testing.T) { free = run(t, 0) })
		t.Run("limit 1000", func(t *testing.T) { limited = run(t, 1000) })
	})
	t.Logf("200 jobs in batches of 50: %d commands on the jobs without a limit, %d under a limit of 1000", free, limited)
	require.LessOrEqual(t, limited, free+1)
}

// TestLimitSlotHandedOnWithoutARead: a worker's client told that a job's
// finishing write freed its run slot (RunEnded) claims the next job of the
// full limit into that slot without reading the limit's running jobs: a
// candidate read and a stamp. Told of nothing, a client reads them.
func TestLimitSlotHandedOnWithoutARead(t *testing.T) {
	b := setup(t)
	setLimitLongAgo(t, b, queue.KindLimit("k"), 1)
	enqueueN(t, b, 3)
	q, s, cmds := monitoredStore(t, b)

	first, err := s.ClaimBatch(b.ctx, claimAll, 5)
	require.NoError(t, err)
	require.Len(t, first, 1, "a limit of 1")
	require.True(t, store.Of(q).HoldsRunSlot(first[0].ID))
	require.True(t, store.Of(q).LimitFull())
	require.NoError(t, s.Complete(b.ctx, store.LeaseOf(first[0])))
	store.Of(q).RunEnded(first[0].ID)
	require.False(t, store.Of(q).HoldsRunSlot(first[0].ID))

	before := jobsCommands(cmds())
	second, err := s.ClaimBatch(b.ctx, claimAll, 5)
	require.NoError(t, err)
	require.Len(t, second, 1)
	require.Equal(t, 1, jobsCommands(cmds())-before, "the stamp of a candidate the first claim read and kept (candidates.go): no read of the candidates, none of the running jobs")
	require.Equal(t, map[string]int{"running": 1}, slotsHeld(t, b))
	ks, _ := runSlots(t, b, second[0].ID)
	require.Equal(t, "k/0", ks)

	// Full, as this client's view says: no read of the candidates (and
	// none of the running jobs while the view is younger than
	// LimitRefresh, one after).
	before = jobsCommands(cmds())
	none, err := s.ClaimBatch(b.ctx, claimAll, 5)
	require.NoError(t, err)
	require.Empty(t, none)
	require.LessOrEqual(t, jobsCommands(cmds())-before, 1)

	// A client whose user completes jobs without telling it reads.
	_, other, otherCmds := monitoredStore(t, b)
	require.NoError(t, s.Complete(b.ctx, store.LeaseOf(second[0])))
	third, err := other.ClaimBatch(b.ctx, claimAll, 5)
	require.NoError(t, err)
	require.Len(t, third, 1)
	require.NoError(t, other.Complete(b.ctx, store.LeaseOf(third[0])))
	before = jobsCommands(otherCmds())
	last, err := other.ClaimBatch(b.ctx, claimAll, 5)
	require.NoError(t, err)
	require.Empty(t, last, "every job ran")
	require.Equal(t, 2, jobsCommands(otherCmds())-before, "the running jobs' read and the candidates'")
}

// TestLimitViewsNeverExceedTheLimit: processes claiming from views of the
// run slots that others' claims make wrong never run more jobs of the
// limit than it allows: a slot another took is refused by the unique
// index, and the refused claim's client reads again.
func TestLimitViewsNeverExceedTheLimit(t *testing.T) {
	b := setup(t)
	const limit, n = 3, 60
	setLimitLongAgo(t, b, queue.KindLimit("k"), limit)
	enqueueN(t, b, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done, most := 0, 0
	for w := range 4 {
		mc, _ := testdb.Monitored(t)
		q, err := queue.New(mc.Database(b.db.Name()), queue.Config{})
		require.NoError(t, err)
		s := store.Of(q)
		p := claimAll
		p.Owner = "w" + string(rune('a'+w))
		wg.Go(func() {
			for {
				mu.Lock()
				finished := done == n
				mu.Unlock()
				if finished {
					return
				}
				got, err := s.ClaimBatch(b.ctx, p, 2)
				require.NoError(t, err)
				if len(got) > 0 {
					held := slotsHeld(t, b)["running"]
					running, err := b.db.Collection("jobs").CountDocuments(b.ctx, bson.D{{Key: "state", Value: jobs.StateRunning}})
					require.NoError(t, err)
					mu.Lock()
					most = max(most, held, int(running))
					mu.Unlock()
				}
				for _, j := range got {
					require.NoError(t, s.Complete(b.ctx, store.LeaseOf(j)))
					store.Of(q).RunEnded(j.ID)
				}
				mu.Lock()
				done += len(got)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, n, done)
	require.LessOrEqual(t, most, limit)
	require.Empty(t, slotsHeld(t, b))
}

// backdateLimit makes limit name look set an hour ago.
func backdateLimit(t *testing.T, b bundle, name string) {
	t.Helper()
	_, err := b.db.Collection(store.DefaultLimitsCollection).UpdateOne(b.ctx, bson.D{{Key: "_id", Value: name}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "limitSetAt", Value: time.Now().Add(-time.Hour)}}}})
	require.NoError(t, err)
}

// TestLimitLoweredViewsCountSlotsAboveIt: a limit lowered while jobs run
// in slots at or above it counts them: a client whose own runs free the
// slots below the new limit claims nothing until fewer than the limit run
// (as a read of the running jobs would say), not into the freed slots.
func TestLimitLoweredViewsCountSlotsAboveIt(t *testing.T) {
	b := setup(t)
	name := queue.KindLimit("k")
	setLimitLongAgo(t, b, name, 4)
	enqueueN(t, b, 8)
	q, s, _ := monitoredStore(t, b)
	running, err := s.ClaimBatch(b.ctx, claimAll, 4)
	require.NoError(t, err)
	require.Len(t, running, 4)
	require.NoError(t, q.SetLimit(b.ctx, name, 2, "test")) // q's next claim reads it
	backdateLimit(t, b, name)
	none, err := s.ClaimBatch(b.ctx, claimAll, 4)
	require.NoError(t, err)
	require.Empty(t, none, "4 run, the limit is 2")

	// The runs holding slots 0 and 1 end: 2 still run, in slots 2 and 3.
	for _, j := range running {
		if ks, _ := runSlots(t, b, j.ID); ks == "k/0" || ks == "k/1" {
			require.NoError(t, s.Complete(b.ctx, store.LeaseOf(j)))
			store.Of(q).RunEnded(j.ID)
		}
	}
	require.Equal(t, map[string]int{"running": 2}, slotsHeld(t, b))
	more, err := s.ClaimBatch(b.ctx, claimAll, 4)
	require.NoError(t, err)
	require.Empty(t, more, "2 run, the limit is 2: the freed slots below it are not free")
	require.Equal(t, map[string]int{"running": 2}, slotsHeld(t, b))
}
