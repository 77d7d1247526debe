package jobs

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// State is where a job is in its life.
type State string

// The states of a job. A job is created available, moves to running when a
// worker claims it, and ends succeeded, dead or cancelled. A failed attempt
// that may be retried moves it back to available with a later runAt. A job
// enqueued after other jobs (its parents) is created blocked, and becomes
// available when the last of them succeeds (see docs/WORKFLOWS.md).
const (
	StateBlocked   State = "blocked"
	StateAvailable State = "available"
	StateRunning   State = "running"
	StateSucceeded State = "succeeded"
	StateDead      State = "dead"
	StateCancelled State = "cancelled"
)

// Finished reports whether s is a final state.
func (s State) Finished() bool {
	return s == StateSucceeded || s == StateDead || s == StateCancelled
}

// Valid reports whether s is one of the known states.
func (s State) Valid() bool {
	switch s {
	case StateBlocked, StateAvailable, StateRunning, StateSucceeded, StateDead, StateCancelled:
		return true
	}
	return false
}

// Defaults applied to a job when it is enqueued without them, and bounds on
// what it keeps.
const (
	// DefaultQueue is the queue a job goes to when none is given.
	DefaultQueue = "default"
	// DefaultMaxAttempts is how many times a job runs before it is dead.
	DefaultMaxAttempts = 25
	// MaxErrors is how many attempt errors a job keeps, newest last.
	MaxErrors = 20
	// MaxArgsBytes is the largest encoded args document accepted.
	MaxArgsBytes = 1 << 20
)

