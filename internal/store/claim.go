package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// ClaimParams say which jobs a worker may claim and for how long.
type ClaimParams struct {
	// Owner is the claiming worker's id.
	Owner string
	// Queues are the queues the worker serves.
	Queues []string
	// Kinds are the kinds the worker has handlers for.
	Kinds []string
	// Lease is how long the claim holds the job unless renewed.
	Lease time.Duration
	// Token is the lease token the claim stamps on the jobs it takes. It
	// must be fresh for each call, never reused: a caller that makes its
	// own (a worker does) knows it before the claim is sent, so after an
	// error, when the server may have applied the claim and lost its reply,
	// ReleaseClaim finds and gives back the jobs that carry it. Empty: a
	// fresh one is made.
	Token string
	// Spread makes a batch claim take a block of k picked at random among
	// the best candidates of the highest priority it read (up to
	// claimSpreadBlocks blocks), rather than the first k, so that worker
	// processes claiming at once take different jobs instead of racing
	// for the same ones. Jobs of one priority then start in claim order
	// only roughly (within a few batches); a job of a lower priority is
	// never taken before one of a higher. Single claims ignore it.
	Spread bool
	// RestPollMin and RestPollMax, when set (a worker's PollMin and
	// PollMax), pace the part of a claim under rate limits that no rate
	// applies to (the rest: kinds and queues without one): once it found
	// nothing, it is claimed again only after a wait that grows from
	// RestPollMin to RestPollMax while it keeps finding nothing, as an
	// idle worker polls, not at every start a rate allows (20 times a
	// second at 20/s, each an empty claim). Zero: claimed every time.
	RestPollMin, RestPollMax time.Duration
	// Ahead is how many of the jobs a batch claim asks for the caller
	// holds ahead, to start once a run slot frees (a worker's claims
	// ahead, see worker.Config.Prefetch): jobs under a rate limit are
	// claimed only for the others, which start at once, since a rate
	// bounds when handlers start and a start is reserved at the claim
	// (rate.go). Zero: every job claimed starts at once.
	Ahead int

	// skip leaves saturated partitions out of the claim (partition.go).
	skip []partSkip
	// ids, when set, restricts the claim to these jobs: those a claim
	// under a partitioned rate reserved starts for (ratepart.go).
	ids []string
}

// withToken returns p with a fresh token unless it has one.
func (p ClaimParams) withToken() ClaimParams {
	if p.Token == "" {
		p.Token = uuid.NewString()
	}
	return p
}

// Lease identifies one claim of a job: every write by the holder is fenced
// on it.
type Lease struct {
	// JobID is the claimed job.
	JobID string
	// Token is the claim's fresh token.
	Token string
}

// claimSort is the claim order: highest priority, then longest runnable,
// then oldest.
var claimSort = bson.D{{Key: "priority", Value: -1}, {Key: "runAt", Value: 1}, {Key: "_id", Value: 1}}

// Claim takes the best runnable job with one atomic findAndModify, stamping
// it running with p.Owner, p.Token (or a fresh token) and a lease expiry
// of p.Lease from when the claim was sent. It returns nil and no error when
// there is nothing to claim. On an error the server may still have applied
// the claim: the job then carries p.Token (see ReleaseClaim).
func (s *Store) Claim(ctx context.Context, p ClaimParams) (*jobs.Job, error) {
	if len(p.Queues) == 0 || len(p.Kinds) == 0 {
		return nil, errors.New("store: claim needs at least one queue and one kind")
	}
	p = p.withToken()
	claimed, err := s.claimUnpaused(ctx, p, func(pq ClaimParams) ([]*jobs.Job, error) {
		return asBatch(s.claimOneUnderLimits(ctx, pq))
	})
	if len(claimed) == 0 {
		return nil, err
	}
	return claimed[0], err
}

// claimUnpaused runs claim on the queues of p that are not paused, at most
// twice: a claim made with a stale set of paused queues that took a job of
// a queue paused since gives its jobs back and claims again with the set
// it read (pause.go).
func (s *Store) claimUnpaused(ctx context.Context, p ClaimParams, claim func(ClaimParams) ([]*jobs.Job, error)) ([]*jobs.Job, error) {
	for range 2 {
		qs, stale := s.unpaused(ctx, p.Queues)
		if len(qs) == 0 { // every queue is paused
			return nil, nil
		}
		pq := p
		pq.Queues = qs
		claimed, err := claim(pq)
		if len(claimed) == 0 || err != nil || !stale {
			return claimed, err
		}
		ok, err := s.confirmUnpaused(ctx, claimed)
		if err != nil {
			return nil, err
		}
		if ok {
			return claimed, nil
		}
	}
	return nil, nil
}

