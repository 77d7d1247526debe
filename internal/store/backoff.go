package store

import (
	"math/rand/v2"
	"time"
)

// Backoff is the wait before the retry that follows failed attempt n (1 for
// the first): base doubled n-1 times, capped at max, then jittered to
// between 75% and 125% of that, and never above max. It is defined over
// every input: the doubling stops before it could overflow, the jitter is
// clamped to max before it becomes a Duration again, and a non-positive
// base or max waits 0.
func Backoff(n int, base, max time.Duration) time.Duration {
	if base <= 0 || max <= 0 {
		return 0
	}
	d := min(base, max)
	for i := 1; i < n && d < max; i++ {
		if d > max/2 {
			d = max
			break
		}
		d *= 2
	}
	// A float64 cannot hold every Duration: compare as floats and return
	// max itself when the jitter reaches it, so a large max cannot round
	// past the int64 range into a negative wait.
	j := float64(d) * (0.75 + rand.Float64()/2)
	if j >= float64(max) {
		return max
	}
	return time.Duration(j)
}
