package docketotel

import (
	"context"

	"github.com/docketq/docket"
	"github.com/docketq/docket/jobs"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceContext is the format of the job document's traceparent and
// tracestate: W3C Trace Context, whatever propagator the program set
// globally, as other languages write the fields too.
var traceContext = propagation.TraceContext{}

// Field names of the W3C headers, as the propagator's carrier has them.
const (
	traceparentField = "traceparent"
	tracestateField  = "tracestate"
)

// injected returns o with ctx's span context as its traceparent and
// tracestate, or o unchanged when it carries a traceparent already (a
// creation context of the caller's own, which the conventions say to
// keep) or ctx has no valid span context.
func injected(ctx context.Context, o docket.InsertOpts) docket.InsertOpts {
	if o.Traceparent != "" {
		return o
	}
	carrier := propagation.MapCarrier{}
	traceContext.Inject(ctx, carrier)
	o.Traceparent, o.Tracestate = carrier[traceparentField], carrier[tracestateField]
	return o
}

// extracted returns the span context job carries, invalid when it carries
// none, or one that does not parse (a foreign version, garbage): the
// propagator ignores those.
func extracted(job *jobs.Job) trace.SpanContext {
	if job.Traceparent == "" {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{traceparentField: string(job.Traceparent)}
	if job.Tracestate != "" {
		carrier[tracestateField] = string(job.Tracestate)
	}
	return trace.SpanContextFromContext(traceContext.Extract(context.Background(), carrier))
}
