package store

import "time"

// SetRateHooks makes c's claims (and its copies') under a rate run
// afterReserve after a reservation the server applied (its error taken as
// the write's: a lost reply) and beforeClaim between a reservation and the
// claim of its jobs (a stall). nil leaves a hook unset.
func SetRateHooks(c *Store, afterReserve func() error, beforeClaim func()) {
	c.rates.mu.Lock()
	defer c.rates.mu.Unlock()
	c.rates.afterReserve, c.rates.beforeRateClaim = afterReserve, beforeClaim
}

// SetRatePartCleanHook makes c's CleanRatePartitions run f when it has
// read what to delete, before it deletes (a claim that writes meanwhile).
func SetRatePartCleanHook(c *Store, f func()) {
	c.rates.mu.Lock()
	defer c.rates.mu.Unlock()
	c.rates.beforePartClean = f
}

// SetRatePartReserveHook makes c's claims under a partitioned rate run f
// when they have read their partitions, before they reserve (another
// process that reserves meanwhile).
func SetRatePartReserveHook(c *Store, f func()) {
	c.rates.mu.Lock()
	defer c.rates.mu.Unlock()
	c.rates.beforePartReserve = f
}

// RateLosses is how many reservations of rate name in a row c found taken
// by another process since it read the rate.
func RateLosses(c *Store, name string) int {
	c.rates.mu.Lock()
	defer c.rates.mu.Unlock()
	return c.rates.lost[name]
}

// RateYield is how long c waits past the next start of rate r (name)
// before trying to reserve it (rateCache.yield), for losses in a row.
func RateYield(c *Store, name string, r Rate, losses int) time.Duration {
	c.rates.mu.Lock()
	c.rates.lost[name] = losses
	c.rates.mu.Unlock()
	return c.rates.yield(name, r, 1)
}

// ModelRate is the reference model of a rate (modelRate, gcra_test.go),
// for the tests that check the store against it.
type ModelRate struct{ m *modelRate }

// NewModelRate is the model of r with nothing taken.
func NewModelRate(r Rate) ModelRate {
	g := r.gcra()
	return ModelRate{&modelRate{t: g.t, burst: g.burst}}
}

// Reserve takes up to k starts at t and returns how many.
func (m ModelRate) Reserve(t time.Time, k int) int { return m.m.reserve(t, k) }
