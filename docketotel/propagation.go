package docketotel

import (
	"context"
	"strings"

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
// keep) or ctx has no valid span context. A tracestate over what a job
// carries keeps the members that fit, so that tracing never fails an
// insert.
func injected(ctx context.Context, o docket.InsertOpts) docket.InsertOpts {
	if o.Traceparent != "" {
		return o
	}
	carrier := propagation.MapCarrier{}
	traceContext.Inject(ctx, carrier)
	o.Traceparent, o.Tracestate = carrier[traceparentField], fitted(carrier[tracestateField])
	return o
}

// fitted is tracestate cut to the members that fit in
// jobs.MaxTraceHeaderBytes: W3C Trace Context drops members from the
// end, the oldest, when a header is too long to propagate.
func fitted(tracestate string) string {
	for len(tracestate) > jobs.MaxTraceHeaderBytes {
		i := strings.LastIndexByte(tracestate, ',')
		if i < 0 {
			return ""
		}
		tracestate = tracestate[:i]
	}
	return tracestate
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
