package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ClaimReleasedComment is the comment on ClaimReleased's command, which
// names it in a server's logs and profiler (and to docket's bench, which
// counts it as a claim).
const ClaimReleasedComment = "docket: release and claim"

// ClaimReleased claims for p, in one findAndModify, the blocked job id as
// it is released: matched blocked, on the caller's conditions of its
// release (blocked: the dependency protocol's, in queue) and on what a
// claim of p takes (its queues, kinds and runAt), then stamped with the
// release's fields (set, unset) and as a claim is. A chain's next task so
// runs on the worker that ran its parent, without a release and a claim.
// Only of a kind and queue of p that no flow control applies to
// (freeOfFlowControl); it returns nil, and no error, when the job does not
// match (released by another process, waiting for more, of a queue or
// kind p does not take or flow control applies to, due later): the
// caller releases it as usual, and so when the job's attempt is not a
// number (another application's: the claim that buries it is the
// usual one). After an error the job may be claimed under p.Token, which
// the caller sets: the caller gives it back (ReleaseClaim).
func (s *Store) ClaimReleased(ctx context.Context, p ClaimParams, id string, blocked, set, unset bson.D) (*jobs.Job, error) {
	if p.Token == "" {
		return nil, fmt.Errorf("store: claim released job %s: empty token (a claim lost after it applied could not be given back)", id)
	}
	if !s.freeOfFlowControl(ctx, &p) {
		return nil, nil
	}
	t := s.Now()
	filter := append(append(bson.D{{Key: "_id", Value: id}}, claimFilterIn(jobs.StateBlocked, p, t)...), blocked...)
	update := AlsoIn(AlsoIn(claimUpdate(p, t, p.Token), "$set", set...), "$unset", unset...)
	opts := options.FindOneAndUpdate().SetReturnDocument(options.After).SetComment(ClaimReleasedComment)
	raw, err := s.coll.FindOneAndUpdate(ctx, filter, update, opts).Raw()
	if err == nil && s.hooks != nil {
		err = s.hooks.AfterClaim()
	}
	if errors.Is(err, mongo.ErrNoDocuments) || isTypeMismatch(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: claim released job %s: %w", id, err)
	}
	var j jobs.Job
	if derr := bson.Unmarshal(raw, &j); derr != nil {
		if berr := s.buryMalformed(ctx, raw, t, derr); berr != nil {
			return nil, fmt.Errorf("store: claim released job %s: %w (and marking it dead: %w)", id, derr, berr)
		}
		return nil, nil
	}
	return &j, nil
}

// freeOfFlowControl narrows p to its kinds and queues that no
// concurrency limit, partitioned limit or rate applies to, as last read
// (refreshed as a claim refreshes them), and to its queues read unpaused
// within PauseRefresh; it reports whether any of each are left.
func (s *Store) freeOfFlowControl(ctx context.Context, p *ClaimParams) bool {
	totals, parts, err := s.limitsFor(ctx, *p)
	if err != nil {
		return false
	}
	rc := s.rates
	rc.mu.Lock()
	free := func(name string) bool {
		_, limited := totals[name]
		_, partitioned := parts[name]
		return !limited && !partitioned && rc.rates[name] == nil
	}
	kinds := slices.DeleteFunc(slices.Clone(p.Kinds), func(k string) bool { return !free(KindLimit(k)) })
	queues := slices.DeleteFunc(slices.Clone(p.Queues), func(q string) bool { return !free(QueueLimit(q)) })
	rc.mu.Unlock()
	queues = slices.DeleteFunc(queues, func(q string) bool { return !s.freshPauses(ctx, q) })
	p.Kinds, p.Queues = kinds, queues
	return len(kinds) > 0 && len(queues) > 0
}

// AlsoIn returns update with more added to its operator op ($set,
// $unset), update itself unchanged.
func AlsoIn(update bson.D, op string, more ...bson.E) bson.D {
	out := slices.Clone(update)
	for i, e := range out {
		if e.Key == op {
			out[i].Value = append(slices.Clone(e.Value.(bson.D)), more...)
			return out
		}
	}
	return append(out, bson.E{Key: op, Value: bson.D(more)})
}