// claimOneUnderLimits is Claim from the queues of p as given: under the
// limits that apply to p (limit.go), or else with claimOne.
func (s *Store) claimOneUnderLimits(ctx context.Context, p ClaimParams) (*jobs.Job, error) {
	claimed, handled, err := s.claimUnderRates(ctx, p, 1)
	if !handled {
		return s.claimOne(ctx, p)
	}
	if len(claimed) == 0 || err != nil {
		return nil, err
	}
	return claimed[0], nil
}

// claimOne is Claim's findAndModify, from the queues of p as given.
func (s *Store) claimOne(ctx context.Context, p ClaimParams) (*jobs.Job, error) {
	t := s.Now()
	filter := claimFilter(p, t)
	update := claimUpdate(p, t, p.Token)
	opts := options.FindOneAndUpdate().SetSort(claimSort).SetReturnDocument(options.After)
	// A document that an app wrote by hand with a field of the wrong type
	// must not block the queue: it is buried (dead, with what is wrong) and
	// the claim goes on to the next job.
	for range maxBuried + 1 {
		raw, err := s.coll.FindOneAndUpdate(ctx, filter, update, opts).Raw()
		if err == nil && s.hooks != nil {
			err = s.hooks.AfterClaim()
		}
		if errors.Is(err, mongo.ErrNoDocuments) {
			return nil, nil
		}
		var se mongo.ServerError
		if errors.As(err, &se) && se.HasErrorCode(errTypeMismatch) {
			// $inc met a non-numeric attempt: nothing was claimed.
			if n, berr := s.buryBadAttempts(ctx, filter, t); berr != nil || n == 0 {
				return nil, fmt.Errorf("store: claim: %w", err)
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("store: claim: %w", err)
		}
		var j jobs.Job
		if derr := bson.Unmarshal(raw, &j); derr != nil {
			if berr := s.buryMalformed(ctx, raw, t, derr); berr != nil {
				return nil, fmt.Errorf("store: claim: %w (and marking it dead: %w)", derr, berr)
			}
			continue
		}
		return &j, nil
	}
	return nil, nil
}

// maxBuried bounds how many malformed jobs one claim buries before it
// returns; the next claim goes on.
const maxBuried = 10

// errTypeMismatch is the server's code for an update applied to a field of
// the wrong type.
const errTypeMismatch = 14

// malformed is the start of the message a malformed job dies with.
const malformed = "malformed job document (see the job document in the README): "

// buryMalformed sends the job in raw, which this claim has just stamped
// running but which does not decode, to dead with the decoding error. The
// write is fenced on the claim's lease token.
func (s *Store) buryMalformed(ctx context.Context, raw bson.Raw, t time.Time, cause error) error {
	id := raw.Lookup("_id")
	token, _ := raw.Lookup("leaseToken").StringValueOK()
	owner, _ := raw.Lookup("owner").StringValueOK()
	attempt, _ := raw.Lookup("attempt").AsInt64OK()
	msg := malformed + cause.Error()
	errs := bson.A{jobs.AttemptError{Attempt: int(attempt), At: t, Owner: owner, Message: msg}}
	_, err := s.coll.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: id}, {Key: "state", Value: jobs.StateRunning}, {Key: "leaseToken", Value: token}},
		Finish(jobs.StateDead, t, bson.E{Key: "errors", Value: errs}))
	if err == nil {
		s.cfg.Logger.Warn("buried a malformed job: dead without running", zap.Any("job_id", id), zap.String("error", msg))
	}
	return err
}

// buryCandidate sends raw, an available job read by a claim that does not
// decode, to dead with the decoding error, fenced on its state and
// updatedAt as read.
func (s *Store) buryCandidate(ctx context.Context, raw bson.Raw, t time.Time, cause error) error {
	id := raw.Lookup("_id")
	msg := malformed + cause.Error()
	_, err := s.coll.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: id}, {Key: "state", Value: jobs.StateAvailable}, {Key: "updatedAt", Value: rawValue(raw, "updatedAt")}},
		Finish(jobs.StateDead, t, bson.E{Key: "errors", Value: bson.A{jobs.AttemptError{At: t, Message: msg}}}))
	if err == nil {
		s.cfg.Logger.Warn("buried a malformed job: dead without running", zap.Any("job_id", id), zap.String("error", msg))
	}
	return err
}

