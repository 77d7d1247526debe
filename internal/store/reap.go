package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// ReapResult counts what one reap did.
type ReapResult struct {
	// Requeued jobs went back to available.
	Requeued int
	// Dead jobs had used up their attempts.
	Dead int
	// Cancelled jobs had a cancel requested: they end cancelled rather than
	// run again.
	Cancelled int
	// Buried jobs did not decode (a field of the wrong type, written by
	// another app): they went to dead with what is wrong, without a retry.
	Buried int
	// Skipped jobs could not be written (logged); the next pass tries again.
	Skipped int
	// Spared jobs had an expired lease but an owner alive in the workers
	// registry, and were left alone for now (see Reap).
	Spared int
}

// Settled is how many jobs the reap moved out of running.
func (r ReapResult) Settled() int { return r.Requeued + r.Dead + r.Cancelled + r.Buried }

// Add returns the sum of r and o.
func (r ReapResult) Add(o ReapResult) ReapResult {
	return ReapResult{
		Requeued:  r.Requeued + o.Requeued,
		Dead:      r.Dead + o.Dead,
		Cancelled: r.Cancelled + o.Cancelled,
		Buried:    r.Buried + o.Buried,
		Skipped:   r.Skipped + o.Skipped,
		Spared:    r.Spared + o.Spared,
	}
}

// EachRaw calls fn with every document of cur, one at a time, then closes
// it (CloseCursor), so that a document that does not decode as its caller
// expects is the caller's to handle and does not fail the others (cur.All
// into typed values would). fn gets a copy, which it may keep (the
// driver's Current is valid only until its next). An error of fn stops
// the walk and is returned.
func EachRaw(ctx context.Context, cur *mongo.Cursor, fn func(bson.Raw) error) error {
	defer CloseCursor(ctx, cur)
	for cur.Next(ctx) {
		if err := fn(slices.Clone(cur.Current)); err != nil {
			return err
		}
	}
	return cur.Err()
}

// CloseCursor closes cur, within CursorCloseTimeout even when ctx has
// ended: a read stopped by its caller's cancel or deadline sends its
// killCursors all the same, where cur.Close(ctx) would send nothing and
// leave the cursor open on the server until the server's cursor timeout
// (ten minutes on MongoDB).
func CloseCursor(ctx context.Context, cur *mongo.Cursor) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CursorCloseTimeout)
	defer cancel()
	_ = cur.Close(ctx)
}

// CursorCloseTimeout bounds CloseCursor's killCursors.
const CursorCloseTimeout = 5 * time.Second

// eachFound calls fn with each document of coll that filter matches, as
// EachRaw does; an error is the find's or the read's.
func eachFound(ctx context.Context, coll *mongo.Collection, filter bson.D, opts *options.FindOptionsBuilder, fn func(bson.Raw) error) error {
	cur, err := coll.Find(ctx, filter, opts)
	if err != nil {
		return err
	}
	return EachRaw(ctx, cur, fn)
}

// MaxSpare bounds how long past its expiry (and the reaper's grace) the
// reaper leaves a job whose owner is alive in the workers registry.
const MaxSpare = 10 * time.Minute

// Reap re-queues up to limit running jobs whose lease expired more than
// grace ago (their worker died or stalled), or sends them to dead when
// their attempts are used up, or to cancelled when someone asked them to
// stop. Each write is fenced on the lease token and expiry it read, so a
// job renewed, finished or claimed again in between is left alone, and any
// number of reapers may run at once. A job that does not decode (written
// by another app with a field of the wrong type) is buried: dead, with the
// decoding error, fenced the same way; it never stops the pass.
//
// A job whose owner is alive in the workers registry (it beat within
// WorkerMissedBeats of its beat interval, on the server's clock, as
// `docketctl workers` counts it) is spared for one more lease: its
// renewals may be stuck behind a slow server rather than stopped. It is
// reaped once its lease has been expired for grace plus its own lease
// length (leaseExpiresAt - heartbeatAt, at most MaxSpare), alive owner or
// not, so a live process never holds a stuck job forever. Only processes
// that beat in the registry (every started docket.Client does; a program
// that claims through this package alone does not) are spared for; a job
// whose owner has no entry, or one that cannot be read, is reaped. Spared
// jobs do not count against limit.
func (s *Store) Reap(ctx context.Context, grace time.Duration, limit int) (ReapResult, error) {
	var res ReapResult
	t := s.Now()
	// No limit on the find: spared jobs are passed over, so that they never
	// keep other expired jobs out of the batch; reading stops once the
	// batch is full.
	cur, err := s.coll.Find(ctx,
		bson.D{
			{Key: "state", Value: jobs.StateRunning},
			{Key: "leaseExpiresAt", Value: bson.D{{Key: "$lt", Value: t.Add(-grace)}}},
		},
		options.Find().SetProjection(bson.D{{Key: "args", Value: 0}}).SetBatchSize(int32(min(limit, 1000))))
	if err != nil {
		return res, fmt.Errorf("store: find expired leases: %w", err)
	}
	// Read the batch first, then write: writing while the cursor is open
	// would hold it across many round trips. The registry is read only
	// once an expired job is found: a pass with none costs the find alone.
	var expired []bson.Raw
	var live map[string]bool
	if err := EachRaw(ctx, cur, func(d bson.Raw) error {
		if len(expired) == limit {
			return errBatchFull
		}
		if live == nil {
			live = s.liveWorkers(ctx)
		}
		if spared(d, live, t, grace) {
			res.Spared++
			return nil
		}
		expired = append(expired, d)
		return nil
	}); err != nil && !errors.Is(err, errBatchFull) {
		return res, fmt.Errorf("store: read expired leases: %w", err)
	}
	for _, raw := range expired {
		r, err := s.reapOne(ctx, raw, t)
		if err != nil {
			return res, err
		}
		res = res.Add(r)
	}
	if res.Requeued > 0 {
		// Jobs runnable again, likely ahead of the candidates this
		// client keeps for its claims (candidates.go): read afresh.
		s.cands.forget()
	}
	return res, nil
}

