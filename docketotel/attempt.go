package docketotel

import (
	"context"
	"sync"

	"github.com/docketq/docket/jobs"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracer makes a client's spans. The pool tells of an attempt three times:
// the observer's Started (the attempt's span begins), the middleware
// around its handler (the handler runs in that span; the settle span
// begins as it returns), and the observer's Finished (both end, with the
// outcome). An attempt is known by its job's id and lease token.
type tracer struct {
	tracer   trace.Tracer
	newTrace bool

	mu       sync.Mutex
	attempts map[attemptKey]*attempt
}

type attemptKey struct{ id, token string }

func keyOf(job *jobs.Job) attemptKey { return attemptKey{job.ID, job.LeaseToken} }

// attempt is one attempt's spans.
type attempt struct {
	process trace.Span

	mu      sync.Mutex
	settle  trace.Span         // begun when the handler returned
	errType attribute.KeyValue // the handler's error's type, when it failed
	ended   bool               // Finished came: nothing more begins
}

// startProcess begins the span of an attempt of job, in the trace job's
// insert began (a child of its span, or linked to it with newTrace).
func (t *tracer) startProcess(job *jobs.Job) trace.Span {
	ctx := context.Background()
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(jobAttributes(job, semconv.MessagingOperationTypeProcess, "process")...),
	}
	if sc := extracted(job); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		if !t.newTrace {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	_, span := t.tracer.Start(ctx, "process "+clean(job.Queue), opts...)
	return span
}

func (t *tracer) begin(job *jobs.Job) {
	a := &attempt{process: t.startProcess(job)}
	t.mu.Lock()
	t.attempts[keyOf(job)] = a
	t.mu.Unlock()
}

func (t *tracer) lookup(job *jobs.Job) *attempt {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.attempts[keyOf(job)]
}

func (t *tracer) take(job *jobs.Job) *attempt {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.attempts[keyOf(job)]
	delete(t.attempts, keyOf(job))
	return a
}

// middleware runs the handler in its attempt's span. Outside the pool
// (dockettest, Client.Handler) there is no attempt: the span is its own,
// from the handler's start to its return.
func (t *tracer) middleware(next jobs.Handler) jobs.Handler {
	return jobs.HandlerFunc(func(ctx context.Context, job *jobs.Job) (err error) {
		a := t.lookup(job)
		if a == nil {
			span := t.startProcess(job)
			defer func() { endAlone(span, err); span.End() }()
			return next.Work(trace.ContextWithSpan(ctx, span), job)
		}
		returned := false
		defer func() { a.handlerReturned(t.tracer, job, err, returned) }()
		err = next.Work(trace.ContextWithSpan(ctx, a.process), job)
		returned = true
		return err
	})
}

// endAlone sets the status of a span of a handler run outside the pool.
func endAlone(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, clean(err.Error()))
		span.SetAttributes(semconv.ErrorType(err))
	}
}

// handlerReturned begins the settle span, unless the attempt ended
// already (its handler outlived its context).
func (a *attempt) handlerReturned(tr trace.Tracer, job *jobs.Job, err error, returned bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !returned:
		a.errType = semconv.ErrorTypeKey.String("panic")
	case err != nil:
		a.errType = semconv.ErrorType(err)
	}
	if a.ended {
		return
	}
	ctx := trace.ContextWithSpan(context.Background(), a.process)
	_, a.settle = tr.Start(ctx, "settle "+clean(job.Queue), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(jobAttributes(job, semconv.MessagingOperationTypeSettle, "settle")...))
}
