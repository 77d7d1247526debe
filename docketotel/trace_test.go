package docketotel_test

import (
	"strings"
	"testing"

	"github.com/docketq/docket"
	"github.com/docketq/docket/docketotel"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// An attempt continues the trace its insert was made in: the job carries
// the insert's span as its traceparent, the attempt's span is its child
// and links to it, the handler runs in the attempt's span, and the
// finishing write has a span of its own under it.
func TestAttemptContinuesTheInsertingTrace(t *testing.T) {
	t.Parallel()
	b := setup(t, docketotel.Config{})
	ctx, request := b.tp.Tracer("app").Start(b.ctx, "request")
	res, err := b.client.Insert(ctx, TracedArgs{Mode: "ok"}, nil)
	require.NoError(t, err)
	request.End()
	b.work(t)

	send := b.spans(t, "send default", res.ID, 1)[0]
	require.Equal(t, trace.SpanKindProducer, send.SpanKind)
	require.Equal(t, request.SpanContext().SpanID(), send.Parent.SpanID())
	require.Equal(t, "send", attr(send, "messaging.operation.type").AsString())
	require.Equal(t, "docket", attr(send, "messaging.system").AsString())
	require.Equal(t, "default", attr(send, "messaging.destination.name").AsString())
	require.Equal(t, "traced", attr(send, "messaging.docket.job.kind").AsString())

	job, err := b.client.JobGet(b.ctx, res.JobID())
	require.NoError(t, err)
	require.Equal(t, "00-"+send.SpanContext.TraceID().String()+"-"+send.SpanContext.SpanID().String()+"-01", string(job.Traceparent))

	process := b.spans(t, "process default", res.ID, 1)[0]
	require.Equal(t, trace.SpanKindConsumer, process.SpanKind)
	require.Equal(t, send.SpanContext.TraceID(), process.SpanContext.TraceID())
	require.Equal(t, send.SpanContext.SpanID(), process.Parent.SpanID())
	require.True(t, process.Parent.IsRemote())
	require.Len(t, process.Links, 1)
	require.Equal(t, send.SpanContext.SpanID(), process.Links[0].SpanContext.SpanID())
	require.Equal(t, "process", attr(process, "messaging.operation.type").AsString())
	require.Equal(t, "default", attr(process, "messaging.destination.name").AsString())
	require.Equal(t, "traced", attr(process, "messaging.docket.job.kind").AsString())
	require.Equal(t, int64(1), attr(process, "messaging.docket.job.attempt").AsInt64())
	require.Equal(t, "succeeded", attr(process, "messaging.docket.job.outcome").AsString())
	require.Equal(t, codes.Unset, process.Status.Code)

	b.mu.Lock()
	require.Equal(t, process.SpanContext.SpanID(), b.inHandler[res.ID].SpanID(), "the handler runs in the attempt's span")
	b.mu.Unlock()

	settle := b.spans(t, "settle default", res.ID, 1)[0]
	require.Equal(t, trace.SpanKindClient, settle.SpanKind)
	require.Equal(t, process.SpanContext.SpanID(), settle.Parent.SpanID())
	require.Equal(t, "settle", attr(settle, "messaging.operation.type").AsString())
	require.Equal(t, "complete", attr(settle, "messaging.operation.name").AsString())
	require.False(t, settle.EndTime.After(process.EndTime), "the write ends within the attempt")
	require.False(t, settle.StartTime.Before(process.StartTime))
}

// Each attempt's span carries its number and outcome, failures an error
// status with the handler's error, and the settle span names the write.
func TestAttemptSpansCarryTheirOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t, docketotel.Config{})
	type attempt struct {
		outcome, settle, errType string
		status                   codes.Code
	}
	cases := map[string][]attempt{
		"ok":     {{"succeeded", "complete", "", codes.Unset}},
		"flaky":  {{"retried", "fail", "*errors.errorString", codes.Error}, {"succeeded", "complete", "", codes.Unset}},
		"bad":    {{"dead", "fail", "*jobs.PermanentError", codes.Error}},
		"cancel": {{"cancelled", "cancel", "*jobs.CancelError", codes.Error}},
		"snooze": {{"snoozed", "snooze", "", codes.Unset}, {"succeeded", "complete", "", codes.Unset}},
	}
	ids := map[string]string{}
	for mode := range cases {
		res, err := b.client.Insert(b.ctx, TracedArgs{Mode: mode}, nil)
		require.NoError(t, err)
		ids[mode] = res.ID
	}
	b.work(t)
	for mode, want := range cases {
		process := b.spans(t, "process default", ids[mode], len(want))
		settles := b.spans(t, "settle default", ids[mode], len(want))
		for i, w := range want {
			p, s := process[i], settles[i]
			require.Equal(t, w.outcome, attr(p, "messaging.docket.job.outcome").AsString(), mode)
			require.Equal(t, w.status, p.Status.Code, mode)
			require.Equal(t, w.errType, attr(p, "error.type").AsString(), mode)
			require.Equal(t, w.outcome, attr(s, "messaging.docket.job.outcome").AsString(), mode)
			require.Equal(t, w.settle, attr(s, "messaging.operation.name").AsString(), mode)
			require.Equal(t, p.SpanContext.SpanID(), s.Parent.SpanID(), mode)
		}
		// Every attempt continues the one trace of the insert.
		require.Equal(t, process[0].SpanContext.TraceID(), process[len(process)-1].SpanContext.TraceID(), mode)
	}
	retried := b.spans(t, "process default", ids["flaky"], 2)
	require.Equal(t, int64(1), attr(retried[0], "messaging.docket.job.attempt").AsInt64())
	require.Equal(t, int64(2), attr(retried[1], "messaging.docket.job.attempt").AsInt64())
	require.Equal(t, "flaky, first time", retried[0].Status.Description)
}

