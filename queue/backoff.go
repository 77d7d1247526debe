package queue

import (
	"math/rand/v2"
	"time"
)

// Backoff is the wait before the retry that follows failed attempt n (1 for
// the first): base doubled n-1 times, capped at max, then jittered to
// between 75% and 125% of that, and never above max.
func Backoff(n int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	d = time.Duration(float64(d) * (0.75 + rand.Float64()/2))
	return min(d, max)
}
