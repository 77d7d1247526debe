package store

import "time"

// Batched starts under a plain rate: what a start costs in commands.
//
// Every reservation is a compare-and-set of the rate's one document, and
// every process that waits for the rate's next start tries it at that
// instant: all but one lose it, each at the cost of a refused write and a
// read. Taking one start per reservation, a rate of 20/s over three
// processes cost about 5 commands per job.
//
// So a claim that keeps finding a backlog under a rate (its last claim
// under it used every start it reserved) waits until several starts are
// allowed and reserves them at once, then claims their jobs in one batch:
// one reservation, one claim and one round of losers for several jobs.
// It waits at most maxRateBatchWait for them, and for at most burst-1, so
// that one start of slack is left: a wake-up up to one interval late
// takes as many starts as one on time, and the rate holds its pace.
// Waiting changes when starts are made, never how many: every
// reservation is still GCRA's, and the bounds are unchanged.
//
// And a process whose last reservation of a rate with a burst lost
// (another process reserved since it read it) reads the rate before it
// tries again, rather than sending a write it is likely to lose and then
// reading: a loser that finds the round taken pays one command, not two.

// maxRateBatchWait bounds how long a start under a rate is held back to be
// reserved with others.
const maxRateBatchWait = 250 * time.Millisecond

// batch is how many starts of rate name (under r) a claim of up to k jobs
// waits for before it reserves: 1 unless the last claim under it used
// every start it reserved.
func (rc *rateCache) batch(name string, r Rate, k int) int {
	rc.mu.Lock()
	full := rc.full[name]
	rc.mu.Unlock()
	if !full {
		return 1
	}
	g := r.gcra()
	most := 1 + int(min(maxRateBatchWait/g.t, MaxBurst))
	return max(min(k, g.burst-1, most), 1)
}

// noteFull records, for each of names, whether the claim under them used
// every start it reserved.
func (rc *rateCache) noteFull(names []string, full bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, name := range names {
		rc.full[name] = full
	}
}

// readFirst reports whether a reservation of rate name reads it before
// its write: when this client's last reservation of it lost to another
// process, and the rate has a burst, so that the loser waits past the
// winner's next try (yield) and likely finds the round taken. (Under a
// burst of 1 every process tries at the same instant, and a read first
// would only add to the refused write and the read after it.)
func (rc *rateCache) readFirst(name string) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	s := rc.rates[name]
	return rc.lost[name] > 0 && s != nil && s.rate.burst() > 1
}

// UnderRates reports whether a rate limit applied to this client's last
// claim: a worker then claims for its run slots free now, and the starts
// the rate allows decide how many jobs it gets.
func (s *Store) UnderRates() bool {
	rc := s.rates
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.underRates
}
