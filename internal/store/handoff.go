package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// Handing a run slot on: under a concurrency limit that binds, the slot
// of a job that ends goes to the next job of its limit in the round trip
// of the finishing write itself, not in three in a row (the write, the
// next claim's read of candidates, its stamp).
//
// While a job holding run slots runs, its worker reads a few candidates
// of the job's kind and queue ahead (ReadSuccessors, in claim order).
// When the job succeeds, CompleteHandingOff sends one ordered bulkWrite:
// Complete's fenced finishing write, then the claim stamp of one
// candidate, matched on its id, the claim filter and its attempt and
// updatedAt as read (as stampLimited stamps), setting the slots the first
// write frees. When the candidate was taken since it was read (its stamp
// matches nothing), HandOnFreed stamps another into the freed slots: one
// round trip, not a claim's two.
//
// The unique index on the slots keeps the limit, not the first write's
// fence: the stamp takes the slot values the ending job held, so it
// succeeds only if no running job holds them. When the ending job's lease
// was lost (it stalled, and the reaper re-queued it, freeing its slots),
// the stamp either takes a free slot, as any claim could, or is refused
// as a duplicate key when another claim took it since. Either way no slot
// is held twice, and the running jobs of the limit are the slots held.
//
// A hand-off is made only where a claim would give the candidate the very
// slots the ending job frees: the candidate is of the same kind and queue
// (so the same limits apply), no rate applies to them (a start would need
// a reservation, rate.go), its queue is not paused as read within
// PauseRefresh, and the limits and the views of their run slots
// (runload.go) are as trusted as a claim from a view requires: read
// lately, under the limit as it is now, with no slot held at or above it
// (a lowered limit is never kept over-full by hand-offs). Otherwise the
// caller completes as usual and the freed slot goes to its next claim.

// Successor is a job read ahead by ReadSuccessors: a candidate to take,
// with CompleteHandingOff, the run slots of a job that ends.
type Successor struct {
	// Job is the candidate as read (available).
	Job *jobs.Job
	// ReadAt is when it was read.
	ReadAt time.Time
	// asRead matches its attempt and updatedAt as read.
	asRead bson.D
}

// The comments on the commands of hand-offs, which name them in a
// server's logs and profiler (and to docket's bench, which counts a
// hand-off as one completion, not as the two jobs its reply counts).
const (
	SuccessorsComment = "docket: read successors"
	HandoffComment    = "docket: complete and hand on"
)

// MaxSuccessors bounds the candidates one ReadSuccessors reads.
const MaxSuccessors = 64

