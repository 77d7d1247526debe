package jobs

import (
	"errors"
	"fmt"
	"time"
)

// PermanentError marks a handler error that retrying cannot fix, such as
// invalid args. A job that returns one goes to the dead state at once.
type PermanentError struct {
	// Err is the handler's error, recorded in the job's errors.
	Err error
}

// Permanent wraps err so that the job it fails is not retried.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// Error implements error.
func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// IsPermanent reports whether err, or any error it wraps, is permanent.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// ArgsError says which field of a job's args is invalid and why.
type ArgsError struct {
	// Field is the args field at fault, or empty when the args as a whole
	// are wrong.
	Field string
	// Reason says what is wrong with it.
	Reason string
}

// Error implements error.
func (e *ArgsError) Error() string {
	if e.Field == "" {
		return "invalid args: " + e.Reason
	}
	return fmt.Sprintf("invalid args: %s: %s", e.Field, e.Reason)
}

// InvalidArgs returns a permanent error saying that field is invalid.
func InvalidArgs(field, format string, a ...any) error {
	return Permanent(&ArgsError{Field: field, Reason: fmt.Sprintf(format, a...)})
}

// ErrLeaseLost is the cause of a handler's context when another worker or
// the reaper took its job while it ran (context.Cause(ctx)), and is wrapped
// by the error of a write fenced on a lease that no longer holds its job:
// the caller no longer holds the job's lease.
var ErrLeaseLost = errors.New("lease lost")

// ErrCancelled is the cause of a handler's context when its job was
// cancelled while running.
var ErrCancelled = errors.New("job cancelled")

// SnoozeError is the error of a handler that asks for its job to run again
// later, not having failed: see Snooze.
type SnoozeError struct {
	// Duration is how long from now the job waits before it runs again.
	Duration time.Duration
}

// Snooze returns the error a handler returns to have its job run again
// after d (at once when d is not positive), as an asynq or River handler
// snoozes: the attempt is not counted against the job's MaxAttempts and
// no error is recorded in the job's Errors. A job whose cancel was
// requested while it ran ends cancelled instead. Use it for work that
// cannot be done yet (a resource not ready, a rate limit's window), not
// for failures, which retry with backoff.
func Snooze(d time.Duration) error { return &SnoozeError{Duration: max(d, 0)} }

// Error implements error.
func (e *SnoozeError) Error() string { return fmt.Sprintf("snoozed for %s", e.Duration) }

// CancelError is the error of a handler that ends its job cancelled: see
// Cancel.
type CancelError struct {
	// Err says why the job was cancelled.
	Err error
}

// Cancel returns the error a handler returns to end its job cancelled, with
// err as the reason recorded in the job's Errors: the job is not retried,
// whatever attempts it has left (asynq's SkipRetry, River's JobCancel). A
// nil err is "no reason given".
func Cancel(err error) error {
	if err == nil {
		err = errors.New("no reason given")
	}
	return &CancelError{Err: err}
}

// Error implements error.
func (e *CancelError) Error() string { return "cancelled by its handler: " + e.Err.Error() }

// Unwrap returns the reason.
func (e *CancelError) Unwrap() error { return e.Err }
