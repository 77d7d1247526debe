package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// claimBatchTries is how many times ClaimBatch looks for candidates again
// when other workers took every one it found.
const claimBatchTries = 3

// claimFilter matches the jobs that p may claim at t.
func claimFilter(p ClaimParams, t time.Time) bson.D {
	return claimFilterIn(jobs.StateAvailable, p, t)
}

// claimFilterIn is claimFilter for jobs in state (a claim that releases
// a blocked job as it takes it: ClaimReleased).
func claimFilterIn(state jobs.State, p ClaimParams, t time.Time) bson.D {
	f := bson.D{
		{Key: "state", Value: state},
		{Key: "queue", Value: bson.D{{Key: "$in", Value: p.Queues}}},
		{Key: "kind", Value: bson.D{{Key: "$in", Value: p.Kinds}}},
		{Key: "runAt", Value: bson.D{{Key: "$lte", Value: t}}},
	}
	if len(p.skip) > 0 || len(p.ids) > 0 {
		and := make(bson.A, 0, len(p.skip)+1)
		if len(p.ids) > 0 {
			// Under $and: the stamps put an _id of their own first.
			and = append(and, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: p.ids}}}})
		}
		for _, s := range p.skip {
			and = append(and, s.filter())
		}
		f = append(f, bson.E{Key: "$and", Value: and})
	}
	return f
}

// claimUpdate stamps a job claimed at t with p.Owner and token, clearing
// any progress left by an earlier attempt.
func claimUpdate(p ClaimParams, t time.Time, token string) bson.D {
	return bson.D{
		{Key: "$set", Value: bson.D{
			{Key: "state", Value: jobs.StateRunning},
			{Key: "owner", Value: p.Owner},
			{Key: "leaseToken", Value: token},
			{Key: "leaseExpiresAt", Value: t.Add(p.Lease)},
			{Key: "heartbeatAt", Value: t},
			{Key: "updatedAt", Value: t},
		}},
		{Key: "$inc", Value: bson.D{{Key: "attempt", Value: 1}}},
		{Key: "$unset", Value: bson.D{{Key: progressField, Value: ""}}},
	}
}

// claimWindow is how many blocks of k candidates a batch claim reads: when
// another worker stamped the first block between this claim's read and its
// stamp, the claim tries the next block instead of reading again.
const claimWindow = 2

// claimSpreadBlocks is how many blocks of k a spread batch claim (see
// ClaimParams.Spread) reads, and claimSpreadMax how many candidates at
// most (at least claimWindow blocks): it starts with one of them picked at
// random, then tries the others in turn. More blocks collide less but let
// the oldest jobs wait longer: each claim takes the first block only once
// in claimSpreadBlocks.
const (
	claimSpreadBlocks = 4
	claimSpreadMax    = 100
)

// ClaimBatch claims up to k of the best runnable jobs in two round trips
// instead of k: it reads candidates in claim order, then stamps up to k of
// them, those still as it read them, with one updateMany. It returns the
// jobs it claimed, none and no error when there is nothing to claim.
//
// All jobs of one batch share the batch's fresh lease token. Every write by
// the holder is fenced on {_id, state: running, leaseToken}, so each job's
// fence is still its own: the token is never reused by another claim, and a
// job re-claimed by anyone else gets a new one. (A token per job would
// need a pipeline update mapping each _id to its token: a larger command
// for no stronger fence, and one that not every server runs, server.go.)
//
// The updateMany matches each candidate on its id, its attempt and its
// updatedAt as read (an $or of them), on top of the claim filter: a job
// that anyone touched in between (claimed, failed, reaped, released) does
// not match, so when every candidate matched the documents are exactly
// those read, and the claimed jobs are built from them with no third round
// trip. (One updateMany, rather than a bulkWrite of an updateOne per job:
// the update is sent and planned once, on the _id index, where a bulkWrite
// repeats both per job; and a server that looks up only a lone {_id} by
// its index (server.go) scans the collection once rather than per job.)
// When only some matched (another worker won a race for the rest), a
// third query reads back those carrying this batch's token. When none
// matched, the claim stamps the next block of the candidates it read (it
// reads claimWindow blocks), so that two workers that read the same
// candidates split them rather than one of them reading again. k == 1 is
// Claim.
//
// Every job the call stamps carries p.Token (or a fresh token). On an
// error it returns no job, though some may have been stamped (a stamp or a
// read-back whose reply was lost): ReleaseClaim(p.Token) gives them back.
func (s *Store) ClaimBatch(ctx context.Context, p ClaimParams, k int) ([]*jobs.Job, error) {
	if k < 1 {
		return nil, fmt.Errorf("store: claim batch: k is %d, must be at least 1", k)
	}
	p = p.withToken()
	if k == 1 {
		return asBatch(s.Claim(ctx, p))
	}
	if len(p.Queues) == 0 || len(p.Kinds) == 0 {
		return nil, errors.New("store: claim needs at least one queue and one kind")
	}
	claimed, err := s.claimUnpaused(ctx, p, func(pq ClaimParams) ([]*jobs.Job, error) {
		claimed, handled, err := s.claimUnderRates(ctx, pq, k)
		if !handled {
			claimed, err = s.claimBatchTries(ctx, pq, k)
		}
		return claimed, err
	})
	if err == nil && s.completions != nil && len(claimed) > 1 {
		s.completions.claimedTogether(claimed[0].LeaseToken, len(claimed))
	}
	return claimed, err
}