// ReadSuccessors reads, in claim order, up to n available jobs of kind in
// queue that p could claim now, when a job of kind in queue may hand its
// run slots on (see above): none, and no command on the jobs, when no
// concurrency limit applies to them, a rate does, or the queue is paused.
// It refreshes the caches of limits and paused queues as a claim does.
// The jobs are read whole: the one handed a slot runs without reading it
// again.
func (s *Store) ReadSuccessors(ctx context.Context, p ClaimParams, kind, queue string, n int) ([]*Successor, error) {
	n = min(n, MaxSuccessors)
	if n < 1 {
		return nil, nil
	}
	p.Kinds, p.Queues = []string{kind}, []string{queue}
	totals, parts, err := s.limitsFor(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("store: read successors: %w", err)
	}
	if len(totals) == 0 || parts.any() {
		// A partitioned limit hands nothing on: the successor's
		// partition slot is not the one the ending job frees.
		return nil, nil
	}
	if s.Rated(kind, queue) {
		return nil, nil
	}
	if !s.freshPauses(ctx, queue) {
		return nil, nil
	}
	t := s.Now()
	opts := options.Find().SetSort(claimSort).SetLimit(int64(n)).SetBatchSize(int32(n)).SetComment(SuccessorsComment)
	var out []*Successor
	err = eachFound(ctx, s.coll, claimFilter(p, t), opts, func(d bson.Raw) error {
		var j jobs.Job
		if bson.Unmarshal(d, &j) != nil {
			return nil // a claim buries it
		}
		out = append(out, &Successor{Job: &j, ReadAt: t, asRead: bson.D{
			{Key: "attempt", Value: rawValue(d, "attempt")},
			{Key: "updatedAt", Value: rawValue(d, "updatedAt")},
		}})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: read successors: %w", err)
	}
	return out, nil
}

// freshPauses reports whether queue is not paused as read within
// PauseRefresh, reading the paused queues again when the last read is
// older. A claim reads them only when its answer would pause one of its
// queues (unpaused), or to confirm a claim that took jobs: a worker whose
// jobs start by hand-offs claims seldom, and a hand-off needs a fresh
// answer (it cannot give its successor back as a claim does).
func (s *Store) freshPauses(ctx context.Context, queue string) bool {
	p := s.pauses
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stale() {
		if s.readPauses(ctx) != nil {
			return false
		}
	}
	return !p.paused[queue]
}

// SuccessorsWanted reports whether the job jobID, claimed by this client,
// holds run slots of limits that are not far from full as this client
// last saw them (runload.go): the ones where reading successors ahead
// may pay. A limit far from full (half of it free or more) has free slots
// for the next claim anyway, and its jobs cost no read ahead.
func (s *Store) SuccessorsWanted(jobID string) bool {
	r := s.limits.loads
	r.mu.Lock()
	defer r.mu.Unlock()
	hs, ok := r.holders[jobID]
	if !ok {
		return false
	}
	for _, h := range hs {
		if h.part != "" {
			return false // a partition's slot is never handed on (heldSlots)
		}
		v := r.views[h.limit]
		if v == nil || 2*len(v.held) <= v.limit {
			return false // no hand-off without a view (handoffSlots)
		}
	}
	return true
}

// refreshForHandoff reads the limits and the paused queues again when
// the last reads are too old for a hand-off of a job of kind in queue
// (a command on the limits or queues collection about once a second, in
// place of the claim's two on the jobs that a hand-off refused for it
// would cost). A failed read leaves them old: the hand-off is not made.
func (s *Store) refreshForHandoff(ctx context.Context, p ClaimParams, kind, queue string) {
	p.Kinds, p.Queues = []string{kind}, []string{queue}
	if _, _, err := s.limitsFor(ctx, p); err == nil {
		s.freshPauses(ctx, queue)
	}
}

// handoffSlots returns the slot fields that a job of kind in queue, which
// the job jobID holding them hands on, is stamped with, and whether the
// hand-off may be made now (see above), with no command: the caches of
// limits, rates and paused queues fresh and agreeing, the views of the
// limits trusted.
func (s *Store) handoffSlots(jobID, kind, queue string) (bson.D, bool) {
	if s.Rated(kind, queue) || !s.pausesTrusted(queue) {
		return nil, false
	}
	names, setAt, ok := s.handoffLimits(kind, queue)
	if !ok {
		return nil, false
	}
	return s.limits.loads.heldSlots(jobID, kind, queue, names, setAt)
}

// pausesTrusted reports whether the paused queues, as last read, are
// trusted and queue is not among them.
func (s *Store) pausesTrusted(queue string) bool {
	p := s.pauses
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.stale() && !p.paused[queue]
}

// handoffLimits returns the limits (name → limit) on kind and queue, as
// last read, and when each was set; ok is false when that read is no
// longer trusted, or a partition limit applies (see ReadSuccessors).
func (s *Store) handoffLimits(kind, queue string) (names map[string]int, setAt map[string]time.Time, ok bool) {
	l := s.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stale() {
		return nil, nil, false
	}
	names = map[string]int{}
	for _, name := range jobLimits(kind, queue) {
		if _, ok := l.parts[name]; ok {
			return nil, nil, false
		}
		if n, ok := l.totals[name]; ok {
			names[name] = n
		}
	}
	return names, l.setAt, true
}

// heldSlots returns the slot fields of the run slots jobID holds under
// names (limit name → limit, set at setAt) for a successor of kind in
// queue: false when it holds another set, one of them is over its limit,
// or a view of the slots held is not trusted.
func (r *runLoads) heldSlots(jobID, kind, queue string, names map[string]int, setAt map[string]time.Time) (bson.D, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	hs := r.holders[jobID]
	if len(hs) == 0 || len(hs) != len(names) {
		return nil, false // another set of limits applies now
	}
	var set bson.D
	for _, h := range hs {
		n, ok := names[h.limit]
		v := r.views[h.limit]
		if !ok || h.part != "" || h.k >= n || v == nil || v.limit != n || !v.readAt.After(setAt[h.limit].Add(2*LimitRefresh)) {
			return nil, false
		}
		for slot := range v.held {
			if slot >= n {
				return nil, false // over a lowered limit: let it drain
			}
		}
		if h.limit == KindLimit(kind) {
			set = append(set, bson.E{Key: kindRunSlotField, Value: SlotKey(kind, h.k)})
		} else {
			set = append(set, bson.E{Key: queueRunSlotField, Value: SlotKey(queue, h.k)})
		}
	}
	return set, true
}

// handedOn records that the run slots of job from went to job to (a
// successor stamped with them): to holds them, and from no longer.
func (r *runLoads) handedOn(from, to string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if hs, ok := r.holders[from]; ok {
		delete(r.holders, from)
		r.holders[to] = hs
	}
}

// ErrNoHandoff is returned by CompleteHandingOff, before sending anything,
// when the hand-off may not be made now: the caller completes the job as
// usual (Complete).
var ErrNoHandoff = errors.New("store: no run slot hand-off now")

// CompleteHandingOff marks the job l holds succeeded, as Complete does
// (with the result ctx carries), and in the same round trip claims next,
// read ahead by ReadSuccessors, for p (p.Token fresh and known to the
// caller, the lease counted from before the send) into the run slots the
// job frees. It returns the successor claimed, nil when it was not (taken
// by another claim since it was read, or its slot taken: the slot freed
// goes to the next claim as after Complete), and the completion's error,
// as Complete's: nil, jobs.ErrLeaseLost, ErrOutcomeUnknown; ErrNoHandoff when
// nothing was sent (see above). On any other error the completion's
// outcome is not known and next may carry p.Token: the caller gives it
// back with ReleaseClaim(p.Token) and completes again with Complete,
// which reads back a completion already applied.
func (s *Store) CompleteHandingOff(ctx context.Context, l Lease, next *Successor, p ClaimParams) (*jobs.Job, error) {
	j := next.Job
	s.refreshForHandoff(ctx, p, j.Kind, j.Queue)
	set, ok := s.handoffSlots(l.JobID, j.Kind, j.Queue)
	if !ok || p.Token == "" {
		return nil, ErrNoHandoff
	}
	if s.completions != nil {
		s.completions.handedOff(l)
	}
	p.Kinds, p.Queues = []string{j.Kind}, []string{j.Queue}
	t := s.Now()
	res, err := s.coll.BulkWrite(ctx, handoffWrites(ctx, l, next, p, t, set),
		options.BulkWrite().SetOrdered(true).SetComment(HandoffComment))
	if err == nil {
		err = s.lostFinishReply("handoff")
	}
	return s.handoffOutcome(ctx, l, j, p, t, res, err)
}

// handoffWrites are the writes of a hand-off: the completion of l's job,
// the stamp of the successor next with the run slots set, and a witness.
// The reply counts the documents matched, not which: the witness, which
// matches the successor only once it carries p.Token, fresh to this call,
// counts the stamp twice, so that the count tells the completion alone (1)
// from the stamp alone (2). It changes nothing.
func handoffWrites(ctx context.Context, l Lease, next *Successor, p ClaimParams, t time.Time, set bson.D) []mongo.WriteModel {
	j := next.Job
	end := mongo.NewUpdateOneModel().SetFilter(fence(l)).SetUpdate(withProgress(ctx, Finish(jobs.StateSucceeded, t, resultOf(ctx)...)))
	match, stamp := successorStamp(next, p, t, set)
	witness := mongo.NewUpdateOneModel().
		SetFilter(bson.D{{Key: "_id", Value: j.ID}, {Key: "leaseToken", Value: p.Token}}).
		SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "leaseToken", Value: p.Token}}}})
	return []mongo.WriteModel{end, mongo.NewUpdateOneModel().SetFilter(match).SetUpdate(stamp), witness}
}

