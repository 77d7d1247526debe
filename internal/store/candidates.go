package store

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Candidates kept for claims under concurrency limits that bind. A claim
// under a limit that binds stamps one or a few jobs (as many as the limit has
// slots free), yet its read of candidates costs what a read of many does:
// on MongoDB a round trip, on a server that sorts the available jobs for
// each read (devdb, server.go) a sort of the whole backlog, 1-2 s at
// 20,000 jobs while every other command waits. So a claim under a limit
// that binds (one of its limits has fewer slots free than the claim's
// window, slotPicker.binds, or a partitioned limit applies) reads
// candidateWindow candidates (or its own window, when wider), and keeps
// those it did not stamp; the next claims of the same client within
// the cache's age take their candidates from it, filtered to their
// (narrowed) kinds and queues, and send no read. A claim whose limits
// all have room for its window neither uses nor fills it: it is bound by
// its own size, and reads as it always did.
//
// Correctness never depends on the cache: a candidate taken from it is
// stamped exactly as one just read (stampLimited, stampBlock), matched on
// the claim's filter as of now (its queues unpaused, its kinds and queues
// not full, its saturated partitions skipped) and on its attempt and
// updatedAt as read, with its slots under the unique indexes. One that
// anyone claimed, changed or removed since it was read matches nothing and
// is dropped; when none of those a claim took from the cache (its window,
// twice: cacheTakes) was stamped, the claim reads as it would without it.
//
// Only claim order may lag: a job that became runnable after the cache was
// filled (inserted, retried, its runAt reached), even of a higher
// priority, is not among its candidates, so it waits until the cache ages
// out, candidateMaxAge after the read that filled it (or four times that
// read's time, when longer: a server sorting a big backlog), or until it
// is drained, or until this client's reaper re-queues a job (Reap drops
// the cache). A claim whose kinds, queues or skipped partitions the
// filling read did not cover (a limit or a partition no longer full)
// reads afresh, so no such job waits behind the cache. Claims under a
// rate limit neither use nor fill it: their reservations are sized to
// what they claim at once. Claims naming jobs (ratepart.go) neither.

// candidateWindow is how many candidates a claim under limits reads at
// least: as many as a worker's read ahead of successors (handoff.go).
const candidateWindow = MaxSuccessors

// candidateMaxAge is the least time the candidates of one read are
// offered to the claims that follow (see candidateCache.maxAge): as long
// as a worker's read ahead keeps its successors.
const candidateMaxAge = time.Second

// candidate is a job read by a claim under limits, with its
// {_id, attempt, updatedAt} as read.
type candidate struct {
	job    *jobs.Job
	asRead bson.D
}

// candidateCache holds the candidates of the last read of the claims of
// one Store and its copies under limits.
type candidateCache struct {
	mu     sync.Mutex
	gen    uint64 // counts fills: a claim puts back only into its own
	kinds  map[string]bool
	queues map[string]bool
	skips  map[string]bool // partSkip entries of the read (skipKeys)
	readAt time.Time
	took   time.Duration
	cands  []candidate // in claim order

	// hits counts the takes that found candidates, fills the reads that
	// filled the cache (tests).
	hits, fills int
}

func newCandidateCache() *candidateCache { return &candidateCache{} }

// maxAge is how long the candidates of the last read are offered:
// candidateMaxAge, or four times what the read took when that is longer
// (a server that sorts a big backlog for each read: reading again sooner
// would keep it sorting), as a worker's successor pool does.
func (cc *candidateCache) maxAge() time.Duration { return max(candidateMaxAge, 4*cc.took) }

// skipKeys names each partition that skip leaves out.
func skipKeys(skip []partSkip) map[string]bool {
	out := map[string]bool{}
	for _, s := range skip {
		for _, v := range s.values {
			out[fmt.Sprintf("%s\x00%s\x00%s\x00%v", s.field, s.target, s.arg, v)] = true
		}
	}
	return out
}

// cacheable reports whether a claim by p under limits may use and fill
// the cache (see above).
func (c *Store) cacheable(p ClaimParams) bool {
	if c.cands == nil || len(p.ids) > 0 {
		return false
	}
	rc := c.rates
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, k := range p.Kinds {
		if rc.rates[KindLimit(k)] != nil {
			return false
		}
	}
	for _, q := range p.Queues {
		if rc.rates[QueueLimit(q)] != nil {
			return false
		}
	}
	return true
}

// take removes from the cache and returns, in claim order, up to n
// candidates of p's kinds and queues, and the fill they come from; none
// when the cache is empty, aged out, or its read did not cover p's kinds,
// queues and skipped partitions.
func (cc *candidateCache) take(p ClaimParams, n int) ([]candidate, uint64) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if len(cc.cands) == 0 {
		return nil, 0
	}
	if time.Since(cc.readAt) >= cc.maxAge() {
		cc.cands = nil
		return nil, 0
	}
	for _, k := range p.Kinds {
		if !cc.kinds[k] {
			return nil, 0
		}
	}
	for _, q := range p.Queues {
		if !cc.queues[q] {
			return nil, 0
		}
	}
	if len(cc.skips) > 0 {
		now := skipKeys(p.skip)
		for s := range cc.skips {
			if !now[s] {
				return nil, 0 // a partition full then may not be now
			}
		}
	}
	var out []candidate
	keep := cc.cands[:0:0]
	for _, cd := range cc.cands {
		if len(out) < n && slices.Contains(p.Kinds, cd.job.Kind) && slices.Contains(p.Queues, cd.job.Queue) {
			out = append(out, cd)
			continue
		}
		keep = append(keep, cd)
	}
	cc.cands = keep
	if len(out) > 0 {
		cc.hits++
	}
	return out, cc.gen
}

// putBack returns to the cache candidates taken from fill gen that were
// not sent a stamp (their limit or partition was full for the claim).
func (cc *candidateCache) putBack(gen uint64, cands []candidate) {
	if len(cands) == 0 {
		return
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if gen != cc.gen {
		return // filled again since: it has them, or newer
	}
	cc.cands = append(cc.cands, cands...)
	slices.SortStableFunc(cc.cands, func(a, b candidate) int { return claimOrder(a.job, b.job) })
}

// fill replaces the cache's candidates with those of a read by p started
// at readAt that took took, and returns the fill's number for putBack.
func (cc *candidateCache) fill(p ClaimParams, cands []candidate, readAt time.Time, took time.Duration) uint64 {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.gen++
	cc.fills++
	cc.kinds, cc.queues = map[string]bool{}, map[string]bool{}
	for _, k := range p.Kinds {
		cc.kinds[k] = true
	}
	for _, q := range p.Queues {
		cc.queues[q] = true
	}
	cc.skips = skipKeys(p.skip)
	cc.readAt, cc.took = readAt, took
	cc.cands = slices.Clone(cands)
	return cc.gen
}

// forget drops the candidates kept: the next claim reads.
func (cc *candidateCache) forget() {
	cc.mu.Lock()
	cc.cands = nil
	cc.mu.Unlock()
}

// unsent returns the candidates of cands that the claim's picker s sent no
// stamp.
func unsent(cands []candidate, s *slotPicker) []candidate {
	var out []candidate
	for _, cd := range cands {
		if !s.sent[cd.job.ID] {
			out = append(out, cd)
		}
	}
	return out
}
