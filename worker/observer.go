package worker

import (
	"time"

	"github.com/docketq/docket/jobs"
)

// Outcome is how one attempt ended, as an Observer sees it.
type Outcome string

// Outcomes of an attempt.
const (
	// OutcomeSucceeded: the handler returned nil and the job is succeeded.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeRetried: the attempt failed and the job is available again
	// after its backoff.
	OutcomeRetried Outcome = "retried"
	// OutcomeDead: the attempt failed for good (a permanent error, or no
	// attempts left) and the job is dead.
	OutcomeDead Outcome = "dead"
	// OutcomeCancelled: the job was cancelled while it ran.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeReleased: the worker stopped and gave the job back.
	OutcomeReleased Outcome = "released"
	// OutcomeSnoozed: the handler returned jobs.Snooze; the job is
	// available again after the snooze, its attempt not counted.
	OutcomeSnoozed Outcome = "snoozed"
	// OutcomeLeaseLost: another worker or the reaper took the job; this
	// attempt wrote nothing.
	OutcomeLeaseLost Outcome = "lease_lost"
	// OutcomeUnrecorded: the outcome could not be written before the lease
	// would expire (the database away); the reaper re-queues the job.
	OutcomeUnrecorded Outcome = "unrecorded"
)

// Observer is told what a worker does, for metrics. Its methods are called
// from the worker's goroutines, concurrently, and must return quickly.
type Observer interface {
	// Claimed follows each claim round trip: how long it took, how many
	// jobs it returned and its error.
	Claimed(took time.Duration, n int, err error)
	// Started is called when a claimed job's attempt begins; Finished
	// follows it exactly once, when the attempt has ended (its outcome
	// written, or given up on).
	Started(job *jobs.Job)
	// Finished reports how the attempt ended and how long its handler ran.
	// job is a copy of the job as the attempt left it: State is the one
	// the outcome wrote (succeeded, available to retry, dead, cancelled;
	// unchanged when nothing was written), and Errors ends with this
	// attempt's error when it failed.
	Finished(job *jobs.Job, outcome Outcome, handler time.Duration)
	// Heartbeat follows each lease renewal round trip, with its error
	// (jobs.ErrLeaseLost when the job was taken, queue.ErrOutcomeUnknown
	// when reading the lease back failed).
	Heartbeat(job *jobs.Job, err error)
	// LeaseLost is called when a fenced write of an attempt (a renewal or
	// its final write) matched nothing: another worker or the reaper took
	// the job. At most once per attempt; the handler may run on a while.
	// A lease that only expired unrenewed is not counted until a write
	// finds it taken.
	LeaseLost(job *jobs.Job)
}

// NopObserver is an Observer that does nothing; embed it to implement only
// some methods.
type NopObserver struct{}

// Claimed implements Observer.
func (NopObserver) Claimed(time.Duration, int, error) {}

// Started implements Observer.
func (NopObserver) Started(*jobs.Job) {}

// Finished implements Observer.
func (NopObserver) Finished(*jobs.Job, Outcome, time.Duration) {}

// Heartbeat implements Observer.
func (NopObserver) Heartbeat(*jobs.Job, error) {}

// LeaseLost implements Observer.
func (NopObserver) LeaseLost(*jobs.Job) {}

// Observers returns an Observer that tells each of obs, in order (nil
// ones skipped): a process with metrics and event subscribers observes
// its worker through both.
func Observers(obs ...Observer) Observer {
	var m multiObserver
	for _, o := range obs {
		if o != nil {
			m = append(m, o)
		}
	}
	if len(m) == 1 {
		return m[0]
	}
	return m
}

type multiObserver []Observer

func (m multiObserver) Claimed(took time.Duration, n int, err error) {
	for _, o := range m {
		o.Claimed(took, n, err)
	}
}

func (m multiObserver) Started(job *jobs.Job) {
	for _, o := range m {
		o.Started(job)
	}
}

func (m multiObserver) Finished(job *jobs.Job, outcome Outcome, handler time.Duration) {
	for _, o := range m {
		o.Finished(job, outcome, handler)
	}
}

func (m multiObserver) Heartbeat(job *jobs.Job, err error) {
	for _, o := range m {
		o.Heartbeat(job, err)
	}
}

func (m multiObserver) LeaseLost(job *jobs.Job) {
	for _, o := range m {
		o.LeaseLost(job)
	}
}

// stateAfter is the state each outcome of an attempt leaves its job in.
var stateAfter = map[Outcome]jobs.State{
	OutcomeSucceeded: jobs.StateSucceeded,
	OutcomeRetried:   jobs.StateAvailable,
	OutcomeDead:      jobs.StateDead,
	OutcomeCancelled: jobs.StateCancelled,
	OutcomeReleased:  jobs.StateAvailable,
	OutcomeSnoozed:   jobs.StateAvailable,
}

// endedJob returns a copy of job as an attempt that ended with outcome
// left it, failure being the error it recorded ("" for none) and again,
// for a retry or a snooze, when the job runs again. The copy keeps the
// Observer off the job a stuck handler may still read.
func endedJob(job *jobs.Job, outcome Outcome, failure string, again time.Time) *jobs.Job {
	j := *job
	if (outcome == OutcomeRetried || outcome == OutcomeSnoozed) && !again.IsZero() {
		j.RunAt = again
	}
	if s, ok := stateAfter[outcome]; ok {
		j.State = s
	}
	if outcome == OutcomeSnoozed {
		j.Attempt-- // not counted
	}
	if failure != "" && (outcome == OutcomeRetried || outcome == OutcomeDead || outcome == OutcomeCancelled) {
		j.Errors = jobs.AppendError(job.Errors, jobs.AttemptError{Attempt: job.Attempt, At: time.Now().UTC(), Owner: job.Owner, Message: failure})
	}
	return &j
}

// failOutcome is the Outcome of a failed attempt that left its job in s.
func failOutcome(s jobs.State) Outcome {
	switch s {
	case jobs.StateAvailable:
		return OutcomeRetried
	case jobs.StateCancelled:
		return OutcomeCancelled
	default:
		return OutcomeDead
	}
}
