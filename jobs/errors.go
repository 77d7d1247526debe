package jobs

import (
	"errors"
	"fmt"
)

// PermanentError marks a handler error that retrying cannot fix, such as
// invalid args. A job that returns one goes to the dead state at once.
type PermanentError struct {
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

// ErrCancelled is the cause of a handler's context when its job was
// cancelled while running.
var ErrCancelled = errors.New("job cancelled")
