package docketotel_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/docketotel"
	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The test binary run with inserterEnv set is the inserting process of
// TestAttemptInAnotherProcessContinuesTheTrace: it inserts one job into
// the database named by the environment, in a traced request, and prints
// the trace id and span id of its send span, and the job's id.
const (
	inserterEnv   = "DOCKETOTEL_TEST_INSERTER"
	inserterURI   = "DOCKETOTEL_TEST_URI"
	inserterDB    = "DOCKETOTEL_TEST_DB"
	inserterQueue = "default"
)

func runInserter() int {
	if err := insertTraced(os.Getenv(inserterURI), os.Getenv(inserterDB)); err != nil {
		fmt.Fprintln(os.Stderr, "inserter:", err)
		return 1
	}
	return 0
}

func insertTraced(uri, dbName string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mc, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return err
	}
	defer func() { _ = mc.Disconnect(context.Background()) }()
	c, err := docket.NewClient(mc.Database(dbName), docket.Config{})
	if err != nil {
		return err
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	if err := docketotel.Instrument(c, docketotel.Config{TracerProvider: tp}); err != nil {
		return err
	}
	rctx, request := tp.Tracer("app").Start(ctx, "request")
	res, err := c.Insert(rctx, TracedArgs{Mode: "ok"}, &docket.InsertOpts{Queue: inserterQueue})
	request.End()
	if err != nil {
		return err
	}
	for _, s := range exp.GetSpans() {
		if s.Name == "send "+inserterQueue {
			fmt.Println(s.SpanContext.TraceID(), s.SpanContext.SpanID(), res.ID)
			return nil
		}
	}
	return fmt.Errorf("no send span among %d", len(exp.GetSpans()))
}

// The trace crosses processes through the database: a job inserted by
// another process, traced there, is worked here in a child of that
// process's send span.
func TestAttemptInAnotherProcessContinuesTheTrace(t *testing.T) {
	t.Parallel()
	b := setup(t, docketotel.Config{})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), inserterEnv+"=1", inserterURI+"="+testdb.URI(), inserterDB+"="+b.db.Name())
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	f := strings.Fields(string(out))
	require.Len(t, f, 3, "%s", out)
	traceID, spanID, jobID := f[0], f[1], f[2]

	b.work(t)
	process := b.spans(t, "process "+inserterQueue, jobID, 1)[0]
	require.Equal(t, traceID, process.SpanContext.TraceID().String())
	require.Equal(t, spanID, process.Parent.SpanID().String())
	require.True(t, process.Parent.IsRemote())
	require.Equal(t, "succeeded", attr(process, "messaging.docket.job.outcome").AsString())
}

// bin/enqueue takes the caller's trace from the environment (TRACEPARENT,
// TRACESTATE): a job it enqueues, one or a batch, is worked here in that
// trace.
func TestEnqueueCommandContinuesTheEnvironmentsTrace(t *testing.T) {
	t.Parallel()
	b := setup(t, docketotel.Config{})
	enqueue := testdb.BuildBinary(t, "github.com/docketq/docket/cmd/enqueue", false)
	_, step := b.tp.Tracer("ci").Start(b.ctx, "deploy step")
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpan(b.ctx, step), carrier)
	step.End()
	env := append(os.Environ(), "DOCKET_MONGO_URI="+testdb.URI(), "DOCKET_DB="+b.db.Name(),
		"TRACEPARENT="+carrier["traceparent"], "TRACESTATE=vendor=opaque")
	var ids []string
	for _, c := range []struct {
		args  []string
		stdin string
	}{
		{[]string{"job", "--kind", "traced", "--args", `{"mode": "ok"}`}, ""},
		{[]string{"batch"}, `{"kind": "traced", "args": {"mode": "ok"}}` + "\n"},
	} {
		cmd := exec.Command(enqueue, c.args...)
		cmd.Env, cmd.Stdin = env, strings.NewReader(c.stdin)
		out, err := cmd.Output()
		require.NoError(t, err, "%s", out)
		ids = append(ids, strings.Fields(string(out))...)
	}
	require.Len(t, ids, 2)
	b.work(t)
	for _, id := range ids {
		p := b.spans(t, "process default", id, 1)[0]
		require.Equal(t, step.SpanContext().TraceID(), p.SpanContext.TraceID(), id)
		require.Equal(t, step.SpanContext().SpanID(), p.Parent.SpanID(), id)
		require.Equal(t, "vendor=opaque", p.Parent.TraceState().String(), id)
	}
}
