package store

import (
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// WithRaceBeforeStamp returns a Store like c whose batch claims run f
// after reading their candidates and before stamping them, as if another
// worker ran in between.
func WithRaceBeforeStamp(c *Store, f func()) *Store {
	r := *c
	r.betweenReadAndStamp = f
	return &r
}

// WithLostStampReply returns a Store like c whose batch claims stamp their
// jobs and then fail with err, as if the server applied the stamp and its
// reply was lost.
func WithLostStampReply(c *Store, err error) *Store {
	r := *c
	r.afterStamp = func() error { return err }
	return &r
}

// WithLostClaimReply returns a Store like c whose claims' findAndModify,
// once the server applied it, fails with err the first n times, as when
// the reply is lost.
func WithLostClaimReply(c *Store, n int, err error) *Store {
	var left atomic.Int32
	left.Store(int32(n))
	return withHooks(c, hooks{afterClaim: func() error {
		if left.Add(-1) >= 0 {
			return err
		}
		return nil
	}})
}

// WithFailedReadBack returns a Store like c whose batch claims fail with
// err when they read back the jobs they stamped.
func WithFailedReadBack(c *Store, err error) *Store {
	return withHooks(c, hooks{beforeReadBack: func() error { return err }})
}

// WithLostFinishReply returns a Store like c whose finishing write op
// ("complete", "fail", "cancel"), once the server applied it, fails with
// err the first n times, as when the reply is lost.
func WithLostFinishReply(c *Store, op string, n int, err error) *Store {
	var left atomic.Int32
	left.Store(int32(n))
	return withHooks(c, hooks{afterFinish: func(got string) error {
		if got == op && left.Add(-1) >= 0 {
			return err
		}
		return nil
	}})
}

// SetPauseRefresh sets how long the claims of c (and its copies) trust the
// paused queues they last read.
func SetPauseRefresh(c *Store, d time.Duration) {
	c.pauses.mu.Lock()
	c.pauses.refresh = d
	c.pauses.mu.Unlock()
}

// WithReadBackTimeout returns a Store like c whose fenced finishing
// writes that matched nothing bound the read telling a lost lease from an
// earlier try applied by d (5 s otherwise); a d of 0 makes that read fail
// at once with context.DeadlineExceeded.
func WithReadBackTimeout(c *Store, d time.Duration) *Store {
	return withHook(c, func(h *hooks) { h.readBackTimeout = &d })
}

// WithCleanHook returns a Store like c whose Clean runs f after it read
// the ids of the jobs to delete and before it deletes them, as if the
// process stalled in between.
func WithCleanHook(c *Store, f func()) *Store {
	return withHook(c, func(h *hooks) { h.beforeClean = f })
}

// WithFindUpdateHook returns a Store like c whose FoundIDs (and so the
// reaper's repairs) run f after they read the ids of the jobs to
// change and before they change them, as if the process stalled in
// between.
func WithFindUpdateHook(c *Store, f func()) *Store {
	return withHook(c, func(h *hooks) { h.betweenFindAndUpdate = f })
}

// WithCompleteReadBackHook returns a Store like c whose CompleteMany runs
// f after its updateMany, when not every fence matched, before it reads
// which did.
func WithCompleteReadBackHook(c *Store, f func()) *Store {
	return withHook(c, func(h *hooks) { h.beforeCompleteReadBack = f })
}

// PartKey is partKey, for the tests.
func PartKey(arg string, v bson.RawValue) string { return partKey(arg, v) }

// SetLimitRefresh sets how long the claims of c (and its copies) trust
// the limits they last read.
func SetLimitRefresh(c *Store, d time.Duration) {
	c.limits.mu.Lock()
	c.limits.refresh = d
	c.limits.mu.Unlock()
}

// CandidateHits is how many claims of c took candidates from its cache
// (candidates.go), and how many reads filled it.
func CandidateHits(c *Store) (hits, fills int) {
	c.cands.mu.Lock()
	defer c.cands.mu.Unlock()
	return c.cands.hits, c.cands.fills
}

// SlowCandidateReads makes the last read of candidates of c (and its
// copies) seem to have taken d, as on a server sorting a big backlog.
func SlowCandidateReads(c *Store, d time.Duration) {
	c.cands.mu.Lock()
	c.cands.took = d
	c.cands.mu.Unlock()
}

// CandidateIDs lists the ids of the candidates c keeps, in their order.
func CandidateIDs(c *Store) []any {
	c.cands.mu.Lock()
	defer c.cands.mu.Unlock()
	out := make([]any, len(c.cands.cands))
	for i, cd := range c.cands.cands {
		out[i] = cd.job.ID
	}
	return out
}

// WithRefillHook returns a Store like c whose reads of candidates in the
// background run f once they have read, before they fill the cache.
func WithRefillHook(c *Store, f func()) *Store {
	return withHook(c, func(h *hooks) { h.afterRefillRead = f })
}

// AgeCandidates makes the candidates c keeps for claims d older, as if
// read d earlier.
func AgeCandidates(c *Store, d time.Duration) {
	c.cands.mu.Lock()
	c.cands.readAt = c.cands.readAt.Add(-d)
	c.cands.mu.Unlock()
}

// SkippedPartitionValues builds the partitions of kind k's limit of n per
// args.c, each value running count jobs, and returns how many values a
// claim's filter leaves out, per limit.
func SkippedPartitionValues(counts map[string]int, n int) []int {
	parts := partSpecs{KindLimit("k"): {arg: "c", n: n}}
	loads := map[string]*partLoad{}
	for v, count := range counts {
		typ, data, _ := bson.MarshalValue(v)
		l := &partLoad{QueueLoad: QueueLoad{Slots: map[int]bool{}}, value: bson.RawValue{Type: typ, Value: data}, known: true}
		for k := range count {
			l.Slots[k] = true
		}
		loads[v] = l
	}
	s := &slotPicker{parts: parts, pload: map[string]map[string]*partLoad{KindLimit("k"): loads}}
	var out []int
	for _, sk := range s.saturated(ClaimParams{Kinds: []string{"k"}, Queues: []string{"default"}}) {
		out = append(out, len(sk.values))
	}
	return out
}
