package cli

import (
	"os"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
)

// withEnvTrace returns o carrying the W3C trace context of the
// environment, TRACEPARENT and TRACESTATE (OpenTelemetry's environment
// carriers: a traced script or CI step sets them), so that the job's
// attempts continue the caller's trace. A value no job can carry (over
// jobs.MaxTraceHeaderBytes, or not printable ASCII) is ignored, as is a
// TRACESTATE without a TRACEPARENT.
func withEnvTrace(o queue.InsertOpts) queue.InsertOpts {
	tp := os.Getenv("TRACEPARENT")
	if o.Traceparent != "" || tp == "" || jobs.TraceHeaderProblem(tp) != "" {
		return o
	}
	o.Traceparent = tp
	if ts := os.Getenv("TRACESTATE"); jobs.TraceHeaderProblem(ts) == "" {
		o.Tracestate = ts
	}
	return o
}
