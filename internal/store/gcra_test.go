package store

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// modelRate is the reference model of a rate: GCRA by virtual scheduling,
// one start at a time, as ITU-T I.371 states it (a start at t conforms
// when tat - t ≤ (burst-1)·T; it moves tat to max(tat, t) + T), with tat
// rounded up to the millisecond after each reservation as BSON stores it.
type modelRate struct {
	t     time.Duration
	burst int
	tat   time.Time
}

// reserve takes up to k starts at t, one by one, and returns how many.
func (m *modelRate) reserve(t time.Time, k int) int {
	n := 0
	tat := m.tat
	for n < k && tat.Sub(t) <= time.Duration(m.burst-1)*m.t {
		if tat.Before(t) {
			tat = t
		}
		tat = tat.Add(m.t)
		n++
	}
	if n > 0 {
		m.tat = ceilMs(tat)
	}
	return n
}

// randomRate is a valid rate, from the smallest to the bounds.
func randomRate(rng *rand.Rand) Rate {
	pers := []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second, time.Minute, time.Hour, 720 * time.Hour, MaxRatePeriod}
	for {
		r := Rate{N: 1 + rng.IntN(20), Per: pers[rng.IntN(len(pers))], Burst: rng.IntN(6)}
		switch rng.IntN(4) {
		case 0:
			r.N = 1 + rng.IntN(MaxRate)
		case 1:
			r.Burst = rng.IntN(MaxBurst + 1)
		}
		if r.Validate() == nil {
			return r
		}
	}
}

// TestGCRAMatchesTheModel runs random schedules of reservations, give-backs
// and rate changes against gcra and checks, for every one:
//   - each reservation takes what the reference model takes;
//   - starts in any window of length w are at most burst + ⌊w/T⌋ (so at
//     most N + burst in any window of one period), counted from the last
//     change of the rate;
//   - a quiet spell of burst·T allows the whole burst at once;
//   - a change applies at once: converted, the state has the same part of
//     the burst used, so raising a rate allows its next start within the
//     new interval of when the old rate's state said it was used.
func TestGCRAMatchesTheModel(t *testing.T) {
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 33))
		r := randomRate(rng)
		g := r.gcra()
		now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(time.Hour))))
		var tat time.Time
		model := &modelRate{t: g.t, burst: g.burst}
		var starts []time.Time // since the last change
		for step := range 300 {
			// Time moves by a part of an interval, several, or a whole
			// quiet spell.
			switch rng.IntN(10) {
			case 0:
				// (After a change that lowered the burst, more than
				// the new burst may be used: that debt drains first.)
				now = now.Add(max(g.window(), ahead(tat, now)) + time.Millisecond)
				require.Equal(t, g.burst, g.avail(tat, now), "seed %d step %d: a quiet spell of burst·T allows the burst", seed, step)
			case 1, 2:
				now = now.Add(time.Duration(rng.Int64N(int64(min(4*g.t, MaxRateWindow/4)) + 1)))
			default:
				now = now.Add(time.Duration(rng.Int64N(int64(g.t)/2 + 1)))
			}
			if rng.IntN(40) == 0 { // the rate is changed
				nr := randomRate(rng)
				ng := nr.gcra()
				usedBefore := g.burst - g.avail(tat, now)
				tat = ng.convert(tat, now, g.t)
				require.False(t, tat.Before(now) && !tat.IsZero() && usedBefore > 0, "seed %d: a used rate stays used", seed)
				r, g = nr, ng
				model = &modelRate{t: g.t, burst: g.burst, tat: tat}
				starts = nil
				continue
			}
			k := 1 + rng.IntN(g.burst+2)
			n := min(k, g.avail(tat, now))
			require.Equal(t, model.reserve(now, k), n, "seed %d step %d: %s, tat %s, at %s, %d asked", seed, step, r, tat, now, k)
			if n == 0 {
				next := g.nextStart(tat, now)
				require.True(t, next.After(now), "seed %d: no start now, so the next is later", seed)
				require.GreaterOrEqual(t, g.avail(tat, next.Add(time.Millisecond)), 1, "seed %d: a start is allowed at nextStart", seed)
				continue
			}
			tat = g.take(tat, now, n)
			require.Equal(t, model.tat, tat, "seed %d step %d", seed, step)
			if back := rng.IntN(n + 1); back > 0 && rng.IntN(3) == 0 {
				// Given back at once, before anyone else reserved.
				tat = g.giveBack(tat, back)
				n -= back
				model.tat = tat
			}
			for range n {
				starts = append(starts, now)
			}
			checkWindows(t, seed, g, r, starts)
		}
	}
}

