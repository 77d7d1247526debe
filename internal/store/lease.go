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

// fence matches the job only while l still holds it.
func fence(l Lease) bson.D {
	return bson.D{
		{Key: "_id", Value: l.JobID},
		{Key: "state", Value: jobs.StateRunning},
		{Key: "leaseToken", Value: l.Token},
	}
}

// fencedUpdate applies update to the job l holds. When it matches nothing,
// the job is read back (unlessWritten): nil when ours finds this attempt's
// own write there, else jobs.ErrLeaseLost, or an error wrapping
// ErrOutcomeUnknown when that read fails. A write error (a reply maybe
// lost) is returned as is, for the caller to retry.
func (s *Store) fencedUpdate(ctx context.Context, op string, l Lease, update bson.D, ours func(*written) bool) error {
	res, err := s.coll.UpdateOne(ctx, fence(l), update)
	if err == nil {
		err = s.lostFinishReply(op)
	}
	if err != nil {
		return fmt.Errorf("store: %s job %s: %w", op, l.JobID, err)
	}
	if res.MatchedCount == 0 {
		return s.unlessWritten(ctx, op, l, fmt.Errorf("store: %s job %s: %w", op, l.JobID, jobs.ErrLeaseLost), ours)
	}
	return nil
}

// Renewal is what a heartbeat learned.
type Renewal struct {
	// ExpiresAt is the lease's new expiry.
	ExpiresAt time.Time
	// CancelRequested is true when someone asked the job to stop.
	CancelRequested bool
}

// Finish returns the update that moves a job to the final state s at t,
// freeing its unique key, its slot of a bounded queue's capacity and its
// run slots of concurrency limits (limit.go), and marking the outcome due
// to the jobs that wait for it (deps.go). A result set holds only what
// this attempt set: without one in set, an earlier one goes. Every write
// that finishes a job uses it, package queue's too (a cancel).
func Finish(s jobs.State, t time.Time, set ...bson.E) bson.D {
	unset := unsetFields("leaseExpiresAt", CapacitySlotField)
	unset = append(unset, unsetFields(runSlotFields...)...)
	if !slices.ContainsFunc(set, func(e bson.E) bool { return e.Key == "result" }) {
		unset = append(unset, bson.E{Key: "result", Value: ""})
	}
	set = append(set,
		bson.E{Key: "state", Value: s},
		bson.E{Key: "finishedAt", Value: t},
		bson.E{Key: "updatedAt", Value: t},
	)
	return bson.D{
		{Key: "$set", Value: bson.D(set)},
		{Key: "$unset", Value: unset},
		{Key: "$rename", Value: bson.D{
			{Key: "uniqueKey", Value: "finishedUniqueKey"},
			// A job others wait for: its outcome is now due to them (deps.go).
			{Key: DependentsField, Value: DependentsDueField},
		}},
	}
}

// Complete marks the job l holds succeeded, storing the result and the
// progress that ctx carries (WithResult, WithProgress), if any. On a Store
// made by WithBatchedCompletion, a completion without either joins
// concurrent ones in one updateMany; the outcome is the same.
func (s *Store) Complete(ctx context.Context, l Lease) error {
	if s.batches(ctx) {
		_, err := s.completions.complete(ctx, l, false)
		return err
	}
	update := withProgress(ctx, Finish(jobs.StateSucceeded, s.Now(), resultOf(ctx)...))
	return s.fencedUpdate(ctx, "complete", l, update, completedBy(l))
}

// batches reports whether a completion with ctx may join others in one
// write (WithBatchedCompletion): one without a result or progress.
func (s *Store) batches(ctx context.Context) bool {
	return s.completions != nil && resultOf(ctx) == nil && !carriesProgress(ctx)
}

// completedBy tells a job that the attempt of lease l completed: a try of
// its completion whose reply was lost may have been applied, and only
// this attempt writes succeeded under its token.
func completedBy(l Lease) func(*written) bool {
	return func(w *written) bool { return w.State == jobs.StateSucceeded && w.LeaseToken == l.Token }
}

// CompleteReadingComment is the comment on CompleteReading's command,
// which names it in a server's logs and profiler (and to docket's bench,
// which counts it as a completion).
const CompleteReadingComment = "docket: complete and read"