// successorStamp is the claim of a successor read ahead, as a hand-off
// and a hand-on make it: the filter matches it only as it was read and
// still claimable under p, and the update stamps it with p.Token and the
// run slots set.
func successorStamp(next *Successor, p ClaimParams, t time.Time, set bson.D) (match, stamp bson.D) {
	match = append(bson.D{{Key: "_id", Value: next.Job.ID}}, claimFilter(p, t)...)
	match = append(match, next.asRead...)
	return match, AlsoIn(claimUpdate(p, t, p.Token), "$set", set...)
}

// handoffOutcome reads what a hand-off's writes did from their reply
// (res, err): the successor j claimed, or none, and the completion's
// error.
func (s *Store) handoffOutcome(ctx context.Context, l Lease, j *jobs.Job, p ClaimParams, t time.Time, res *mongo.BulkWriteResult, err error) (*jobs.Job, error) {
	// The completion, not known applied, read back: the lease lost unless
	// the job holds this attempt's completion.
	lostUnlessDone := func() error {
		return s.unlessWritten(ctx, "complete", l, fmt.Errorf("store: complete job %s: %w", l.JobID, jobs.ErrLeaseLost), completedBy(l))
	}
	var bwe mongo.BulkWriteException
	switch {
	case err == nil && res.MatchedCount == 3:
		stampClaim(j, p, t, p.Token)
		s.limits.loads.handedOn(l.JobID, j.ID)
		return j, nil
	case err == nil && res.MatchedCount == 1:
		return nil, nil // completed; the successor was taken since it was read
	case err == nil && res.MatchedCount == 0:
		// The lease was lost, and the successor taken since it was read.
		return nil, lostUnlessDone()
	case err == nil:
		// The stamp alone (or a count no write of this call explains:
		// the successor, read back, tells whether it is ours). The lease
		// was lost (reaped, which freed the slot), and the successor took
		// the free slot, as any claim could have.
		got, rerr := s.readBack(ctx, []*jobs.Job{j}, p.Token)
		if rerr != nil {
			return nil, fmt.Errorf("store: complete job %s handing its run slots on: %w", l.JobID, rerr)
		}
		if len(got) == 0 {
			return nil, lostUnlessDone()
		}
		s.limits.loads.handedOn(l.JobID, got[0].ID)
		return got[0], lostUnlessDone()
	case errors.As(err, &bwe) && bwe.WriteConcernError == nil && len(bwe.WriteErrors) > 0 && bwe.WriteErrors[0].Index == 1:
		// Answered: the completion was made or matched nothing, and the
		// stamp was refused (its slot held by another claim: a duplicate
		// key; or a candidate another app wrote badly, which a claim
		// buries). The views of the slots are then wrong (runload.go).
		s.limits.loads.forget()
		s.log.Debug("run slot hand-off refused", zap.String("job_id", l.JobID), zap.String("successor", j.ID), zap.Error(err))
		if res != nil && res.MatchedCount == 1 {
			return nil, nil
		}
		return nil, lostUnlessDone()
	case DuplicateCommand(err):
		// The stamp's duplicate key answered as a command error
		// (server.go): the stamp was not applied, the completion may
		// have been.
		s.limits.loads.forget()
		return nil, lostUnlessDone()
	}
	// Not answered, or the completion refused: neither outcome is known.
	s.limits.loads.forget()
	return nil, fmt.Errorf("store: complete job %s handing its run slots on: %w", l.JobID, err)
}