// asBatch is the reply of a single claim as a batch claim's.
func asBatch(j *jobs.Job, err error) ([]*jobs.Job, error) {
	if j == nil || err != nil {
		return nil, err
	}
	return []*jobs.Job{j}, nil
}

// claimBatchTries is ClaimBatch from the queues of p as given: a claim
// that lost its whole block to another worker tries again.
func (s *Store) claimBatchTries(ctx context.Context, p ClaimParams, k int) ([]*jobs.Job, error) {
	for range claimBatchTries {
		claimed, raced, err := s.claimBatchOnce(ctx, p, k, nil)
		if errors.Is(err, errMalformedCandidate) || isTypeMismatch(err) {
			// A hand-written job with a field of the wrong type is among the
			// candidates: a single claim buries such jobs and goes on.
			return asBatch(s.Claim(ctx, p))
		}
		if err != nil {
			return nil, err
		}
		if len(claimed) > 0 || !raced {
			return claimed, nil
		}
	}
	return nil, nil
}

// errMalformedCandidate: a candidate of a batch claim does not decode.
var errMalformedCandidate = errors.New("malformed job document")

func isTypeMismatch(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(errTypeMismatch)
}

// cacheTakes is how many times a claim under limits takes candidates
// from the cache (candidates.go), each up to its window, while none it
// took is stamped (others of this client's peers took them first),
// before it reads.
const cacheTakes = 2

// claimFromCache stamps, under limits, candidates left by an earlier read
// (candidates.go), at most cacheTakes takes of them: no read when one of
// them is stamped. Nothing claimed: the caller reads candidates.
func (s *Store) claimFromCache(ctx context.Context, p ClaimParams, t time.Time, k, window int, sp *slotPicker) ([]*jobs.Job, error) {
	for range cacheTakes {
		taken, gen := s.cands.take(p, k*window)
		if len(taken) == 0 {
			return nil, nil
		}
		before := sp.snapshot()
		cands, asRead := split(taken)
		claimed, err := s.stampCandidates(ctx, p, t, k, cands, asRead, sp)
		if err != nil {
			return nil, err
		}
		back := unsent(taken, sp)
		s.cands.putBack(gen, back)
		if epoch, ok := s.cands.startRefill(); ok {
			s.refill(p, max(k*window, s.cands.window()), epoch)
		}
		if len(claimed) > 0 {
			return claimed, nil
		}
		// None was stamped (taken by others since, or changed), so no
		// slot was taken either: those sent a stamp are dropped, and the
		// claim tries the next, or reads as without the cache.
		sp.restore(before)
		if len(back) == len(taken) {
			return nil, nil // none could be sent a stamp: their limits are full
		}
	}
	return nil, nil
}

