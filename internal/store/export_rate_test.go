package store

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