// SettleFields is the projection of what the settle of a job's
// dependents reads of it (package queue's settle and settleTogether, and
// CompleteReading's reply), with the updatedAt its last write is
// conditioned on.
var SettleFields = bson.D{
	{Key: "state", Value: 1}, {Key: "kind", Value: 1}, {Key: "updatedAt", Value: 1},
	{Key: DependentIdsField, Value: 1}, {Key: DependentsManyField, Value: 1}, {Key: DependentsDueField, Value: 1},
}

// CompleteReading is Complete for a job that others wait for: a
// completion written on its own is one findAndModify that returns the job
// as the write left it, so that the settle of its dependents takes their
// list from it rather than reading the job again (queue's
// SettleDependentsOfAll). The document is nil when the completion joined
// others in one write (WithBatchedCompletion: their settle reads them
// together), or when the write's reply was lost and reading the job back
// found it applied.
func (s *Store) CompleteReading(ctx context.Context, l Lease) (bson.Raw, error) {
	if s.batches(ctx) {
		return s.completions.complete(ctx, l, true)
	}
	update := withProgress(ctx, Finish(jobs.StateSucceeded, s.Now(), resultOf(ctx)...))
	send := func(projected bool) (bson.Raw, error) {
		opts := options.FindOneAndUpdate().SetReturnDocument(options.After).SetComment(CompleteReadingComment)
		if projected {
			opts.SetProjection(SettleFields)
		}
		return s.coll.FindOneAndUpdate(ctx, fence(l), update, opts).Raw()
	}
	feature := &s.server.FindAndModifyProjection
	projected := !feature.Lacking()
	doc, err := send(projected)
	if projected && feature.Detect(err) {
		doc, err = send(false) // refused: nothing was written
	}
	if err == nil {
		err = s.lostFinishReply("complete")
	}
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		lost := fmt.Errorf("store: complete job %s: %w", l.JobID, jobs.ErrLeaseLost)
		return nil, s.unlessWritten(ctx, "complete", l, lost, completedBy(l))
	case err != nil:
		return nil, fmt.Errorf("store: complete job %s: %w", l.JobID, err)
	}
	return doc, nil
}

// Cancelled marks the job l holds cancelled, recording why.
func (s *Store) Cancelled(ctx context.Context, l Lease, j *jobs.Job, reason string) error {
	t := s.Now()
	errs := jobs.AppendError(j.Errors, jobs.AttemptError{Attempt: j.Attempt, At: t, Owner: j.Owner, Message: reason})
	update := withProgress(ctx, Finish(jobs.StateCancelled, t, bson.E{Key: "errors", Value: errs}))
	return s.fencedUpdate(ctx, "cancel", l, update, func(w *written) bool {
		return w.State == jobs.StateCancelled && w.LeaseToken == l.Token && w.hasError(j.Attempt, j.Owner, reason)
	})
}

// written is what a finishing write leaves in a job, read back to tell
// whether a try whose reply was lost was applied.
type written struct {
	State         jobs.State
	LeaseToken    string
	RunAt         time.Time
	Errors        []jobs.AttemptError
	ReleasedToken string
}

// hasError reports whether w records the error msg of the given attempt
// and owner: only that attempt's own final write records it (the reaper's
// and a cancel's messages are their own).
func (w *written) hasError(attempt int, owner, msg string) bool {
	return slices.ContainsFunc(w.Errors, func(e jobs.AttemptError) bool {
		return e.Attempt == attempt && e.Owner == owner && e.Message == msg
	})
}

// readWritten reads back the fields a finishing write sets in job id, each
// on its own (a field of another type is left at its zero value); nil when
// the job is gone.
func (s *Store) readWritten(ctx context.Context, id string) (*written, error) {
	raw, err := s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, options.FindOne().SetProjection(bson.D{
		{Key: "state", Value: 1}, {Key: "leaseToken", Value: 1}, {Key: "runAt", Value: 1}, {Key: "errors", Value: 1},
		{Key: releasedTokenField, Value: 1},
	})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var w written
	state, _ := raw.Lookup("state").StringValueOK()
	w.State = jobs.State(state)
	w.LeaseToken, _ = raw.Lookup("leaseToken").StringValueOK()
	w.RunAt, _ = raw.Lookup("runAt").TimeOK()
	w.ReleasedToken, _ = raw.Lookup(releasedTokenField).StringValueOK()
	if arr, ok := raw.Lookup("errors").ArrayOK(); ok {
		vals, _ := arr.Values()
		for _, v := range vals {
			var e jobs.AttemptError
			if doc, ok := v.DocumentOK(); ok && bson.Unmarshal(doc, &e) == nil {
				w.Errors = append(w.Errors, e)
			}
		}
	}
	return &w, nil
}