// errBatchFull stops reading expired leases once a batch is full.
var errBatchFull = errors.New("batch full")

// spareBeatMax caps a registry entry's beat interval when the reaper
// judges whether it is alive: an entry claiming a longer one (another
// app's) does not count as alive for longer.
const spareBeatMax = time.Minute

// liveWorkers returns the ids of the processes alive in the workers
// registry now: seen within WorkerMissedBeats of their beat interval, both
// on the server's clock, and not further ahead of it than WorkerClockSkew.
// The registry is for people and may hold anything: a document that does
// not read as a live process is left out, and a registry that cannot be
// read at all spares no one (logged).
func (s *Store) liveWorkers(ctx context.Context) map[string]bool {
	t := s.ServerTime(ctx)
	cur, err := s.WorkersColl().Find(ctx,
		bson.D{{Key: "lastSeen", Value: bson.D{{Key: "$gte", Value: t.Add(-AliveFor(spareBeatMax))}}}},
		options.Find().SetProjection(bson.D{{Key: "lastSeen", Value: 1}, {Key: "beatEveryMs", Value: 1}}))
	if err != nil {
		s.log.Warn("reaper: cannot read the workers registry; sparing no expired job", zap.Error(err))
		return map[string]bool{}
	}
	live := map[string]bool{}
	err = EachRaw(ctx, cur, func(d bson.Raw) error {
		id, ok := d.Lookup("_id").StringValueOK()
		if !ok || id == "" {
			return nil
		}
		lastSeen, beatEvery := LastBeat(d)
		if lastSeen.IsZero() {
			return nil
		}
		// A beat after the hello (a negative age) is as alive as can be,
		// within the clock skew the registry allows; one further ahead is
		// not a beat docket wrote (see WorkerClockSkew).
		if lastSeen.After(t.Add(WorkerClockSkew)) {
			return nil
		}
		if t.Sub(lastSeen) < AliveFor(min(beatEvery, spareBeatMax)) {
			live[id] = true
		}
		return nil
	})
	if err != nil {
		s.log.Warn("reaper: cannot read the workers registry; sparing no expired job", zap.Error(err))
		return map[string]bool{}
	}
	return live
}

// spared reports whether the expired job raw is left alone for now: its
// owner is in live, and its lease expired less than grace plus one more
// lease (its own length, at most MaxSpare) before t.
func spared(raw bson.Raw, live map[string]bool, t time.Time, grace time.Duration) bool {
	owner, ok := raw.Lookup("owner").StringValueOK()
	if !ok || !live[owner] {
		return false
	}
	exp, ok1 := raw.Lookup("leaseExpiresAt").TimeOK()
	beat, ok2 := raw.Lookup("heartbeatAt").TimeOK()
	if !ok1 || !ok2 {
		return false
	}
	lease := exp.Sub(beat)
	if lease <= 0 {
		return false
	}
	return t.Before(exp.Add(grace + min(lease, MaxSpare)))
}