// With NewTrace an attempt starts a trace of its own, linked to the span
// that inserted its job.
func TestNewTraceLinksTheAttemptToItsInsert(t *testing.T) {
	t.Parallel()
	b := setup(t, docketotel.Config{NewTrace: true})
	res, err := b.client.Insert(b.ctx, TracedArgs{Mode: "ok"}, nil)
	require.NoError(t, err)
	b.work(t)
	send := b.spans(t, "send default", res.ID, 1)[0]
	process := b.spans(t, "process default", res.ID, 1)[0]
	require.False(t, process.Parent.IsValid(), "a root")
	require.NotEqual(t, send.SpanContext.TraceID(), process.SpanContext.TraceID())
	require.Len(t, process.Links, 1)
	require.Equal(t, send.SpanContext, process.Links[0].SpanContext.WithRemote(false))
}

// A traceparent the caller gives is the job's creation context: the insert
// keeps it rather than putting its own span's.
func TestInsertKeepsTheCallersTraceparent(t *testing.T) {
	t.Parallel()
	b := setup(t, docketotel.Config{})
	const mine = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	opts := &docket.InsertOpts{Traceparent: mine, Tracestate: "congo=t61rcWkgMzE"}
	res, err := b.client.Insert(b.ctx, TracedArgs{Mode: "ok"}, opts)
	require.NoError(t, err)
	require.Equal(t, &docket.InsertOpts{Traceparent: mine, Tracestate: "congo=t61rcWkgMzE"}, opts, "the caller's options are not modified")
	b.work(t)
	process := b.spans(t, "process default", res.ID, 1)[0]
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", process.SpanContext.TraceID().String())
	require.Equal(t, "b7ad6b7169203331", process.Parent.SpanID().String())
	require.Equal(t, "congo=t61rcWkgMzE", process.Parent.TraceState().String())
}

// A batch is one send span: its jobs share it as their creation context.
func TestInsertManyIsOneSendSpan(t *testing.T) {
	t.Parallel()
	b := setup(t, docketotel.Config{})
	res, err := b.client.InsertMany(b.ctx, []docket.InsertManyParams{
		{Args: TracedArgs{Mode: "ok"}}, {Args: TracedArgs{Mode: "ok"}, Opts: &docket.InsertOpts{Queue: "other"}},
	})
	require.NoError(t, err)
	var send []string
	for _, s := range b.exp.GetSpans() {
		send = append(send, s.Name)
		require.Equal(t, int64(2), attr(s, "messaging.batch.message_count").AsInt64())
		require.Empty(t, attr(s, "messaging.destination.name").AsString(), "two queues: no one destination")
	}
	require.Equal(t, []string{"send"}, send)
	sc := b.exp.GetSpans()[0].SpanContext
	for _, r := range res {
		job, err := b.client.JobGet(b.ctx, r.JobID())
		require.NoError(t, err)
		require.Contains(t, string(job.Traceparent), sc.SpanID().String())
	}
}

// Outside the pool (dockettest, Client.Handler) a handler still runs in a
// span of its own.
func TestHandlerOutsideThePoolHasItsOwnSpan(t *testing.T) {
	t.Parallel()
	b := setup(t, docketotel.Config{})
	h, _, ok := b.client.Handler("traced")
	require.True(t, ok)
	job := &jobs.Job{ID: "j1", Kind: "traced", Queue: "default", Attempt: 1, Args: bson.Raw(mustMarshal(t, TracedArgs{Mode: "bad"}))}
	require.Error(t, h.Work(b.ctx, job))
	s := b.spans(t, "process default", "j1", 1)[0]
	require.Equal(t, codes.Error, s.Status.Code)
	require.Equal(t, "*jobs.PermanentError", attr(s, "error.type").AsString())
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := bson.Marshal(v)
	require.NoError(t, err)
	return b
}

// A caller's trace state longer than a job carries does not fail the
// insert: the job carries its first members that fit (W3C Trace Context
// drops members from the end), here the first two.
func TestInsertUnderALongTracestateSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t, docketotel.Config{})
	long := strings.Repeat("x", 200)
	ts, err := trace.ParseTraceState("a=" + long + ",b=" + long + ",c=" + long + ",d=" + long)
	require.NoError(t, err)
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true,
	})
	res, err := b.client.Insert(trace.ContextWithRemoteSpanContext(b.ctx, parent), TracedArgs{Mode: "ok"}, nil)
	require.NoError(t, err)
	job, err := b.client.JobGet(b.ctx, res.JobID())
	require.NoError(t, err)
	require.Contains(t, string(job.Traceparent), parent.TraceID().String())
	require.Equal(t, "a="+long+",b="+long, string(job.Tracestate))
}