// unlessWritten is called when the fenced write op of lease l reported
// lost (err): it reads the job back and returns nil when ours says this
// attempt's own write is there (an earlier try was applied and its reply
// lost), err otherwise.
func (s *Store) unlessWritten(ctx context.Context, op string, l Lease, err error, ours func(*written) bool) error {
	// The read-back gets time of its own: the write may have used up the
	// caller's (a loaded server), and only the read tells a lost lease
	// from an earlier try applied with its reply lost.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.readBackWait())
	defer cancel()
	w, rerr := s.readWritten(rctx, l.JobID)
	if rerr != nil {
		// Unknown, not lost: the caller tries the write again, which
		// reads back again.
		return fmt.Errorf("store: %s job %s: the fenced write matched nothing and reading the job back failed: %w: %w", op, l.JobID, ErrOutcomeUnknown, rerr)
	}
	if w == nil || !ours(w) {
		return err
	}
	s.log.Info("the job already holds this attempt's outcome: an earlier try was applied and its reply lost",
		zap.String("job_id", l.JobID), zap.String("op", op), zap.String("state", string(w.State)))
	return nil
}

// readBackTimeout bounds the read that tells a lost lease from a write
// already applied.
const readBackTimeout = 5 * time.Second

// readBackWait is readBackTimeout, or what a test hook sets in its place.
func (s *Store) readBackWait() time.Duration {
	if s.hooks != nil {
		if d, ok := s.hooks.ReadBackTimeout(); ok {
			return d
		}
	}
	return readBackTimeout
}

// lostFinishReply is the error a test hook makes of the reply of the
// finishing write op; nil without hooks.
func (s *Store) lostFinishReply(op string) error {
	if s.hooks == nil {
		return nil
	}
	return s.hooks.AfterFinish(op)
}

// Failure is the outcome of a failed attempt.
type Failure struct {
	// State is where the job went: available (to retry) or dead.
	State jobs.State
	// RunAt is when the retry may run, for State available.
	RunAt time.Time
}

// Fail records that the attempt of j held by l failed with cause. The job
// is retried after a backoff unless cause is permanent or the attempts are
// used up, in which case it is dead.
func (s *Store) Fail(ctx context.Context, l Lease, j *jobs.Job, cause error) (Failure, error) {
	t := s.Now()
	errs := jobs.AppendError(j.Errors, jobs.AttemptError{Attempt: j.Attempt, At: t, Owner: j.Owner, Message: cause.Error()})
	f, update := s.failure(j, t, jobs.IsPermanent(cause), errs)
	// A try of this write whose reply was lost may have been applied: the
	// job then records this attempt's error (only this attempt writes it).
	msg := cause.Error()
	ours := func(w *written) bool { return w.hasError(j.Attempt, j.Owner, msg) }
	if f.State == jobs.StateDead {
		return f, s.fencedUpdate(ctx, "fail", l, withProgress(ctx, update), func(w *written) bool {
			return w.State == jobs.StateDead && w.LeaseToken == l.Token && ours(w)
		})
	}
	cancelled, err := s.requeueUnlessCancelled(ctx, "fail", fence(l), update, endCancelled(j, t, errs, "retried"))
	if errors.Is(err, jobs.ErrLeaseLost) {
		var got *written
		err = s.unlessWritten(ctx, "fail", l, err, func(w *written) bool { got = w; return ours(w) })
		if err == nil {
			// Re-queued by this attempt (and maybe claimed again since), or
			// cancelled instead, which keeps the token.
			if got.State == jobs.StateCancelled && got.LeaseToken == l.Token {
				return Failure{State: jobs.StateCancelled}, nil
			}
			if got.State == jobs.StateAvailable {
				f.RunAt = got.RunAt
			}
			return f, nil
		}
	}
	if cancelled {
		return Failure{State: jobs.StateCancelled}, err
	}
	return f, err
}

