package docketotel_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/docketotel"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// TracedArgs steer the test handler: Mode "ok" succeeds, "flaky" fails its
// first attempt, "bad" fails for good, "cancel" cancels itself, "snooze"
// snoozes its first attempt.
type TracedArgs struct {
	Mode string `bson:"mode"`
}

func (TracedArgs) Kind() string { return "traced" }

// bundle is what a test of this package works with.
type bundle struct {
	ctx    context.Context
	db     *mongo.Database
	client *docket.Client
	exp    *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	// inHandler records the span context each handler's context carries.
	mu        sync.Mutex
	inHandler map[string]trace.SpanContext
}

// setup returns an instrumented client of a database of its own, not
// started, whose spans go to b.exp.
func setup(t *testing.T, cfg docketotel.Config) *bundle {
	t.Helper()
	b := &bundle{ctx: context.Background(), db: testdb.NewDB(t), exp: tracetest.NewInMemoryExporter(), inHandler: map[string]trace.SpanContext{}}
	b.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(b.exp))
	t.Cleanup(func() { _ = b.tp.Shutdown(context.Background()) })
	c, err := docket.NewClient(b.db, docket.Config{
		Logger:    zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
		RetryBase: time.Millisecond, RetryMax: time.Millisecond,
	})
	require.NoError(t, err)
	var snoozed sync.Map
	docket.MustAddHandler(c, func(ctx context.Context, job *jobs.Job, a TracedArgs) error {
		b.mu.Lock()
		b.inHandler[job.ID] = trace.SpanContextFromContext(ctx)
		b.mu.Unlock()
		switch a.Mode {
		case "flaky":
			if job.Attempt == 1 {
				return errors.New("flaky, first time")
			}
		case "bad":
			return jobs.Permanent(errors.New("bad args"))
		case "cancel":
			return jobs.Cancel(errors.New("not wanted"))
		case "snooze":
			if _, again := snoozed.LoadOrStore(job.ID, true); !again {
				return jobs.Snooze(time.Millisecond)
			}
		}
		return nil
	}, jobs.KindOptions{})
	cfg.TracerProvider = b.tp
	require.NoError(t, docketotel.Instrument(c, cfg))
	b.client = c
	return b
}

// work starts the client, waits until no job is left to run, and stops it.
func (b *bundle) work(t *testing.T) {
	t.Helper()
	require.NoError(t, b.client.Start(b.ctx))
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	require.NoError(t, b.client.WaitIdle(ctx, docket.WaitParams{}))
	require.NoError(t, b.client.Stop(b.ctx))
}

// spans returns the ended spans named name whose messaging.message.id is
// id, once there are want of them.
func (b *bundle) spans(t *testing.T, name, id string, want int) tracetest.SpanStubs {
	t.Helper()
	var got tracetest.SpanStubs
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got = nil
		for _, s := range b.exp.GetSpans() {
			if s.Name == name && attr(s, "messaging.message.id").AsString() == id {
				got = append(got, s)
			}
		}
		assert.Len(c, got, want)
	}, 10*time.Second, 10*time.Millisecond)
	return got
}

// attr returns s's attribute key (an empty value when s lacks it).
func attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}
