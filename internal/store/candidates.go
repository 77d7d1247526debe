package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Candidates kept for claims under concurrency limits that bind. Such a
// claim stamps one or a few jobs (as many as its limits have slots free),
// yet its read of candidates costs what a read of many does: on MongoDB a
// round trip, on a server that sorts the available jobs for each read
// (devdb, server.go) a sort of the whole backlog, 1-2 s at 20,000 jobs
// while every other command waits. So a claim under a limit that binds
// (one has fewer slots free than the claim's window, or a partitioned
// limit applies: slotPicker.binds) reads candidateWindow candidates (or
// its own window, when wider) and keeps those it did not stamp; the next
// claims of the same client within the cache's age take theirs from it,
// filtered to their (narrowed) kinds and queues, and send no read. A claim
// whose limits all have room for its window neither uses nor fills it.
//
// Correctness never depends on the cache: a candidate taken from it is
// stamped exactly as one just read (stampLimited, stampBlock), matched on
// the claim's filter as of now (its queues unpaused, its kinds and queues
// not full, its saturated partitions skipped) and on its attempt and
// updatedAt as read, with its slots under the unique indexes. One that
// anyone claimed, changed or removed since it was read matches nothing and
// is dropped; when none of those a claim took from the cache (its window,
// twice: cacheTakes) was stamped, the claim reads as without it.
//
// Only claim order may lag: a job that became runnable after the cache was
// filled (inserted, retried, its runAt reached), even of a higher
// priority, waits until the cache ages out (candidateMaxAge after the read
// that filled it, or four times that read's time when longer: a server
// sorting a big backlog), is drained, or is dropped by this client's
// reaper re-queueing a job (Reap). A claim whose kinds, queues or skipped
// partitions the filling read did not cover (a limit or a partition no
// longer full) reads afresh, so no such job waits behind the cache. Claims
// under a rate limit (their reservations are sized to what they claim at
// once) and claims naming jobs (ratepart.go) neither use nor fill it.
//
// A read that took slowCandidateRead or longer is one of a server that
// sorts the whole backlog for each read (devdb: about a second per 20,000
// available jobs), where a read of many costs what a read of few does. The
// next reads then ask for more (window: up to maxCandidateWindow), and a
// claim that finds the cache half drained or three quarters aged starts
// the next read in the background (refill), so that no claim waits for
// one: the cache serves claims until it ends, aged or not, and the
// candidates the read finds replace the cache's, less those this client
// sent a stamp meanwhile. Each such read is a sort of the backlog there,
// so they are made no more often than the cache's age asks. A spread claim
// (ClaimParams.Spread, as workers claim) takes its candidates at random
// among the cache's first priority, so that processes holding the same
// candidates seldom race for one job; jobs of one priority then start in
// claim order only within a read's window, as with spread batch claims.

// candidateWindow is how many candidates a claim under limits reads at
// least: as many as a worker's read ahead of successors (handoff.go).
const candidateWindow = MaxSuccessors

// slowCandidateRead is how long a read of candidates takes on a server
// that sorts the backlog for each read (see above), and
// maxCandidateWindow the most candidates a read asks for there.
const (
	slowCandidateRead  = 100 * time.Millisecond
	maxCandidateWindow = 8 * candidateWindow
)

// refillTimeout bounds a read of candidates in the background.
const refillTimeout = time.Minute

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

// candidateOf is the candidate j, read as d.
func candidateOf(j *jobs.Job, d bson.Raw) candidate {
	return candidate{job: j, asRead: bson.D{
		{Key: "_id", Value: j.ID},
		{Key: "attempt", Value: rawValue(d, "attempt")},
		{Key: "updatedAt", Value: rawValue(d, "updatedAt")},
	}}
}

// split returns the jobs of cs and what their stamps match as read.
func split(cs []candidate) ([]*jobs.Job, bson.A) {
	js := make([]*jobs.Job, len(cs))
	asRead := make(bson.A, len(cs))
	for i, cd := range cs {
		js[i], asRead[i] = cd.job, cd.asRead
	}
	return js, asRead
}

// readCandidates reads, in claim order, up to limit jobs a claim by p at
// t could take, and returns when the read was sent and how long it took.
func (s *Store) readCandidates(ctx context.Context, p ClaimParams, t time.Time, limit int) (docs []bson.Raw, sent time.Time, took time.Duration, err error) {
	sent = time.Now()
	cur, err := s.coll.Find(ctx, claimFilter(p, t), options.Find().SetSort(claimSort).SetLimit(int64(limit)).SetBatchSize(int32(limit)))
	if err != nil {
		return nil, sent, 0, fmt.Errorf("find candidates: %w", err)
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, sent, 0, fmt.Errorf("read candidates: %w", err)
	}
	return docs, sent, time.Since(sent), nil
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
	filled int         // how many the last fill kept

	// epoch counts forgets: a refill started before one is dropped.
	epoch uint64
	// refilling is set while a read runs in the background (refill);
	// sentDuring holds the candidates taken meanwhile, which the read
	// may still return.
	refilling  bool
	sentDuring map[any]bool

	// hits counts the takes that found candidates, fills the reads that
	// filled the cache (tests).
	hits, fills int
}

// maxAge is how long the candidates of the last read are offered:
// candidateMaxAge, or four times what the read took when that is longer
// (a server that sorts a big backlog for each read: reading again sooner
// would keep it sorting), as a worker's successor pool does.
func (cc *candidateCache) maxAge() time.Duration { return max(candidateMaxAge, 4*cc.took) }

// window is how many candidates a claim under limits reads at least:
// candidateWindow, or more after a slow read (see above), up to
// maxCandidateWindow.
func (cc *candidateCache) window() int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.took < slowCandidateRead {
		return candidateWindow
	}
	return min(maxCandidateWindow, candidateWindow*int(cc.took/slowCandidateRead))
}