// cancelNotRequested and cancelRequested split a fence by whether someone
// asked the job to stop. An explicit null is no request, as HeartbeatMany
// reads it.
var (
	cancelNotRequested = bson.E{Key: "cancelRequestedAt", Value: nil}
	cancelRequested    = bson.E{Key: "cancelRequestedAt", Value: bson.D{{Key: "$ne", Value: nil}}}
)

// cancelledInstead is the error recorded when a cancel request turns what
// would have been a re-queue into the end of the job.
func cancelledInstead(requestedAt, instead string) string {
	return fmt.Sprintf("cancelled: cancel requested at %s, so the job ends here instead of being %s", requestedAt, instead)
}

// endCancelled is requeueUnlessCancelled's cancel for j's attempt, whose
// errors would be errs had it been re-queued (instead).
func endCancelled(j *jobs.Job, t time.Time, errs []jobs.AttemptError, instead string) func(string, bson.Raw) bson.D {
	return func(requestedAt string, _ bson.Raw) bson.D {
		return Finish(jobs.StateCancelled, t, bson.E{Key: "errors", Value: jobs.AppendError(errs, jobs.AttemptError{
			Attempt: j.Attempt, At: t, Owner: j.Owner, Message: cancelledInstead(requestedAt, instead),
		})})
	}
}

// requeueUnlessCancelled applies update, which sends the job back to the
// queue, to the job filter matches, unless someone asked the job to stop:
// then it applies cancel(the request's time) instead, which ends it
// cancelled, and reports cancelled. Each branch is one single-document
// update on filter plus the state of cancelRequestedAt, so a cancel request
// that lands at any moment is honoured by exactly one of them: Cancel only
// sets the field on a running job and nothing unsets it, so if the first
// update missed because of it, the second one matches. It returns
// jobs.ErrLeaseLost when neither matched (filter no longer holds the job).
func (s *Store) requeueUnlessCancelled(ctx context.Context, op string, filter, update bson.D, cancel func(requestedAt string, doc bson.Raw) bson.D) (cancelled bool, err error) {
	id := filterID(filter)
	res, err := s.coll.UpdateOne(ctx, append(append(bson.D{}, filter...), cancelNotRequested), update)
	if err == nil && res.MatchedCount == 1 {
		err = s.lostFinishReply(op)
	}
	if err != nil {
		return false, fmt.Errorf("store: %s job %v: %w", op, id, err)
	}
	if res.MatchedCount == 1 {
		return false, nil
	}
	requested := append(append(bson.D{}, filter...), cancelRequested)
	raw, err := s.coll.FindOne(ctx, requested, options.FindOne().SetProjection(bson.D{
		{Key: "cancelRequestedAt", Value: 1}, {Key: "errors", Value: 1}, {Key: "attempt", Value: 1}, {Key: "owner", Value: 1},
	})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, fmt.Errorf("store: %s job %v: %w", op, id, jobs.ErrLeaseLost)
	}
	if err != nil {
		// The fence matched nothing, and only the read tells a lost lease
		// from a cancel request.
		return false, fmt.Errorf("store: %s job %v: the fenced write matched nothing and reading the job back failed: %w: %w", op, id, ErrOutcomeUnknown, err)
	}
	at := raw.Lookup("cancelRequestedAt").String()
	if tm, ok := raw.Lookup("cancelRequestedAt").TimeOK(); ok {
		at = tm.UTC().Format(time.RFC3339Nano)
	}
	res, err = s.coll.UpdateOne(ctx, requested, withProgress(ctx, cancel(at, raw)))
	if err == nil && res.MatchedCount == 1 {
		err = s.lostFinishReply(op)
	}
	if err != nil {
		return false, fmt.Errorf("store: %s job %v (cancel requested): %w", op, id, err)
	}
	if res.MatchedCount == 0 {
		return false, fmt.Errorf("store: %s job %v: %w", op, id, jobs.ErrLeaseLost)
	}
	s.log.Info("cancel request honoured: job cancelled instead of re-queued", zap.Any("job_id", id), zap.String("op", op), zap.String("cancel_requested_at", at))
	return true, nil
}

