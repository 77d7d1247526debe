package jobs_test

import (
	"strings"
	"testing"

	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

const validTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// A job document another program wrote decodes whatever its trace fields
// hold: a value docket cannot carry is dropped, never an error (which
// would bury the job as malformed).
func TestTraceHeadersDecodeWhateverTheDocumentHolds(t *testing.T) {
	cases := []struct {
		name  string
		value any
		want  jobs.TraceHeader
	}{
		{"valid", validTraceparent, validTraceparent},
		{"garbage string", "not a traceparent", "not a traceparent"}, // the tracer ignores it
		{"int", 42, ""},
		{"document", bson.D{{Key: "a", Value: 1}}, ""},
		{"array", bson.A{validTraceparent}, ""},
		{"null", nil, ""},
		{"binary", bson.Binary{Data: []byte(validTraceparent)}, ""},
		{"huge", validTraceparent + strings.Repeat("-x", 50_000), ""},
		{"control bytes", validTraceparent + "\x1b[2J", ""},
		{"not UTF-8", "00-\xff\xfe", ""},
		{"non-ASCII", "00-é", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw, err := bson.Marshal(bson.D{
				{Key: "_id", Value: "j"}, {Key: "traceparent", Value: c.value}, {Key: "tracestate", Value: c.value},
			})
			require.NoError(t, err)
			var j jobs.Job
			require.NoError(t, bson.Unmarshal(raw, &j))
			require.Equal(t, "j", j.ID)
			require.Equal(t, c.want, j.Traceparent)
			require.Equal(t, c.want, j.Tracestate)
		})
	}
}

// Docket writes the fields as strings, and leaves them out when empty.
func TestTraceHeadersEncodeAsStrings(t *testing.T) {
	b, err := bson.Marshal(jobs.Job{ID: "j", Args: bson.Raw{5, 0, 0, 0, 0}, Traceparent: validTraceparent})
	raw := bson.Raw(b)
	require.NoError(t, err)
	require.Equal(t, validTraceparent, raw.Lookup("traceparent").StringValue())
	_, err = raw.LookupErr("tracestate")
	require.Error(t, err, "an empty tracestate is left out")
}

func TestTraceHeaderProblem(t *testing.T) {
	require.Empty(t, jobs.TraceHeaderProblem(""))
	require.Empty(t, jobs.TraceHeaderProblem(validTraceparent))
	require.Empty(t, jobs.TraceHeaderProblem(strings.Repeat("a", jobs.MaxTraceHeaderBytes)))
	require.Equal(t, "513 bytes is over the 512-byte limit of a trace header", jobs.TraceHeaderProblem(strings.Repeat("a", jobs.MaxTraceHeaderBytes+1)))
	require.Equal(t, "holds a byte outside printable ASCII", jobs.TraceHeaderProblem("a\nb"))
}
