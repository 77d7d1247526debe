package docketotel

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/docketq/docket"
	"github.com/docketq/docket/jobs"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of docketotel's spans.
const ScopeName = "github.com/docketq/docket/docketotel"

// Attributes of docket's own, in the messaging.docket namespace the
// conventions reserve for a system's attributes.
const (
	// KindKey is the job's kind.
	KindKey = attribute.Key("messaging.docket.job.kind")
	// AttemptKey is the attempt's number, 1 for the first.
	AttemptKey = attribute.Key("messaging.docket.job.attempt")
	// OutcomeKey is how the attempt ended: the values of worker.Outcome
	// (succeeded, retried, dead, cancelled, snoozed, released, lease_lost,
	// unrecorded).
	OutcomeKey = attribute.Key("messaging.docket.job.outcome")
	// DuplicateKey is true on an insert whose job's unique key was held:
	// messaging.message.id is the holder's id, and no job was added.
	DuplicateKey = attribute.Key("messaging.docket.insert.duplicate")
)

// system is messaging.system: docket is not among the conventions'
// well-known systems, so it names itself.
var system = semconv.MessagingSystemKey.String("docket")

// Config configures the tracing of a client. The zero value is usable.
type Config struct {
	// TracerProvider makes the spans. Defaults to the global one
	// (otel.GetTracerProvider).
	TracerProvider trace.TracerProvider
	// NewTrace makes each attempt's span the root of a trace of its own,
	// linked to the span that inserted the job, instead of its child: for
	// jobs that run long after their insert (a delay of days, retries
	// over hours), whose spans would otherwise stretch the inserting trace.
	// Defaults to false: an attempt continues the inserting trace.
	NewTrace bool
}

// Instrument traces c's inserts and the attempts of its pool (see the
// package doc). Call it before c starts: it adds a middleware (Use), an
// insert middleware (UseInsert) and an observer (AddObserver), and the
// first and last fail after Start. Instrument a client once.
func Instrument(c *docket.Client, cfg Config) error {
	if c == nil {
		return errors.New("docketotel: Instrument: nil client")
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	t := &tracer{tracer: tp.Tracer(ScopeName), newTrace: cfg.NewTrace, attempts: map[attemptKey]*attempt{}}
	if err := c.Use(t.middleware); err != nil {
		return fmt.Errorf("docketotel: %w", err)
	}
	if err := c.AddObserver(&observer{t: t}); err != nil {
		return fmt.Errorf("docketotel: %w", err)
	}
	if err := c.UseInsert(t.insert); err != nil {
		return fmt.Errorf("docketotel: %w", err)
	}
	return nil
}

// maxValueBytes bounds a string attribute taken from a job document,
// which another program may have written with anything in it.
const maxValueBytes = 256

// clean returns s as a span may carry it: valid UTF-8, at most
// maxValueBytes, cut on a character boundary.
func clean(s string) string {
	if len(s) > maxValueBytes+utf8.UTFMax {
		s = s[:maxValueBytes+utf8.UTFMax]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	for len(s) > maxValueBytes {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// jobAttributes are the attributes of a span about one job's attempt.
func jobAttributes(job *jobs.Job, op attribute.KeyValue, name string) []attribute.KeyValue {
	return []attribute.KeyValue{
		system, op, semconv.MessagingOperationName(name),
		semconv.MessagingDestinationName(clean(job.Queue)),
		semconv.MessagingMessageID(clean(job.ID)),
		KindKey.String(clean(job.Kind)),
		AttemptKey.Int(job.Attempt),
	}
}