// decodeCandidates decodes the candidates docs read at t. One that does
// not decode (another application wrote it) is an error wrapping
// errMalformedCandidate, for the caller to fall back on single claims;
// under limits, where there is no single claim to fall back on (it would
// need the job's slot), it is buried here.
func (s *Store) decodeCandidates(ctx context.Context, docs []bson.Raw, t time.Time, underLimits bool) ([]candidate, error) {
	cs := make([]candidate, 0, len(docs))
	for _, d := range docs {
		var j jobs.Job
		if err := bson.Unmarshal(d, &j); err != nil {
			if !underLimits {
				return nil, fmt.Errorf("store: claim batch: candidate %v: %w: %w", d.Lookup("_id"), errMalformedCandidate, err)
			}
			if berr := s.buryCandidate(ctx, d, t, err); berr != nil {
				return nil, fmt.Errorf("store: claim batch: candidate %v: %w (and marking it dead: %w)", d.Lookup("_id"), err, berr)
			}
			continue
		}
		cs = append(cs, candidateOf(&j, d))
	}
	return cs, nil
}

// claimBatchOnce makes one attempt of ClaimBatch. raced reports that
// others claimed first all the candidates it found, and that there may be
// more beyond them. With limits (sp not nil), the candidates of a limit are
// stamped one by one, each with free slots of sp (limit.go).
func (s *Store) claimBatchOnce(ctx context.Context, p ClaimParams, k int, sp *slotPicker) (claimed []*jobs.Job, raced bool, err error) {
	t := s.Now()
	window := claimWindow
	if p.Spread {
		window = max(claimWindow, min(claimSpreadBlocks, claimSpreadMax/k))
	}
	// Under limits, candidates left by an earlier read (candidates.go)
	// first: no read when one of them is stamped.
	cache := sp != nil && sp.binds(k*window) && s.cacheable(p)
	if cache {
		if claimed, err := s.claimFromCache(ctx, p, t, k, window, sp); len(claimed) > 0 || err != nil {
			return claimed, false, err
		}
	}
	limit := k * window
	if cache {
		limit = max(limit, s.cands.window())
	}
	docs, sent, took, err := s.readCandidates(ctx, p, t, limit)
	if err != nil {
		return nil, false, fmt.Errorf("store: claim batch: %w", err)
	}
	if len(docs) == 0 {
		if cache {
			s.cands.fill(p, nil, sent, took)
		}
		return nil, false, nil
	}

	cs, err := s.decodeCandidates(ctx, docs, t, sp != nil)
	if err != nil {
		return nil, false, err
	}
	if len(cs) == 0 {
		return nil, true, nil
	}
	tried := min(len(cs), k*window)
	var gen uint64
	if cache {
		// The candidates beyond the claim's window wait for the next
		// claims; those within it that are sent no stamp join them.
		gen = s.cands.fill(p, cs[tried:], sent, took)
	}
	cands, asRead := split(cs[:tried])
	claimed, err = s.stampCandidates(ctx, p, t, k, cands, asRead, sp)
	if err != nil {
		return nil, false, err
	}
	if cache {
		s.cands.putBack(gen, unsent(cs[:tried], sp))
	}
	if len(claimed) > 0 {
		return claimed, false, nil
	}
	// Every block was taken. Read again only if this read was cut at its
	// limit: otherwise it saw every runnable job, and others have them.
	return nil, len(docs) == limit, nil
}

// stampCandidates stamps, for a batch claim with params p at t, the
// candidates cands (read as asRead, in claim order) block of k by block,
// until a block has a job still as read, and returns the jobs it claimed:
// none when every block was taken. With limits (sp not nil), the jobs of a
// limit are stamped one by one with free slots of sp (limit.go).
func (s *Store) stampCandidates(ctx context.Context, p ClaimParams, t time.Time, k int, cands []*jobs.Job, asRead bson.A, sp *slotPicker) ([]*jobs.Job, error) {
	if s.betweenReadAndStamp != nil {
		s.betweenReadAndStamp()
	}
	blocks := (len(cands) + k - 1) / k
	first := 0
	if p.Spread {
		first = s.pickFirstBlock(cands, k)
	}
	for b := range blocks {
		from := ((first + b) % blocks) * k
		to := min(from+k, len(cands))
		stamp := s.stampBlock
		if sp != nil {
			stamp = func(ctx context.Context, p ClaimParams, t time.Time, block []*jobs.Job, asRead bson.A) ([]*jobs.Job, bool, error) {
				return s.stampUnderLimits(ctx, p, t, block, asRead, sp)
			}
		}
		claimed, matched, err := stamp(ctx, p, t, cands[from:to], asRead[from:to])
		if err != nil {
			return nil, err
		}
		if !matched {
			continue // another worker took this block: try the next
		}
		return claimed, nil
	}
	return nil, nil
}

