package queue

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
