package queue_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

// An insert's trace context goes into the job as given; one no job can
// carry is refused, naming the field.
func TestNewJobCarriesItsTraceContext(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	j, err := queue.NewJob(queue.Insert{Kind: "k", Opts: queue.InsertOpts{Traceparent: tp, Tracestate: "a=b"}}, time.Now())
	require.NoError(t, err)
	require.Equal(t, jobs.TraceHeader(tp), j.Traceparent)
	require.Equal(t, jobs.TraceHeader("a=b"), j.Tracestate)

	for field, o := range map[string]queue.InsertOpts{
		"traceparent": {Traceparent: strings.Repeat("0", jobs.MaxTraceHeaderBytes+1)},
		"tracestate":  {Traceparent: tp, Tracestate: "a=b\n"},
	} {
		_, err := queue.NewJob(queue.Insert{Kind: "k", Opts: o}, time.Now())
		var ve *queue.ValidationError
		require.True(t, errors.As(err, &ve), "%v", err)
		require.Equal(t, field, ve.Field)
	}
}