// stampBlock stamps, for a batch claim with params p at t, those jobs of
// block that are still as asRead says they were read, with one updateMany.
// matched is false when none were. It returns the jobs it stamped.
func (s *Store) stampBlock(ctx context.Context, p ClaimParams, t time.Time, block []*jobs.Job, asRead bson.A) (claimed []*jobs.Job, matched bool, err error) {
	token := p.Token
	ids := make(bson.A, len(block))
	for i, j := range block {
		ids[i] = j.ID
	}
	// The ids first (server.go: a server that scans then rejects all but
	// the block's jobs on the first key, not after the $or).
	match := append(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, claimFilter(p, t)...)
	match = append(match, bson.E{Key: "$or", Value: asRead})
	res, err := s.coll.UpdateMany(ctx, match, claimUpdate(p, t, token))
	if err == nil && s.afterStamp != nil {
		err = s.afterStamp()
	}
	if err != nil {
		// Some jobs may be ours, stamped with token: the caller's
		// ReleaseClaim (or else the reaper) frees them.
		return nil, false, fmt.Errorf("store: claim batch: %w", err)
	}
	switch {
	case res.MatchedCount == 0:
		return nil, false, nil
	case int(res.MatchedCount) == len(block):
		for _, j := range block {
			stampClaim(j, p, t, token)
		}
		return block, true, nil
	}
	claimed, err = s.readBack(ctx, block, token)
	return claimed, true, err
}

// stampUnderLimits stamps the jobs of block as stampBlock does, but for
// those under a limit of sp, which it stamps one by one with free slots.
// matched is false when none was stamped.
func (s *Store) stampUnderLimits(ctx context.Context, p ClaimParams, t time.Time, block []*jobs.Job, asRead bson.A, sp *slotPicker) (claimed []*jobs.Job, matched bool, err error) {
	var free []*jobs.Job
	var freeRead bson.A
	var limited []int
	for i, j := range block {
		if sp.limited(j.Kind, j.Queue) {
			limited = append(limited, i)
			continue
		}
		free = append(free, j)
		freeRead = append(freeRead, asRead[i])
	}
	if len(free) > 0 {
		for _, j := range free {
			sp.markSent(j.ID)
		}
		claimed, matched, err = s.stampBlock(ctx, p, t, free, freeRead)
		if err != nil {
			return nil, false, err
		}
	}
	if len(limited) > 0 {
		lb := make([]*jobs.Job, len(limited))
		lr := make(bson.A, len(limited))
		for n, i := range limited {
			lb[n], lr[n] = block[i], asRead[i]
		}
		got, err := s.stampLimited(ctx, p, t, lb, lr, sp)
		if err != nil {
			// The jobs stamped so far carry the token: the caller's
			// ReleaseClaim gives them back.
			return nil, false, err
		}
		claimed = append(claimed, got...)
		matched = matched || len(got) > 0
	}
	slices.SortStableFunc(claimed, claimOrder)
	return claimed, matched, nil
}