// filterID is the _id a fence matches, for messages.
func filterID(filter bson.D) any {
	for _, e := range filter {
		if e.Key == "_id" {
			return e.Value
		}
	}
	return nil
}

// failure returns where a failed attempt of j sends it and the update that
// does so.
func (s *Store) failure(j *jobs.Job, t time.Time, permanent bool, errs []jobs.AttemptError) (Failure, bson.D) {
	maxAttempts := j.MaxAttempts
	if maxAttempts <= 0 { // a plain insert may leave it out
		maxAttempts = jobs.DefaultMaxAttempts
	}
	if permanent || j.Attempt >= maxAttempts {
		return Failure{State: jobs.StateDead}, Finish(jobs.StateDead, t, bson.E{Key: "errors", Value: errs})
	}
	// As stored: a BSON date holds milliseconds.
	runAt := t.Add(Backoff(j.Attempt, s.cfg.RetryBase, s.cfg.RetryMax)).Truncate(time.Millisecond)
	return Failure{State: jobs.StateAvailable, RunAt: runAt}, requeue(t, runAt, bson.E{Key: "errors", Value: errs})
}

// requeue returns the update that makes a running job available at runAt,
// dropping its lease and freeing its run slots of concurrency limits
// (limit.go) and its progress. Every write that gives an attempt back (a
// retry, a release, a snooze, the reaper's re-queue) uses it.
func requeue(t, runAt time.Time, set ...bson.E) bson.D {
	set = append(set,
		bson.E{Key: "state", Value: jobs.StateAvailable},
		bson.E{Key: "runAt", Value: runAt},
		bson.E{Key: "updatedAt", Value: t},
	)
	return bson.D{
		{Key: "$set", Value: bson.D(set)},
		// progress is the attempt's, not the next one's.
		{Key: "$unset", Value: append(unsetFields("leaseToken", "leaseExpiresAt", "heartbeatAt", progressField), unsetFields(runSlotFields...)...)},
	}
}

// unsetFields is what $unset takes to remove fields.
func unsetFields(fields ...string) bson.D {
	unset := make(bson.D, len(fields))
	for i, f := range fields {
		unset[i] = bson.E{Key: f, Value: ""}
	}
	return unset
}

// releasedTokenField holds the lease token of a job's last release: no
// other write sets it, and a claim does not clear it, so a release whose
// reply was lost recognizes itself when it reads the job back, even after
// the job was claimed again.
const releasedTokenField = "releasedToken"

// Release gives the job l holds back to the queue at once, as if this
// attempt had not been made: a worker shutting down uses it.
//
// A job whose cancel was requested ends cancelled instead, with why in its
// errors. Like the finishing writes, a release whose fence matches nothing
// reads the job back: released by l already (an earlier try applied, its
// reply lost), it returns nil; otherwise jobs.ErrLeaseLost, or ErrOutcomeUnknown
// when the read fails.
func (s *Store) Release(ctx context.Context, l Lease) error {
	t := s.Now()
	mark := bson.E{Key: releasedTokenField, Value: l.Token}
	update := requeue(t, t, mark)
	update = append(update, bson.E{Key: "$inc", Value: bson.D{{Key: "attempt", Value: -1}}})
	_, err := s.requeueUnlessCancelled(ctx, "release", fence(l), update, func(requestedAt string, doc bson.Raw) bson.D {
		// Release has no job in hand: the errors, attempt and owner are
		// those read with the request, which only the holder of l writes.
		var j struct {
			Errors  []jobs.AttemptError `bson:"errors"`
			Attempt int                 `bson:"attempt"`
			Owner   string              `bson:"owner"`
		}
		_ = bson.Unmarshal(doc, &j) // a field that does not decode is left at its zero value
		errs := jobs.AppendError(j.Errors, jobs.AttemptError{
			Attempt: j.Attempt, At: t, Owner: j.Owner, Message: cancelledInstead(requestedAt, "released to another worker"),
		})
		return Finish(jobs.StateCancelled, t, bson.E{Key: "errors", Value: errs}, mark)
	})
	if errors.Is(err, jobs.ErrLeaseLost) {
		return s.unlessWritten(ctx, "release", l, err, func(w *written) bool {
			return w.ReleasedToken == l.Token
		})
	}
	return err
}