// reapOne re-queues, kills, cancels or buries the expired job raw.
func (s *Store) reapOne(ctx context.Context, raw bson.Raw, t time.Time) (ReapResult, error) {
	// The fence is on the values as stored, whatever their type.
	filter := bson.D{
		{Key: "_id", Value: raw.Lookup("_id")},
		{Key: "state", Value: jobs.StateRunning},
		{Key: "leaseToken", Value: rawValue(raw, "leaseToken")},
		{Key: "leaseExpiresAt", Value: raw.Lookup("leaseExpiresAt")},
	}
	var j jobs.Job
	if derr := bson.Unmarshal(raw, &j); derr != nil {
		owner, _ := raw.Lookup("owner").StringValueOK()
		attempt, _ := raw.Lookup("attempt").AsInt64OK()
		msg := malformed + derr.Error()
		errs := bson.A{jobs.AttemptError{Attempt: int(attempt), At: t, Owner: owner, Message: msg}}
		r, err := s.coll.UpdateOne(ctx, filter, Finish(jobs.StateDead, t, bson.E{Key: "errors", Value: errs}))
		if err != nil {
			// Log and go on: one job that cannot be written must not stop
			// the pass for the others.
			s.log.Warn("reaper: cannot bury a malformed job; skipping it", zap.Any("job_id", raw.Lookup("_id")),
				zap.String("malformed", msg), zap.Error(err))
			return ReapResult{Skipped: 1}, nil
		}
		if r.MatchedCount == 0 {
			return ReapResult{}, nil
		}
		s.log.Warn("reaper: buried a malformed job: dead without running again", zap.Any("job_id", raw.Lookup("_id")), zap.String("error", msg))
		return ReapResult{Buried: 1}, nil
	}
	msg := fmt.Sprintf("lease expired at %s: worker %s stopped renewing it", j.LeaseExpiresAt.Format(time.RFC3339Nano), j.Owner)
	errs := jobs.AppendError(j.Errors, jobs.AttemptError{Attempt: j.Attempt, At: t, Owner: j.Owner, Message: msg})
	f, update := s.failure(&j, t, false, errs)
	var res ReapResult
	switch {
	case f.State == jobs.StateDead:
		r, err := s.coll.UpdateOne(ctx, filter, update)
		if err != nil {
			return res, fmt.Errorf("store: reap job %s: %w", j.ID, err)
		}
		if r.MatchedCount == 0 {
			return res, nil // renewed, finished or reaped by someone else meanwhile
		}
		res.Dead++
	default:
		cancelled, err := s.requeueUnlessCancelled(ctx, "re-queue", filter, update, endCancelled(&j, t, errs, "re-queued"))
		switch {
		case errors.Is(err, jobs.ErrLeaseLost):
			return res, nil // renewed, finished or reaped by someone else meanwhile
		case err != nil:
			return res, err
		case cancelled:
			f.State = jobs.StateCancelled
			res.Cancelled++
		default:
			res.Requeued++
		}
	}
	s.log.Info("reaped expired lease", j.LogFields(zap.String("owner", j.Owner), zap.String("state", string(f.State)))...)
	return res, nil
}

// Clean deletes jobs that finished in state s before now minus age, at
// most limit of them, and returns how many it deleted. Ids are used as
// stored, whatever their type.
//
// The delete is conditioned on what made each job eligible when it was
// read (its state, and a finishedAt before the same cutoff), not on its id
// alone: a job retried between the read and the delete (by an operator, or
// while this process was stalled for any length of time) is left alone,
// and so is one that finished again since.
func (s *Store) Clean(ctx context.Context, st jobs.State, age time.Duration, limit int) (int, error) {
	t := s.Now()
	eligible := bson.E{Key: "finishedAt", Value: bson.D{{Key: "$lt", Value: t.Add(-age)}}}
	// A job whose unique key holds over a period is kept until the period
	// ends: deleting it would let a second job with the key in. A job whose
	// dependents have not been told of its outcome is kept until they are
	// (NotDue, deps.go).
	periodOver := bson.E{Key: "$or", Value: bson.A{
		bson.D{{Key: "uniqueUntil", Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: "uniqueUntil", Value: bson.D{{Key: "$lte", Value: t}}}},
	}}
	in, err := s.IDs(ctx, bson.D{{Key: "state", Value: st}, eligible, periodOver, NotDue}, limit)
	if err != nil {
		return 0, fmt.Errorf("store: find %s jobs to clean: %w", st, err)
	}
	if len(in) == 0 {
		return 0, nil
	}
	if s.hooks != nil {
		s.hooks.BeforeClean()
	}
	// _id first (server.go).
	r, err := s.coll.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}, {Key: "state", Value: st}, eligible, periodOver, NotDue})
	if err != nil {
		return 0, fmt.Errorf("store: clean %s jobs: %w", st, err)
	}
	return int(r.DeletedCount), nil
}