// claimOrder compares two jobs in claim order (claimSort).
func claimOrder(a, b *jobs.Job) int {
	if a.Priority != b.Priority {
		return b.Priority - a.Priority
	}
	if c := a.RunAt.Compare(b.RunAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// pickFirstBlock picks the block of k that a spread batch claim tries
// first: one at random among the full blocks of cands whose jobs all have
// the priority of the best, so that no job is taken before one of a higher
// priority. With fewer than two such blocks it is the first.
func (s *Store) pickFirstBlock(cands []*jobs.Job, k int) int {
	top := FirstPriorityRun(len(cands), func(i int) int { return cands[i].Priority })
	n := top / k
	if n < 2 {
		return 0
	}
	if s.hooks != nil {
		if i, ok := s.hooks.PickBlock(n); ok {
			return i
		}
	}
	return rand.IntN(n)
}

// FirstPriorityRun is how many of n jobs in claim order, whose priorities
// priority gives, share the first one's priority: those a spread claim or
// hand-off picks among at random (a job of a lower priority never goes
// before one of a higher).
func FirstPriorityRun(n int, priority func(i int) int) int {
	top := min(n, 1)
	for top < n && priority(top) == priority(0) {
		top++
	}
	return top
}

// readBack reads which of the candidates in block a batch claim stamped
// with token.
func (s *Store) readBack(ctx context.Context, block []*jobs.Job, token string) ([]*jobs.Job, error) {
	ids := make(bson.A, len(block))
	for i, j := range block {
		ids[i] = j.ID
	}
	if s.hooks != nil {
		if err := s.hooks.BeforeReadBack(); err != nil {
			return nil, fmt.Errorf("store: claim batch: read back claimed jobs: %w", err)
		}
	}
	// One at a time: a job that does not decode is left running with this
	// batch's token, which no one will renew, and the reaper buries it.
	ours := bson.D{
		{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}},
		{Key: "state", Value: jobs.StateRunning},
		{Key: "leaseToken", Value: token},
	}
	var claimed []*jobs.Job
	err := eachFound(ctx, s.coll, ours, options.Find().SetSort(claimSort), func(d bson.Raw) error {
		var j jobs.Job
		if err := bson.Unmarshal(d, &j); err != nil {
			s.log.Warn("claim batch: a claimed job does not decode; the reaper will bury it", zap.Any("job_id", d.Lookup("_id")), zap.Error(err))
			return nil
		}
		claimed = append(claimed, &j)
		return nil
	})
	if err != nil {
		// The jobs are ours but we cannot know which (or, of those read so
		// far, one call gives all or none): the caller's ReleaseClaim (or
		// else the reaper) frees them.
		return nil, fmt.Errorf("store: claim batch: read back claimed jobs: %w", err)
	}
	return claimed, nil
}

// rawValue is d's field as a filter's "as read" (AsRead).
func rawValue(d bson.Raw, field string) any { return AsRead(storedValue(d, field)) }

// storedValue is d's field, or a null, which matches it missing.
func storedValue(d bson.Raw, field string) bson.RawValue {
	v, err := d.LookupErr(field)
	if err != nil {
		return bson.RawValue{Type: bson.TypeNull}
	}
	return v
}

// AsRead is v, a value a read found, as a filter's value that matches it.
// A regex, or a document whose first key starts with "$" (docket writes
// neither; another app may), is matched by its type: given as
// it is, a regex would match as a pattern (an invalid one failing every
// write) and such a document be read as operators, so that the write
// fenced on it would never match. ({$eq: regex} would be exact on
// MongoDB, but FerretDB v1 drops the connection on it.) Any write of
// docket's there changes the type, so the fence holds against docket's
// own writes; another app's write of another regex passes it.
func AsRead(v bson.RawValue) any {
	if literal(v) {
		return v
	}
	switch v.Type {
	case bson.TypeRegex:
		return bson.D{{Key: "$type", Value: "regex"}}
	case bson.TypeUndefined:
		return bson.D{{Key: "$type", Value: int32(bson.TypeUndefined)}}
	}
	return bson.D{{Key: "$type", Value: "object"}}
}

// literal reports whether v, given as a filter's value (or in an $in or
// $nin list), matches itself: all but a regex (a pattern there), a
// document whose first key starts with "$" (operators there) and
// undefined (which MongoDB refuses to compare).
func literal(v bson.RawValue) bool {
	switch v.Type {
	case bson.TypeRegex, bson.TypeUndefined:
		return false
	case bson.TypeEmbeddedDocument:
		e, err := v.Document().IndexErr(0)
		return err != nil || !strings.HasPrefix(e.Key(), "$")
	}
	return true
}

// stampClaim makes j what claimUpdate made of its document.
func stampClaim(j *jobs.Job, p ClaimParams, t time.Time, token string) {
	expires, hb := t.Add(p.Lease), t
	j.State = jobs.StateRunning
	j.Owner = p.Owner
	j.LeaseToken = token
	j.LeaseExpiresAt = &expires
	j.HeartbeatAt = &hb
	j.UpdatedAt = t
	j.Attempt++
	j.Progress = nil
}

// CompleteMany marks succeeded every job that its lease in ls still holds,
// with one updateMany whose filter is an $or of each job's own fence
// ({_id, state: running, leaseToken}), and returns the leases that no longer
// held their job (as Complete would have returned jobs.ErrLeaseLost for them).
// On an error, which jobs were completed is unknown (ErrOutcomeUnknown
// when the updateMany was applied and only reading which matched failed;
// that read has readBackTimeout of its own): a retry with the same
// leases gives the outcome one call would have (each fence matches at most
// once; a job already succeeded with its lease's token is not lost).
//
// One updateMany rather than a bulkWrite of fenced updateOnes, as in
// ClaimBatch: sent, planned (and on a server that scans, run) once.
func (s *Store) CompleteMany(ctx context.Context, ls []Lease) (lost []Lease, err error) {
	if len(ls) == 0 {
		return nil, nil
	}
	t := s.Now()
	fences := make(bson.A, len(ls))
	ids := make(bson.A, len(ls))
	for i, l := range ls {
		fences[i] = fence(l)
		ids[i] = l.JobID
	}
	// The ids first: 0.9 s less per flush at 20,000 jobs on a server that
	// scans (server.go).
	res, err := s.coll.UpdateMany(ctx, bson.D{
		{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}},
		{Key: "$or", Value: fences},
	}, Finish(jobs.StateSucceeded, t))
	if err != nil {
		return nil, fmt.Errorf("store: complete %d jobs: %w", len(ls), err)
	}
	if int(res.MatchedCount) == len(ls) {
		return nil, nil
	}
	// Some fences matched nothing: find out which. A job completed with
	// its lease, by this call or by an earlier try of it whose reply was
	// lost, is succeeded and still carries the token; no one else writes
	// that pair. So a retry after an error has the same outcome as one
	// call that got its reply.
	//
	// The read gets time of its own, as a single finishing write's does:
	// the updateMany may have used up the caller's (a loaded server), and
	// without the read every completion of the batch would be unknown.
	if s.hooks != nil {
		s.hooks.BeforeCompleteReadBack()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.readBackWait())
	defer cancel()
	done := map[string]string{}
	proj := options.Find().SetProjection(bson.D{{Key: "state", Value: 1}, {Key: "leaseToken", Value: 1}})
	err = eachFound(rctx, s.coll, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, proj, func(d bson.Raw) error {
		id, _ := d.Lookup("_id").StringValueOK()
		state, _ := d.Lookup("state").StringValueOK()
		token, _ := d.Lookup("leaseToken").StringValueOK()
		if jobs.State(state) == jobs.StateSucceeded {
			done[id] = token
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: complete %d jobs: find the lost leases: %w: %w", len(ls), ErrOutcomeUnknown, err)
	}
	for _, l := range ls {
		if tok, ok := done[l.JobID]; !ok || tok != l.Token {
			lost = append(lost, l)
		}
	}
	return lost, nil
}

// DefaultCompleteLinger is how long a batched completion waits for others
// to join it before it is written.
const DefaultCompleteLinger = 2 * time.Millisecond

// completeTimeout bounds one flush of batched completions.
const completeTimeout = 10 * time.Second

// WithBatchedCompletion returns a Store like s whose Complete joins
// concurrent completions into one CompleteMany (group commit): the first
// waits linger for others, then one updateMany writes them all, and each
// caller learns its own job's outcome, with the same errors as Complete.
// Completions arriving while a flush is in flight go in the next one.
// Only completions that come together are grouped: the jobs of one batch
// claim made through this client, and others once more than completeAlone
// are in flight at once, until loneFlushes flushes in a row wrote one
// each. Otherwise (a trickle of jobs) each is written at once by its
// caller, as without batching, beside any flush in flight. The other
// methods are s's.
func (s *Store) WithBatchedCompletion(linger time.Duration) *Store {
	b := *s
	b.completions = &completer{store: s, linger: linger}
	return &b
}

// completer gathers Complete calls into CompleteMany flushes.
type completer struct {
	store  *Store // without batching
	linger time.Duration

	mu       sync.Mutex
	pending  []pendingCompletion
	flushing bool
	together bool // completions come together (see loneFlushes)
	lone     int  // flushes in a row that wrote one completion
	alone    int  // completions being written one by one

	// batches counts, per token of a batch claim of this client, the jobs
	// of the batch not yet completed: they started together, so they
	// likely end together, and the first of them waits for the others
	// rather than being written alone. At most maxBatchTokens are kept,
	// the oldest dropped first (jobs that failed or were released never
	// complete).
	batches map[string]int
	tokens  []string // of batches, oldest first
}

// loneFlushes is how many flushes in a row must write one completion each
// before completions are taken to come one at a time again: a straggler
// of a burst makes one, a trickle makes them in a row.
const loneFlushes = 3

type pendingCompletion struct {
	lease    Lease
	deadline time.Time  // the caller's; zero: none
	done     chan error // buffered: a caller that gave up does not block the flush
}

// completeAlone is how many completions may be written one by one at once
// before the next waits to be written with others. A trickle at tens of
// jobs per second has one or two in flight, now and then three: each
// written at once, none waiting behind a flush.
const completeAlone = 4

// maxBatchTokens bounds the batch claims a completer remembers.
const maxBatchTokens = 64

// claimedTogether records that a batch claim took n jobs under token.
func (c *completer) claimedTogether(token string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.batches == nil {
		c.batches = map[string]int{}
	}
	if _, ok := c.batches[token]; !ok {
		c.tokens = append(c.tokens, token)
	}
	c.batches[token] = n
	for len(c.tokens) > maxBatchTokens {
		delete(c.batches, c.tokens[0])
		c.tokens = c.tokens[1:]
	}
}

// ofBatch reports whether the job of lease l was claimed with others that
// have not completed yet, and counts its completion. b.mu is held.
func (c *completer) ofBatch(l Lease) bool {
	n, ok := c.batches[l.Token]
	if !ok {
		return false
	}
	if n <= 1 {
		delete(c.batches, l.Token)
		c.tokens = slices.DeleteFunc(c.tokens, func(t string) bool { return t == l.Token })
		return false
	}
	c.batches[l.Token] = n - 1
	return true
}

// complete completes the job of lease l, and returns it as the write left
// it when read and the write was its own (CompleteReading).
func (c *completer) complete(ctx context.Context, l Lease, read bool) (bson.Raw, error) {
	c.mu.Lock()
	if !c.ofBatch(l) && !c.together && c.alone < completeAlone {
		// Completions come one at a time (a trickle of jobs): each is
		// written at once, as without batching.
		c.alone++
		c.mu.Unlock()
		var doc bson.Raw
		var err error
		if read {
			doc, err = c.store.CompleteReading(ctx, l)
		} else {
			err = c.store.Complete(ctx, l)
		}
		c.mu.Lock()
		c.alone--
		c.mu.Unlock()
		return doc, err
	}
	c.together = true
	p := pendingCompletion{lease: l, done: make(chan error, 1)}
	p.deadline, _ = ctx.Deadline()
	c.pending = append(c.pending, p)
	start := !c.flushing
	c.flushing = true
	c.mu.Unlock()
	if start {
		go c.flush()
	}
	select {
	case err := <-p.done:
		return nil, err
	case <-ctx.Done():
		return nil, fmt.Errorf("store: complete job %s: %w", l.JobID, ctx.Err())
	}
}

// flushDeadline bounds the flush of batch by the last deadline of its
// callers (a worker's follows the job's lease), or completeTimeout when one
// of them has none: a flush whose reply is slow must not outlive every
// caller and hold back the completions behind it (their callers' retries
// among them), nor be given up while its callers still wait for it.
func flushDeadline(batch []pendingCompletion) time.Time {
	var latest time.Time
	for _, p := range batch {
		if p.deadline.IsZero() {
			return time.Now().Add(completeTimeout)
		}
		if p.deadline.After(latest) {
			latest = p.deadline
		}
	}
	return latest
}

// flush writes pending completions until none are left.
func (c *completer) flush() {
	c.mu.Lock()
	linger := c.together
	c.mu.Unlock()
	if linger {
		time.Sleep(c.linger)
	}
	for {
		c.mu.Lock()
		batch := c.pending
		c.pending = nil
		if len(batch) == 0 {
			c.flushing = false
			c.mu.Unlock()
			return
		}
		if len(batch) > 1 {
			c.lone = 0
		} else if c.lone++; c.lone >= loneFlushes {
			c.together = false
		}
		c.mu.Unlock()

		ls := make([]Lease, len(batch))
		for i, p := range batch {
			ls[i] = p.lease
		}
		ctx, cancel := context.WithDeadline(context.Background(), flushDeadline(batch))
		lost, err := c.store.CompleteMany(ctx, ls)
		cancel()
		isLost := make(map[Lease]bool, len(lost))
		for _, l := range lost {
			isLost[l] = true
		}
		for _, p := range batch {
			switch {
			case err != nil:
				p.done <- fmt.Errorf("store: complete job %s: %w", p.lease.JobID, err)
			case isLost[p.lease]:
				p.done <- fmt.Errorf("store: complete job %s: %w", p.lease.JobID, jobs.ErrLeaseLost)
			default:
				p.done <- nil
			}
		}
	}
}
