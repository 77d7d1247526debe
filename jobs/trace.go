package jobs

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// MaxTraceHeaderBytes bounds a job's traceparent and tracestate (W3C Trace
// Context; a version-00 traceparent is 55 bytes, and vendors propagate at
// least 512 bytes of tracestate).
const MaxTraceHeaderBytes = 512

// TraceHeader is a W3C Trace Context header a job carries from its insert
// to its attempts (Job.Traceparent, Job.Tracestate). A document written by
// another program may hold anything there: a value that is not a string,
// is over MaxTraceHeaderBytes or holds a byte outside printable ASCII
// decodes as empty, so that it is ignored rather than fatal to the job.
type TraceHeader string

// UnmarshalBSONValue implements bson.ValueUnmarshaler: it never fails.
func (h *TraceHeader) UnmarshalBSONValue(typ byte, data []byte) error {
	*h = ""
	if bson.Type(typ) != bson.TypeString {
		return nil
	}
	s, ok := bson.RawValue{Type: bson.TypeString, Value: data}.StringValueOK()
	if !ok || TraceHeaderProblem(s) != "" {
		return nil
	}
	*h = TraceHeader(s)
	return nil
}

// TraceHeaderProblem says what keeps s from being a job's traceparent or
// tracestate, or returns "" when nothing does: it must be at most
// MaxTraceHeaderBytes of printable ASCII, as W3C Trace Context headers are.
// Whether it parses is the tracer's business: one that does not is ignored.
func TraceHeaderProblem(s string) string {
	if len(s) > MaxTraceHeaderBytes {
		return fmt.Sprintf("%d bytes is over the %d-byte limit of a trace header", len(s), MaxTraceHeaderBytes)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return "holds a byte outside printable ASCII"
		}
	}
	return ""
}
