package docketotel

import (
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/worker"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// observer begins and ends the attempts' spans.
type observer struct {
	worker.NopObserver
	t *tracer
}

// Started implements worker.Observer.
func (o *observer) Started(job *jobs.Job) { o.t.begin(job) }

// LeaseLost implements worker.Observer: an event on the attempt's span.
func (o *observer) LeaseLost(job *jobs.Job) {
	if a := o.t.lookup(job); a != nil {
		a.process.AddEvent("lease lost")
	}
}

// Finished implements worker.Observer: the attempt's spans end with its
// outcome.
func (o *observer) Finished(job *jobs.Job, outcome worker.Outcome, _ time.Duration) {
	a := o.t.take(job)
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ended = true
	out := OutcomeKey.String(string(outcome))
	if a.settle != nil {
		a.settle.SetAttributes(out, semconv.MessagingOperationName(settleName(outcome)))
		if outcome == worker.OutcomeLeaseLost || outcome == worker.OutcomeUnrecorded {
			a.settle.SetStatus(codes.Error, string(outcome))
			a.settle.SetAttributes(semconv.ErrorTypeKey.String(string(outcome)))
		}
		a.settle.End()
	}
	a.process.SetAttributes(out)
	if failed(outcome) {
		a.setFailure(job, outcome)
	}
	a.process.End()
}

// setFailure records on the attempt's span why it failed. a.mu is held.
func (a *attempt) setFailure(job *jobs.Job, outcome worker.Outcome) {
	desc := string(outcome)
	if n := len(job.Errors); n > 0 && job.Errors[n-1].Attempt == job.Attempt &&
		(outcome == worker.OutcomeRetried || outcome == worker.OutcomeDead || outcome == worker.OutcomeCancelled) {
		desc = job.Errors[n-1].Message
	}
	a.process.SetStatus(codes.Error, clean(desc))
	errType := a.errType
	if !errType.Valid() || outcome == worker.OutcomeLeaseLost || outcome == worker.OutcomeUnrecorded {
		errType = semconv.ErrorTypeKey.String(string(outcome))
	}
	a.process.SetAttributes(errType)
}

// failed reports whether an attempt that ended with outcome failed: its
// handler failed or it was cancelled, or its outcome was not written.
func failed(outcome worker.Outcome) bool {
	switch outcome {
	case worker.OutcomeRetried, worker.OutcomeDead, worker.OutcomeCancelled,
		worker.OutcomeLeaseLost, worker.OutcomeUnrecorded:
		return true
	}
	return false
}

// settleName is messaging.operation.name of the write that settles an
// attempt with outcome.
func settleName(outcome worker.Outcome) string {
	switch outcome {
	case worker.OutcomeSucceeded:
		return "complete"
	case worker.OutcomeRetried, worker.OutcomeDead:
		return "fail"
	case worker.OutcomeCancelled:
		return "cancel"
	case worker.OutcomeSnoozed:
		return "snooze"
	case worker.OutcomeReleased:
		return "release"
	}
	return "settle"
}
