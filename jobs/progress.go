package jobs

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/docketq/docket/jobs/internal/textcut"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// MaxProgressMessageBytes bounds a progress message: a longer one is cut,
// between characters, to at most this many bytes.
const MaxProgressMessageBytes = 200

// ErrNoProgressHere is Progress's error outside a handler run by a worker.
var ErrNoProgressHere = errors.New("no job to report progress for: Progress takes the context a worker gave the handler")

// ErrProgressNaN is Progress's error for a fraction that is NaN.
var ErrProgressNaN = errors.New("progress: the fraction is NaN")

// ProgressReport is how far a running job has got, as its handler last
// reported it (Progress) and as stored in the job's progress field.
type ProgressReport struct {
	// Fraction is the share done, from 0 to 1.
	Fraction float64 `bson:"fraction"`
	// Message says what the handler is doing, at most
	// MaxProgressMessageBytes of valid UTF-8; it may be empty.
	Message string `bson:"message"`
	// At is when the handler reported it.
	At time.Time `bson:"at"`
}

type progressKey struct{}

// WithProgressReporter returns ctx for a handler, whose Progress reports
// are passed to report, checked and bounded, in the order made. A worker
// gives its handlers such a context; a test of a handler may use it to
// see what the handler reports.
func WithProgressReporter(ctx context.Context, report func(ProgressReport)) context.Context {
	return context.WithValue(ctx, progressKey{}, report)
}

// Progress reports how far the job whose handler ctx is has got: fraction
// is the share done (clamped to 0..1; NaN is refused with ErrProgressNaN)
// and message says what it is doing (invalid UTF-8 replaced by U+FFFD, cut
// to MaxProgressMessageBytes). It costs no command: the worker's next
// lease renewal writes the latest report into the job's progress field,
// so reports made between two renewals coalesce, the last one wins; the
// write that finishes the job stores one made since. A write whose lease
// was lost writes nothing. The progress stays on the job once it finishes
// and is cleared when the job is given back or claimed again.
// Outside a handler it returns ErrNoProgressHere; a handler may ignore the
// error.
func Progress(ctx context.Context, fraction float64, message string) error {
	report, ok := ctx.Value(progressKey{}).(func(ProgressReport))
	if !ok {
		return ErrNoProgressHere
	}
	if math.IsNaN(fraction) {
		return ErrProgressNaN
	}
	report(ProgressReport{Fraction: min(max(fraction, 0), 1), Message: boundMessage(message), At: time.Now()})
	return nil
}

// boundMessage is s as valid UTF-8 of at most MaxProgressMessageBytes,
// cut between characters.
func boundMessage(s string) string { return textcut.Bytes(s, MaxProgressMessageBytes) }

// UnmarshalBSONValue reads a stored progress field field by field, as
// another application may have written it: it never fails. A fraction
// that is not a finite number from 0 to 1 reads as NaN (shown as unknown),
// a message that is not a string reads as empty, one that is not valid
// UTF-8 or too long is bounded as Progress bounds it, and a value that is
// not a document reads as a zero report with a NaN fraction.
func (p *ProgressReport) UnmarshalBSONValue(typ byte, data []byte) error {
	*p = readProgress(bson.RawValue{Type: bson.Type(typ), Value: data})
	return nil
}

// readProgress reads a stored progress field v as UnmarshalBSONValue
// does.
func readProgress(v bson.RawValue) ProgressReport {
	p := ProgressReport{Fraction: math.NaN()}
	doc, ok := v.DocumentOK()
	if !ok || doc.Validate() != nil {
		return p
	}
	if f, ok := doc.Lookup("fraction").AsFloat64OK(); ok && f >= 0 && f <= 1 {
		p.Fraction = f
	}
	if m, ok := doc.Lookup("message").StringValueOK(); ok {
		p.Message = boundMessage(m)
	}
	if at, ok := doc.Lookup("at").TimeOK(); ok {
		p.At = at.UTC()
	}
	return p
}

// Known reports whether p's fraction is known: a number from 0 to 1.
func (p ProgressReport) Known() bool { return p.Fraction >= 0 && p.Fraction <= 1 }

// Percent is the fraction as a whole percentage, rounded down (100 only
// when done), or -1 when it is not Known.
func (p ProgressReport) Percent() int {
	if !p.Known() {
		return -1
	}
	return int(math.Floor(p.Fraction * 100))
}
