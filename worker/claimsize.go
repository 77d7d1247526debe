package worker

import (
	"time"

	"github.com/docketq/docket/jobs"
)

// claimSize is how the dispatcher sizes its next claim.
type claimSize int

const (
	// claimOne: one job with one findAndModify, at once. No backlog is
	// known: the last claims found nothing, or less than they asked for.
	claimOne claimSize = iota
	// claimFree: a batch of the slots free now, without waiting for more.
	// A backlog is likely: single claims in a row each found their job.
	claimFree
	// claimGathered: a batch of the free slots and of those about to free
	// (see gatherSlots). A backlog: the last batch came back at least half
	// full.
	claimGathered
)

// singleHitsForBatch is how many single claims in a row must each find
// their job before the dispatcher claims a batch: a steady trickle of jobs
// into fast claims makes several in a row often, and a batch that finds
// only one job costs two commands where a single claim costs one. Each
// batch that finds one job or none doubles it, up to maxHitsForBatch,
// until a batch comes back full.
//
// A backlog shows sooner in how long the jobs claimed had been runnable:
// backlogHits single claims in a row whose jobs had each waited
// backlogWait or longer make a batch at once. A trickle's job is claimed
// within a round trip or two of being enqueued, unless it came during an
// idle spell (polls back off to PollMax): two jobs that came in one spell
// make a false alarm, which costs one batch that comes back short.
const (
	singleHitsForBatch = 8
	maxHitsForBatch    = 32
	backlogHits        = 2
	backlogWait        = 200 * time.Millisecond
)

// claimSizer sizes claims from what the last ones returned: one job while
// they come back short (a trickle, an idle queue), batches while they come
// back full (a backlog). It is the dispatch goroutine's alone.
type claimSizer struct {
	size   claimSize
	hits   int // single claims in a row that found their job
	queued int // of them, the last in a row whose job had waited backlogWait
	need   int // hits that make a batch: singleHitsForBatch, or more after batches that found little
}

// next returns the size of the next claim for a worker of the given claim
// batch and concurrency.
func (s *claimSizer) next(batch, concurrency int) claimSize {
	if min(batch, concurrency) <= 1 {
		return claimOne
	}
	return s.size
}

// claimed takes in what a claim that asked for asked jobs returned, and
// the longest any of them had been runnable. A batch that came back short
// but with more than one job keeps batching: other workers may have taken
// part of its candidates while a backlog remains; the next batch tells.
func (s *claimSizer) claimed(asked, got int, waited time.Duration, err error) {
	if s.need == 0 {
		s.need = singleHitsForBatch
	}
	switch {
	case err == nil && asked > 1 && got <= 1:
		// A batch for a trickle: batch less eagerly.
		s.size, s.hits, s.queued, s.need = claimOne, 0, 0, min(2*s.need, maxHitsForBatch)
	case err != nil || got == 0 || (got < asked && got == 1):
		s.size, s.hits, s.queued = claimOne, 0, 0
	case got < asked && 2*got >= asked:
		// Others took part of the candidates while a backlog remains: the
		// slots about to free are worth a round trip's wait, where a batch
		// of the few free now costs as much as a full one.
		s.size = claimGathered
	case got < asked:
		// Little is left: claim with the slots free now, without waiting.
		s.size = claimFree
	case asked > 1:
		s.size, s.need = claimGathered, singleHitsForBatch
	default:
		s.hits++
		if waited >= backlogWait {
			s.queued++
		} else {
			s.queued = 0
		}
		if s.hits >= s.need || s.queued >= backlogHits {
			s.size = claimFree
		}
	}
}

// waitedLongest is the longest that any of the jobs claimed at sent had
// been runnable.
func waitedLongest(claimed []*jobs.Job, sent time.Time) time.Duration {
	var longest time.Duration
	for _, j := range claimed {
		longest = max(longest, sent.Sub(j.RunAt))
	}
	return longest
}