// checkWindows checks that in every window of starts, those from starts[i]
// to starts[j], there are at most burst + ⌊(starts[j]-starts[i])/T⌋, and in
// any one period at most N + burst.
func checkWindows(t *testing.T, seed uint64, g gcra, r Rate, starts []time.Time) {
	t.Helper()
	j := len(starts) - 1
	for i := j; i >= 0 && j-i+1 > g.burst; i-- {
		w := starts[j].Sub(starts[i])
		require.LessOrEqual(t, j-i+1, g.burst+int(w/g.t), "seed %d: %s: %d starts within %s", seed, r, j-i+1, w)
		if w < r.Per {
			require.LessOrEqual(t, j-i+1, r.N+g.burst, "seed %d: %s: %d starts within one period", seed, r, j-i+1)
		}
	}
}

// TestGCRAChangesApplyAtOnce: the cases of the review. 1/h → 100/s: the
// next start comes within the new interval, not an hour later; 100/s →
// 1/h: the burst used stays used.
func TestGCRAChangesApplyAtOnce(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	slow := Rate{N: 1, Per: time.Hour}.gcra()
	tat := slow.take(time.Time{}, now, 1)
	require.Equal(t, 0, slow.avail(tat, now.Add(time.Minute)))

	fast := Rate{N: 100, Per: time.Second}.gcra()
	conv := fast.convert(tat, now, slow.t)
	require.Equal(t, 1, fast.avail(conv, now.Add(10*time.Millisecond)), "raised: the next start within 10ms")
	require.Equal(t, 0, fast.avail(conv, now), "the start taken still counts")

	tat = fast.take(time.Time{}, now, 1)
	conv = slow.convert(tat, now, fast.t)
	require.Equal(t, 0, slow.avail(conv, now.Add(59*time.Minute)), "lowered: the start taken counts in the new units")
	require.Equal(t, 1, slow.avail(conv, now.Add(time.Hour+time.Millisecond)))

	// Not stored (an older document): taken as the current interval.
	require.Equal(t, tat, slow.convert(tat, now, 0))
}

// TestGCRABounds: periods past the 24.8 days of an int32 of milliseconds
// limit (the review's 1/720h let 6 of 6 jobs start), and a long period with
// a big burst is refused where it would overflow, not accepted to start
// nothing.
func TestGCRABounds(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	month, err := ParseRate("2/720h")
	require.NoError(t, err)
	g := month.gcra()
	var tat time.Time
	started := 0
	for i := range 6 {
		at := now.Add(time.Duration(i) * time.Hour)
		if n := min(1, g.avail(tat, at)); n > 0 {
			tat = g.take(tat, at, n)
			started += n
		}
	}
	require.Equal(t, 1, started, "2/720h, burst 1: one start in 6 hours")

	_, err = ParseRate("1/500h burst 10000")
	require.ErrorContains(t, err, "takes 5000000h to refill")
	r, err := ParseRate("1/500h burst 1000")
	require.NoError(t, err)
	g = r.gcra()
	require.Equal(t, 1000, g.avail(time.Time{}, now), "the whole burst is allowed")
	tat = g.take(time.Time{}, now, 1000)
	require.Equal(t, 0, g.avail(tat, now))
	require.Equal(t, 1, g.avail(tat, now.Add(500*time.Hour)))

	// A tat another application wrote, however far ahead, clamps.
	far := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	require.Equal(t, 0, g.avail(far, now))
	require.Equal(t, now.Add(MaxRateWindow), Rate{N: 1, Per: time.Second}.gcra().convert(far, now, time.Nanosecond))
	_, err = ParseRate("1/8785h")
	require.ErrorContains(t, err, "longer than")
}

// TestGCRAStartsAt: over random rates and states, startsAt(k) is the
// first millisecond at which k starts are allowed: avail is k or more
// then, and less just before (unless it is t itself).
func TestGCRAStartsAt(t *testing.T) {
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 36))
		g := randomRate(rng).gcra()
		now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
		tat := ceilMs(now.Add(time.Duration(rng.Int64N(int64(g.window())) + 1)))
		k := 1 + rng.IntN(g.burst)
		at := g.startsAt(tat, now, k)
		require.GreaterOrEqual(t, g.avail(tat, at), k, "seed %d: %d allowed at startsAt", seed, k)
		if at.After(now) {
			require.Less(t, g.avail(tat, at.Add(-time.Nanosecond)), k, "seed %d: not before", seed)
		}
		require.Equal(t, g.nextStart(tat, now), g.startsAt(tat, now, 1), "seed %d", seed)
	}
}
