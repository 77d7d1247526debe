package recovery

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"
)

// walkLatestTick is the definition latestTick computes: walk the ticks
// after last and keep the last one at or before now.
func walkLatestTick(sched cron.Schedule, last, now time.Time) (time.Time, bool) {
	var tick time.Time
	found := false
	for t := sched.Next(last); !t.IsZero() && !t.After(now); t = sched.Next(t) {
		tick, found = t, true
	}
	return tick.UTC().Truncate(time.Millisecond), found
}

// TestLatestTickIsTheLastOfTheWalk compares latestTick with the walk it
// replaces, on schedules of both kinds and gaps short enough to walk.
func TestLatestTickIsTheLastOfTheWalk(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(20, 2))
	base := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		spec string
		max  time.Duration // how far now may be after last
	}{
		{"@every 1s", time.Hour},
		{"@every 7s", time.Hour},
		{"@every 1h30m", 30 * 24 * time.Hour},
		{"* * * * * *", time.Hour},
		{"*/10 * * * * *", 2 * time.Hour},
		{"0 * * * *", 10 * 24 * time.Hour},
		{"0 0 * * *", 400 * 24 * time.Hour},
		{"30 9 * * 1-5", 60 * 24 * time.Hour},
		{"* 0 * * * *", 3 * 24 * time.Hour},
		{"0 0 29 2 *", 9 * 365 * 24 * time.Hour},
		{"@monthly", 3 * 365 * 24 * time.Hour},
	} {
		sched, err := periodicParser.Parse(tc.spec)
		require.NoError(t, err)
		for range 300 {
			last := base.Add(time.Duration(rng.Int64N(int64(400 * 24 * time.Hour)))).Truncate(time.Millisecond)
			now := last.Add(time.Duration(rng.Int64N(int64(tc.max)))).Truncate(time.Millisecond)
			wantTick, wantOK := walkLatestTick(sched, last, now)
			gotTick, gotOK := latestTick(sched, last, now)
			require.Equal(t, wantOK, gotOK, "%s from %s to %s", tc.spec, last, now)
			require.True(t, wantTick.Equal(gotTick), "%s from %s to %s: want %s, got %s", tc.spec, last, now, wantTick, gotTick)
		}
	}
}

// TestLatestTickAfterLongOutages: the latest tick after years away, in a
// bounded number of calls of Next.
func TestLatestTickAfterLongOutages(t *testing.T) {
	t.Parallel()
	last := time.Date(2026, 11, 23, 10, 0, 0, 123e6, time.UTC)
	for _, tc := range []struct {
		spec string
		now  time.Time
		want time.Time
	}{
		{"@every 1s", last.Add(30 * 24 * time.Hour), time.Date(2026, 12, 23, 10, 0, 0, 0, time.UTC)},
		{"@every 1s", last.Add(100 * 365 * 24 * time.Hour), last.Add(100 * 365 * 24 * time.Hour).Truncate(time.Second)},
		{"@every 1m", time.Date(2027, 1, 1, 0, 0, 30, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"* * * * * *", last.Add(30 * 24 * time.Hour), time.Date(2026, 12, 23, 10, 0, 0, 0, time.UTC)},
		{"0 0 * * *", time.Date(2027, 11, 23, 9, 0, 0, 0, time.UTC), time.Date(2027, 11, 23, 0, 0, 0, 0, time.UTC)},
		{"0 0 29 2 *", time.Date(2031, 6, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC)},
		{"0 0 29 2 *", time.Date(2032, 2, 29, 0, 0, 0, 0, time.UTC), time.Date(2032, 2, 29, 0, 0, 0, 0, time.UTC)},
	} {
		sched, err := periodicParser.Parse(tc.spec)
		require.NoError(t, err)
		calls := &countingSchedule{Schedule: sched}
		if _, spec := sched.(*cron.SpecSchedule); spec {
			sched = calls // "@every" is arithmetic: it calls no Next
		}
		got, ok := latestTick(sched, last, tc.now)
		require.True(t, ok, tc.spec)
		require.True(t, tc.want.Equal(got), "%s at %s: want %s, got %s", tc.spec, tc.now, tc.want, got)
		require.LessOrEqual(t, calls.n, 100, "%s: calls of Next", tc.spec)
		t.Logf("%s at %s: %d calls of Next", tc.spec, tc.now.Format(time.DateOnly), calls.n)
	}
	sched, err := periodicParser.Parse("0 0 29 2 *")
	require.NoError(t, err)
	_, ok := latestTick(sched, time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC), time.Date(2031, 12, 31, 0, 0, 0, 0, time.UTC))
	require.False(t, ok, "no February 29 from 2029 to 2031")
}

// countingSchedule counts the calls of Next of a cron spec.
type countingSchedule struct {
	cron.Schedule
	n int
}

func (c *countingSchedule) Next(t time.Time) time.Time { c.n++; return c.Schedule.Next(t) }

// BenchmarkLatestTick: the latest tick after thirty days away, and, for
// comparison, the walk that latestTick replaced.
func BenchmarkLatestTick(b *testing.B) {
	last := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		spec string
		walk bool
	}{{"@every 1s", false}, {"* * * * * *", false}, {"0 0 * * *", false}, {"0 0 29 2 *", false}, {"* * * * * *", true}} {
		name := tc.spec
		if tc.walk {
			name += "/walk"
		}
		sched, err := periodicParser.Parse(tc.spec)
		require.NoError(b, err)
		now := last.Add(30 * 24 * time.Hour)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if tc.walk {
					walkLatestTick(sched, last, now)
				} else {
					latestTick(sched, last, now)
				}
			}
		})
	}
}
