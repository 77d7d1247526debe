package docketotel_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket"

	"github.com/docketq/docket/docketotel"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

const validTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// insertByHand inserts a job the way another program does, by the README's
// schema, with extra fields on top.
func (b *bundle) insertByHand(t *testing.T, id string, extra ...bson.E) {
	t.Helper()
	now := time.Now()
	doc := bson.D{
		{Key: "_id", Value: id}, {Key: "kind", Value: "traced"}, {Key: "args", Value: bson.D{{Key: "mode", Value: "ok"}}},
		{Key: "state", Value: "available"}, {Key: "queue", Value: "default"}, {Key: "priority", Value: 0},
		{Key: "runAt", Value: now}, {Key: "attempt", Value: 0}, {Key: "maxAttempts", Value: 25},
		{Key: "errors", Value: bson.A{}}, {Key: "createdAt", Value: now}, {Key: "updatedAt", Value: now},
	}
	_, err := b.db.Collection("jobs").InsertOne(b.ctx, append(doc, extra...))
	require.NoError(t, err)
}

// A traceparent docket cannot use (another type, garbage, a version it
// does not know, huge, control bytes) is ignored: the job runs, its
// attempt's span starts a trace of its own. A bad tracestate beside a good
// traceparent loses only itself.
func TestForeignTraceparentIsIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t, docketotel.Config{})
	ignored := map[string]any{
		"int":           42,
		"document":      bson.D{{Key: "traceparent", Value: validTraceparent}},
		"garbage":       "not a traceparent",
		"version ff":    "ff" + validTraceparent[2:],
		"zero trace id": "00-00000000000000000000000000000000-b7ad6b7169203331-01",
		"short":         validTraceparent[:40],
		"huge":          validTraceparent + strings.Repeat("-0", 100_000),
		"escape":        validTraceparent + "\x1b[2J",
		"not UTF-8":     "00-\xff\xfe",
	}
	for id, v := range ignored {
		b.insertByHand(t, id, bson.E{Key: "traceparent", Value: v}, bson.E{Key: "tracestate", Value: v})
	}
	b.insertByHand(t, "bad tracestate", bson.E{Key: "traceparent", Value: validTraceparent}, bson.E{Key: "tracestate", Value: 17})
	b.insertByHand(t, "garbage tracestate", bson.E{Key: "traceparent", Value: validTraceparent}, bson.E{Key: "tracestate", Value: "=,=,\x01"})
	b.work(t)

	for id := range ignored {
		job, err := b.client.JobGet(b.ctx, docket.StringJobID(id))
		require.NoError(t, err)
		require.Equal(t, jobs.StateSucceeded, job.State, id)
		require.Equal(t, 1, job.Attempt, id)
		p := b.spans(t, "process default", id, 1)[0]
		require.False(t, p.Parent.IsValid(), id)
		require.Empty(t, p.Links, id)
		require.Equal(t, "succeeded", attr(p, "messaging.docket.job.outcome").AsString(), id)
	}
	for _, id := range []string{"bad tracestate", "garbage tracestate"} {
		p := b.spans(t, "process default", id, 1)[0]
		require.Equal(t, "0af7651916cd43dd8448eb211c80319c", p.SpanContext.TraceID().String(), id)
		require.Equal(t, "b7ad6b7169203331", p.Parent.SpanID().String(), id)
		require.Empty(t, p.Parent.TraceState().String(), id)
	}
}

// A program in another language sets the traceparent (the README's Python
// example, run with Debian's pymongo): the attempt continues its trace.
func TestPythonInsertedTraceparentIsContinued(t *testing.T) {
	t.Parallel()
	const python = "/usr/bin/python3" // Debian's, which has python3-pymongo
	if out, err := exec.Command(python, "-c", "import pymongo").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import pymongo (install Debian's python3-pymongo, as .ci/run does): %v\n%s", python, err, out)
	}
	b := setup(t, docketotel.Config{})
	out, err := exec.Command(python, "testdata/enqueue_traced.py", testdb.URI(), b.db.Name()).CombinedOutput()
	require.NoError(t, err, "%s", out)
	f := strings.Fields(string(out))
	require.Len(t, f, 2, "%s", out)
	id, traceparent := f[0], f[1]
	b.work(t)
	p := b.spans(t, "process default", id, 1)[0]
	require.Equal(t, traceparent[3:35], p.SpanContext.TraceID().String())
	require.Equal(t, traceparent[36:52], p.Parent.SpanID().String())
	require.Equal(t, "succeeded", attr(p, "messaging.docket.job.outcome").AsString())
}