// startRefill reports whether a claim that took candidates from the cache
// should read the next ones in the background: the last read was slow, the
// cache is half drained or three quarters aged, and no such read runs yet.
// It then marks one as running, and returns the epoch to fill it with.
func (cc *candidateCache) startRefill() (uint64, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.refilling || cc.took < slowCandidateRead {
		return 0, false
	}
	if len(cc.cands) > cc.filled/2 && time.Since(cc.readAt) < cc.maxAge()*3/4 {
		return 0, false
	}
	cc.refilling, cc.sentDuring = true, map[any]bool{}
	return cc.epoch, true
}

// refill reads, in the background, the candidates of claims by p and
// fills the cache with them (see startRefill), unless the cache was
// forgotten since epoch.
func (s *Store) refill(p ClaimParams, limit int, epoch uint64) {
	go func() {
		// A read that fails is dropped unlogged: the next claim that
		// finds the cache drained or aged reads as it would without it,
		// and reports what fails then (this goroutine may outlive its
		// client, and a test's logger).
		ctx, cancel := context.WithTimeout(context.Background(), refillTimeout)
		docs, sent, took, err := s.readCandidates(ctx, p, s.Now(), limit)
		cancel()
		var got []candidate
		for _, d := range docs {
			var j jobs.Job
			if bson.Unmarshal(d, &j) != nil {
				continue // a claim's own read buries it
			}
			got = append(got, candidateOf(&j, d))
		}
		if err == nil && s.hooks != nil {
			s.hooks.AfterRefillRead()
		}

		cc := s.cands
		cc.mu.Lock()
		defer cc.mu.Unlock()
		if err == nil && cc.epoch == epoch {
			kept := got[:0]
			for _, cd := range got {
				if !cc.sentDuring[cd.job.ID] {
					kept = append(kept, cd)
				}
			}
			cc.fillLocked(p, kept, sent, took)
		}
		cc.refilling, cc.sentDuring = false, nil
	}()
}

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
func (s *Store) cacheable(p ClaimParams) bool {
	if s.cands == nil || len(p.ids) > 0 {
		return false
	}
	rc := s.rates
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, name := range claimLimits(p) {
		if rc.rates[name] != nil {
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
	if time.Since(cc.readAt) >= cc.maxAge() && !cc.refilling {
		cc.cands = nil
		return nil, 0
	}
	if !cc.covers(p) {
		return nil, 0
	}
	out := cc.remove(cc.pick(p, n))
	if len(out) > 0 {
		cc.hits++
	}
	return out, cc.gen
}

// covers reports whether the cache's read covered p's kinds, queues and
// skipped partitions. cc.mu is held.
func (cc *candidateCache) covers(p ClaimParams) bool {
	for _, k := range p.Kinds {
		if !cc.kinds[k] {
			return false
		}
	}
	for _, q := range p.Queues {
		if !cc.queues[q] {
			return false
		}
	}
	now := skipKeys(p.skip)
	for s := range cc.skips {
		if !now[s] {
			return false // a partition full then may not be now
		}
	}
	return true
}

// pick returns the indexes, in order, of up to n cached candidates of p's
// kinds and queues: the first, or with p.Spread n at random among the
// first run of one priority. cc.mu is held.
func (cc *candidateCache) pick(p ClaimParams, n int) []int {
	var match []int
	for i, cd := range cc.cands {
		if slices.Contains(p.Kinds, cd.job.Kind) && slices.Contains(p.Queues, cd.job.Queue) {
			match = append(match, i)
		}
	}
	picked := match[:min(n, len(match))]
	if p.Spread && len(match) > n {
		top := FirstPriorityRun(len(match), func(i int) int { return cc.cands[match[i]].job.Priority })
		if top > n {
			picked = slices.Clone(match[:top])
			rand.Shuffle(top, func(i, j int) { picked[i], picked[j] = picked[j], picked[i] })
			picked = picked[:n]
			slices.Sort(picked)
		}
	}
	return picked
}

// remove takes the candidates at picked (sorted indexes) out of the cache
// and returns them, noting them sent. cc.mu is held.
func (cc *candidateCache) remove(picked []int) []candidate {
	var out []candidate
	keep := cc.cands[:0:0]
	next := 0
	for i, cd := range cc.cands {
		if next < len(picked) && picked[next] == i {
			out = append(out, cd)
			next++
			if cc.sentDuring != nil {
				cc.sentDuring[cd.job.ID] = true
			}
			continue
		}
		keep = append(keep, cd)
	}
	cc.cands = keep
	return out
}

// putBack returns to the cache candidates taken from fill gen that were
// not sent a stamp (their limit or partition was full for the claim).
func (cc *candidateCache) putBack(gen uint64, cands []candidate) {
	if len(cands) == 0 {
		return
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for _, cd := range cands {
		delete(cc.sentDuring, cd.job.ID) // not sent after all
	}
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
	return cc.fillLocked(p, cands, readAt, took)
}

// fillLocked is fill with cc.mu held.
func (cc *candidateCache) fillLocked(p ClaimParams, cands []candidate, readAt time.Time, took time.Duration) uint64 {
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
	cc.filled = len(cands)
	return cc.gen
}

// forget drops the candidates kept: the next claim reads.
func (cc *candidateCache) forget() {
	cc.mu.Lock()
	cc.cands = nil
	cc.epoch++
	cc.mu.Unlock()
}

// unsent returns the candidates of cands that the claim's picker s sent no
// stamp.
func unsent(cands []candidate, s *slotPicker) []candidate {
	return slices.DeleteFunc(slices.Clone(cands), func(cd candidate) bool { return s.sent[cd.job.ID] })
}
