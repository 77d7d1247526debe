package store

import "time"

// The store's clock is the time it stamps on what it writes and compares
// with what it reads: a claim's lease expiry and the reaper's "expired", a
// failure's backoff and the claim's "runnable", a rate's reservations. One
// clock serves both sides of each comparison, so a test that moves it
// forward moves time for the jobs of its client, as River's time
// generator does, rather than sleeping. The deadlines of calls to the
// server, caches' refreshes and the worker's own timers keep the wall
// clock.

// SetClock makes c (and the queue.Client holding it) read the time from
// now instead of the wall clock. Call it before s is used; tests only.
func (s *Store) SetClock(now func() time.Time) { s.clock = now }

// Now is the time s stamps on what it writes: UTC, to the millisecond a
// BSON date keeps. A nil Store reads the wall clock.
func (s *Store) Now() time.Time {
	if s == nil || s.clock == nil {
		return now()
	}
	return s.clock().UTC().Truncate(time.Millisecond)
}

// instant is s's clock to the nanosecond, for computations that are not
// stored.
func (s *Store) instant() time.Time {
	if s == nil || s.clock == nil {
		return time.Now()
	}
	return s.clock()
}