// buryBadAttempts sends to dead the claimable jobs whose attempt is not a
// number, which a claim's $inc cannot count, and returns how many.
func (s *Store) buryBadAttempts(ctx context.Context, filter bson.D, t time.Time) (int, error) {
	bad := append(bson.D{}, filter...)
	bad = append(bad, bson.E{Key: "attempt", Value: bson.D{{Key: "$exists", Value: true}, {Key: "$not", Value: bson.D{{Key: "$type", Value: "number"}}}}})
	cur, err := s.coll.Find(ctx, bad, options.Find().SetLimit(maxBuried).SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "attempt", Value: 1}}))
	if err != nil {
		return 0, err
	}
	var docs []bson.Raw
	if err := cur.All(ctx, &docs); err != nil {
		return 0, err
	}
	n := 0
	for _, d := range docs {
		id, attempt := d.Lookup("_id"), d.Lookup("attempt")
		msg := fmt.Sprintf("%sattempt: %s %s is not a number", malformed, attempt.Type, attempt)
		res, err := s.coll.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: id}, {Key: "state", Value: jobs.StateAvailable}, {Key: "attempt", Value: AsRead(attempt)}},
			Finish(jobs.StateDead, t, bson.E{Key: "errors", Value: bson.A{jobs.AttemptError{At: t, Message: msg}}}))
		if err != nil {
			return n, err
		}
		if res.MatchedCount == 1 {
			n++
			s.cfg.Logger.Warn("buried a malformed job: dead without running", zap.Any("job_id", id), zap.String("error", msg))
		}
	}
	return n, nil
}

// ReleaseClaim gives back, as if they had never been claimed, the jobs that
// a claim with token stamped and that are still running under it: a claim
// (or batch claim) that returned an error may have been applied by the
// server with its reply lost, leaving jobs that no worker runs. Each is
// released as Release does, fenced on {_id, state: running, token}: the
// attempt is not counted, no error is recorded, and the job is available
// at once (or cancelled, when a cancel was requested). It returns how many
// it released. Call it only for a claim whose jobs were not handed to a
// handler.
func (s *Store) ReleaseClaim(ctx context.Context, token string) (int, error) {
	if token == "" {
		return 0, errors.New("store: release claim: empty token")
	}
	ours := bson.D{{Key: "state", Value: jobs.StateRunning}, {Key: "leaseToken", Value: token}}
	var ids []string
	if err := eachFound(ctx, s.coll, ours, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}), func(d bson.Raw) error {
		if id, ok := d.Lookup("_id").StringValueOK(); ok {
			ids = append(ids, id)
		}
		return nil
	}); err != nil {
		return 0, fmt.Errorf("store: release claim %s: %w", token, err)
	}
	n := 0
	for _, id := range ids {
		err := s.Release(ctx, Lease{JobID: id, Token: token})
		switch {
		case errors.Is(err, jobs.ErrLeaseLost):
			// Reaped, or cancelled meanwhile. (A release by an earlier try
			// whose reply was lost returns nil: Release reads it back.)
		case err != nil:
			return n, fmt.Errorf("store: release claim %s: %w", token, err)
		default:
			n++
			s.log.Info("released a job whose claim returned an error: not run, attempt not counted",
				zap.String("job_id", id), zap.String("lease_token", token))
		}
	}
	return n, nil
}

// testHooks let tests act at the points where a real network or another
// process can: lose the reply of a write the server applied, fail a read,
// stall between a read and a write. A Store has none (nil) but in the
// tests, whose hooks (export_test.go) say what each point is. A hook's
// error is taken as the operation's.
type testHooks interface {
	AfterClaim() error
	BeforeReadBack() error
	AfterFinish(op string) error
	PickBlock(n int) (int, bool)
	ReadBackTimeout() (time.Duration, bool)
	BeforeCompleteReadBack()
	BeforeClean()
	BetweenFindAndUpdate()
	AfterRefillRead()
}

// LeaseOf returns the lease that j carries.
func LeaseOf(j *jobs.Job) Lease { return Lease{JobID: j.ID, Token: j.LeaseToken} }
