package store

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		attempt int
		base    time.Duration
		max     time.Duration
		want    time.Duration // before jitter
	}{
		{1, time.Second, time.Hour, time.Second},
		{2, time.Second, time.Hour, 2 * time.Second},
		{5, time.Second, time.Hour, 16 * time.Second},
		{13, time.Second, time.Hour, time.Hour},
		{100, time.Second, time.Hour, time.Hour},
	} {
		for range 50 {
			got := Backoff(tc.attempt, tc.base, tc.max)
			lo, hi := tc.want*3/4, min(tc.want*5/4, tc.max)
			if got < lo || got > hi {
				t.Fatalf("Backoff(%d, %s, %s) = %s, want within [%s, %s]", tc.attempt, tc.base, tc.max, got, lo, hi)
			}
		}
	}
}

// Backoff(34, 1s, 250 years) was negative: the jittered wait, 125% of a
// value near the int64 limit, overflowed when it became a Duration again.
func TestBackoffHugeMaxStaysPositive(t *testing.T) {
	const year = 365 * 24 * time.Hour
	for n := 1; n <= 200; n++ {
		for range 20 {
			if got := Backoff(n, time.Second, 250*year); got < 0 || got > 250*year {
				t.Fatalf("Backoff(%d, 1s, 250y) = %d, want within [0, 250y]", n, got)
			}
		}
	}
}

// FuzzBackoff checks Backoff over its whole input range: the wait is never
// negative and never above max, and never below 75% of the first wait
// (min(base, max)) less a rounding nanosecond.
func FuzzBackoff(f *testing.F) {
	const year = int64(365 * 24 * time.Hour)
	f.Add(34, int64(time.Second), 250*year)
	f.Add(1, int64(time.Second), int64(time.Hour))
	f.Add(64, int64(1), int64(1<<63-1))
	f.Add(-5, int64(-1), int64(0))
	f.Add(3, int64(1<<62), int64(1<<63-1))
	f.Fuzz(func(t *testing.T, n int, base, max int64) {
		got := Backoff(n, time.Duration(base), time.Duration(max))
		if base <= 0 || max <= 0 {
			if got != 0 {
				t.Fatalf("Backoff(%d, %d, %d) = %d, want 0", n, base, max, got)
			}
			return
		}
		if got < 0 || int64(got) > max {
			t.Fatalf("Backoff(%d, %d, %d) = %d, outside [0, max]", n, base, max, got)
		}
		if floor := min(base, max) / 4 * 3; int64(got) < floor-1 {
			t.Fatalf("Backoff(%d, %d, %d) = %d, below 75%% of the first wait (%d)", n, base, max, got, floor)
		}
	})
}
