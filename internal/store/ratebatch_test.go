package store_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

// fixedClock is a clock that moves only when the test moves it.
type fixedClock struct {
	mu sync.Mutex
	at time.Time
}

func (f *fixedClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at
}

func (f *fixedClock) set(at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = at
}

// limitsWrites counts the updates of the limits collection among cmds
// (a rate's reservations and give-backs).
func limitsWrites(cmds []string) int {
	n := 0
	for _, c := range cmds {
		if c == "update "+store.DefaultLimitsCollection {
			n++
		}
	}
	return n
}

// limitsCommands counts the commands of cmds sent to the limits
// collection, reads and writes.
func limitsCommands(cmds []string) int {
	n := 0
	for _, c := range cmds {
		if strings.HasSuffix(c, " "+store.DefaultLimitsCollection) {
			n++
		}
	}
	return n
}

// TestRateBatchesStartsUnderABacklog: under a rate of 10/s with a burst of
// 5, a claim that used every start it reserved makes the next wait until 3
// starts are allowed (1 + maxRateBatchWait/T, below the burst), sending
// nothing while fewer are, and then reserves the 3 with one write; a
// claim that found fewer jobs than it reserved turns that off, so a lone
// job starts with the next start allowed. The bound is GCRA's throughout.
func TestRateBatchesStartsUnderABacklog(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 10, Per: time.Second, Burst: 5}, ""))
	enqueueN(t, b, 10)
	mc, cmds := testdb.Monitored(t)
	q, err := queue.New(mc.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	s := store.Of(q)
	t0 := time.Now().UTC().Truncate(time.Second).Add(2 * time.Second) // past the jobs' runAt
	clock := &fixedClock{at: t0}
	s.SetClock(clock.Now)
	claim := func(at time.Duration) (got, writes int) {
		t.Helper()
		clock.set(t0.Add(at))
		before := len(cmds())
		js, err := s.ClaimBatch(b.ctx, claimAll, 10)
		require.NoError(t, err)
		return len(js), limitsWrites(cmds()[before:])
	}

	got, _ := claim(0)
	require.Equal(t, 5, got, "the whole burst after a quiet spell")
	require.True(t, s.UnderRates())
	got, writes := claim(100 * time.Millisecond)
	require.Zero(t, got, "one start allowed: the claim waits for 3")
	require.Zero(t, writes, "and sends no reservation")
	require.Equal(t, t0.Add(300*time.Millisecond), s.NextRateStart(), "when 3 starts are allowed")
	got, writes = claim(300 * time.Millisecond)
	require.Equal(t, 3, got)
	require.Equal(t, 1, writes, "3 starts in one reservation")

	// 2 jobs left: 3 reserved, 2 claimed, 1 given back; no more batching.
	got, _ = claim(600 * time.Millisecond)
	require.Equal(t, 2, got)
	enqueueN(t, b, 1)
	got, _ = claim(600 * time.Millisecond)
	require.Equal(t, 1, got, "a lone job starts with the start allowed")

	// A claim under no rate says so.
	p := claimAll
	p.Kinds = []string{"other"}
	_, err = s.ClaimBatch(b.ctx, p, 10)
	require.NoError(t, err)
	require.False(t, s.UnderRates())
}

// TestRateLoserReadsBeforeWriting: a client whose last reservation lost
// to another process reads the rate before it tries again, so that when
// the other has taken the next start too, finding it costs one read, not
// a refused write and a read.
func TestRateLoserReadsBeforeWriting(t *testing.T) {
	b := setup(t)
	name := queue.KindLimit("k")
	require.NoError(t, b.q.SetRate(b.ctx, name, queue.Rate{N: 1, Per: time.Minute, Burst: 2}, ""))
	enqueueN(t, b, 10)
	q1, err := queue.New(b.db, queue.Config{})
	require.NoError(t, err)
	s1 := store.Of(q1)
	s1.SetClock(b.clock.Now)
	mc, cmds := testdb.Monitored(t)
	q2, err := queue.New(mc.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	s2 := store.Of(q2)
	s2.SetClock(b.clock.Now)
	claim := func(s *store.Store, owner string) int {
		t.Helper()
		p := claimAll
		p.Owner = owner
		got, err := s.ClaimBatch(b.ctx, p, 1)
		require.NoError(t, err)
		return len(got)
	}
	require.Equal(t, 1, claim(s2, "w2"), "w2 reads the rate and takes a start")
	require.Equal(t, 1, claim(s1, "w1"), "w1 takes the rest of the burst")
	require.Zero(t, claim(s2, "w2"), "w2's view was stale: it lost")
	require.Equal(t, 1, store.RateLosses(s2, name))

	before := len(cmds())
	require.Zero(t, claim(s2, "w2"))
	require.Zero(t, limitsCommands(cmds()[before:]), "a loser whose view allows no start sends nothing for it, not even a read")

	b.clock.Advance(time.Minute + time.Second)
	require.Equal(t, 1, claim(s1, "w1"), "w1 takes the next start")
	before = len(cmds())
	require.Zero(t, claim(s2, "w2"))
	require.Zero(t, limitsWrites(cmds()[before:]), "w2 read the rate spent and sent no write to lose")
}