// handedOff counts the completion of l, made by a hand-off rather than
// through the completer, as one of its batch's (see ofBatch).
func (c *completer) handedOff(l Lease) {
	c.mu.Lock()
	c.ofBatch(l)
	c.mu.Unlock()
}

// HandOnFreed claims next, read ahead by ReadSuccessors, for p (p.Token
// fresh and known to the caller) into the run slots that the job jobID
// held until its finishing write, applied: the second try of a hand-off
// whose successor had been taken (CompleteHandingOff returned none and no
// error), one stamp rather than the claim's read and stamp. It returns
// the successor claimed, nil when it was taken too or its slot was
// (another claim got the slot first: the limit holds either way), and
// ErrNoHandoff, sending nothing, where a hand-off may not be made (see
// above). On any other error next may carry p.Token: the caller gives it
// back with ReleaseClaim(p.Token).
func (s *Store) HandOnFreed(ctx context.Context, jobID string, next *Successor, p ClaimParams) (*jobs.Job, error) {
	j := next.Job
	s.refreshForHandoff(ctx, p, j.Kind, j.Queue)
	set, ok := s.handoffSlots(jobID, j.Kind, j.Queue)
	if !ok || p.Token == "" {
		return nil, ErrNoHandoff
	}
	p.Kinds, p.Queues = []string{j.Kind}, []string{j.Queue}
	t := s.Now()
	match, stamp := successorStamp(next, p, t, set)
	res, err := s.coll.UpdateOne(ctx, match, stamp)
	switch {
	case err == nil && res.MatchedCount == 1:
		stampClaim(j, p, t, p.Token)
		s.limits.loads.handedOn(jobID, j.ID)
		return j, nil
	case err == nil:
		return nil, nil
	case IsDuplicateKey(err) || isTypeMismatch(err):
		s.limits.loads.forget()
		return nil, nil
	}
	s.limits.loads.forget()
	return nil, fmt.Errorf("store: hand the run slots of job %s on: %w", jobID, err)
}
