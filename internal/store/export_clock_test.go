package store

import (
	"sync/atomic"
	"time"
)

// ShiftedClock is a clock for tests: the wall clock plus an offset that
// Advance moves forward. Time keeps passing, so deadlines and timers still
// work; a test advances it past a lease or a backoff instead of sleeping.
type ShiftedClock struct{ offset atomic.Int64 }

// Now is the wall clock plus the offset.
func (s *ShiftedClock) Now() time.Time {
	return time.Now().Add(time.Duration(s.offset.Load()))
}

// Advance moves the clock d forward.
func (s *ShiftedClock) Advance(d time.Duration) { s.offset.Add(int64(d)) }