// Job is one document in the jobs collection. Field names (the bson tags)
// are a public contract: they are never renamed.
type Job struct {
	// ID is a UUID (version 7, so ids sort by creation time) as a string.
	// For a job another application wrote with an _id that is not a
	// string, read by Client.JobGet, ID is only the id's display form
	// (extended JSON) and StoredID holds the id: act on a job by
	// docket.JobIDOf(job), never by ID.
	ID string `bson:"_id"`
	// StoredID is the _id as stored when it is not a string (see ID); the
	// zero value, with a string id, otherwise. It is never written.
	StoredID bson.RawValue `bson:"-" json:"-"`
	// Kind names the handler that runs the job.
	Kind string `bson:"kind"`
	// Queue is the queue the job is in; workers serve a set of queues.
	Queue string `bson:"queue"`
	// Args is the handler's input, always a document.
	Args bson.Raw `bson:"args"`
	// State is the job's state.
	State State `bson:"state"`
	// Priority orders claims: higher first.
	Priority int `bson:"priority"`
	// RunAt is the earliest time the job may be claimed.
	RunAt time.Time `bson:"runAt"`
	// Attempt counts the attempts made, the running one included; a
	// snooze, and a stopping worker's release of the job, take theirs
	// back.
	Attempt int `bson:"attempt"`
	// MaxAttempts is how many attempts the job gets before it is dead.
	MaxAttempts int `bson:"maxAttempts"`
	// Owner is the id of the worker that holds, or last held, the job.
	Owner string `bson:"owner,omitempty"`
	// LeaseToken is the fresh token stamped by the claim that holds the job;
	// every write by the holder is fenced on it.
	LeaseToken string `bson:"leaseToken,omitempty"`
	// LeaseExpiresAt is when the holder's lease ends unless renewed.
	LeaseExpiresAt *time.Time `bson:"leaseExpiresAt,omitempty"`
	// HeartbeatAt is the holder's last renewal.
	HeartbeatAt *time.Time `bson:"heartbeatAt,omitempty"`
	// CancelRequestedAt is set when a running job is asked to stop.
	CancelRequestedAt *time.Time `bson:"cancelRequestedAt,omitempty"`
	// Errors holds the last MaxErrors attempt errors, oldest first.
	Errors []AttemptError `bson:"errors"`
	// UniqueKey, while the job is unfinished, keeps any other unfinished job
	// with the same key from being enqueued.
	UniqueKey string `bson:"uniqueKey,omitempty"`
	// FinishedUniqueKey holds the job's unique key once it has finished, so
	// that the key is free for a new job.
	FinishedUniqueKey string `bson:"finishedUniqueKey,omitempty"`
	// UniquePeriodKey is the unique key of a job inserted with a period
	// (docket.InsertOpts.UniqueFor): the key and the start of the period its
	// insert fell in, "<key>@<start, RFC 3339 UTC, milliseconds>". It keeps
	// any other job with the same key out of that period, finished or not,
	// and is never freed: the next period's key is another string.
	UniquePeriodKey string `bson:"uniquePeriodKey,omitempty"`
	// UniqueUntil is when the period of UniquePeriodKey ends: retention
	// does not delete the job before then.
	UniqueUntil *time.Time `bson:"uniqueUntil,omitempty"`
	// CreatedAt is when the job was enqueued.
	CreatedAt time.Time `bson:"createdAt"`
	// UpdatedAt is the time of the last change of state.
	UpdatedAt time.Time `bson:"updatedAt"`
	// FinishedAt is when the job reached a final state.
	FinishedAt *time.Time `bson:"finishedAt,omitempty"`
	// After holds the ids of the jobs this one was enqueued to wait for
	// (its parents), as given; empty for a job without parents.
	After []string `bson:"after,omitempty"`
	// WaitingOn holds the ids of the parents that have not succeeded yet;
	// a blocked job becomes available when it is empty.
	WaitingOn []string `bson:"waitingOn,omitempty"`
	// RunAnyway makes the job run once every parent has finished, however
	// it ended; without it, a parent that ends dead or cancelled cancels
	// the job.
	RunAnyway bool `bson:"runAnyway,omitempty"`
	// Dependents is set on a job that other jobs wait for. The write that
	// finishes the job renames it dependentsDue, which stays until its
	// dependents have been told of its outcome (docs/WORKFLOWS.md).
	Dependents bool `bson:"dependents,omitempty"`
	// Linking is set on a blocked job from its insert until its parents
	// are marked as having it and those already finished are applied to
	// it; the leader's pass finishes a link whose enqueuer stopped.
	Linking bool `bson:"linking,omitempty"`
	// Traceparent is the W3C Trace Context traceparent of the span that
	// inserted the job (docket.InsertOpts.Traceparent), so that its attempts
	// continue that trace (package docketotel). Empty when none was given
	// or the document holds one docket ignores (see TraceHeader).
	Traceparent TraceHeader `bson:"traceparent,omitempty"`
	// Tracestate is the W3C Trace Context tracestate that goes with
	// Traceparent, when there is one.
	Tracestate TraceHeader `bson:"tracestate,omitempty"`
	// Result is what the handler of a succeeded job set with SetResult in
	// its last attempt, stored by the write that recorded its success; a
	// retry clears it.
	Result bson.Raw `bson:"result,omitempty"`
	// Progress is how far the job had got when its lease was last renewed
	// or it finished, as its handler reported it (Progress); kept once the
	// job finishes, cleared when it is given back or claimed again. Read
	// from a document another application wrote, it never fails to decode
	// (see ProgressReport.UnmarshalBSONValue).
	Progress *ProgressReport `bson:"progress,omitempty"`
}

// AttemptError records why one attempt did not succeed.
type AttemptError struct {
	// Attempt is the attempt that failed.
	Attempt int `bson:"attempt"`
	// At is when the failure was recorded.
	At time.Time `bson:"at"`
	// Owner is the worker that ran the attempt.
	Owner string `bson:"owner,omitempty"`
	// Message says what went wrong.
	Message string `bson:"message"`
}

// AppendError returns errs with e added, keeping only the newest MaxErrors.
// It never modifies errs.
func AppendError(errs []AttemptError, e AttemptError) []AttemptError {
	out := make([]AttemptError, 0, min(len(errs)+1, MaxErrors))
	if keep := MaxErrors - 1; len(errs) > keep {
		errs = errs[len(errs)-keep:]
	}
	out = append(out, errs...)
	return append(out, e)
}
