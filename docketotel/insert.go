package docketotel

import (
	"context"

	"github.com/docketq/docket"
	"github.com/docketq/docket/jobs"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// insert is the client's insert middleware: a PRODUCER span around the
// insert, whose context the jobs carry. A batch's jobs share it as their
// creation context: one span for the one command that sends them.
func (t *tracer) insert(next docket.InsertFunc) docket.InsertFunc {
	return func(ctx context.Context, params []docket.InsertManyParams) ([]docket.InsertResult, error) {
		name, attrs := insertSpan(params)
		ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
		defer span.End()
		traced := make([]docket.InsertManyParams, len(params))
		for i, p := range params {
			var o docket.InsertOpts
			if p.Opts != nil {
				o = *p.Opts // a copy: the caller's options stay as given
			}
			o = injected(ctx, o)
			traced[i] = docket.InsertManyParams{Args: p.Args, Opts: &o}
		}
		res, err := next(ctx, traced)
		if len(params) == 1 && len(res) == 1 && res[0].ID != "" {
			span.SetAttributes(semconv.MessagingMessageID(clean(res[0].ID)))
			if res[0].Duplicate {
				span.SetAttributes(DuplicateKey.Bool(true))
			}
		}
		if err != nil {
			span.SetStatus(codes.Error, clean(err.Error()))
			span.SetAttributes(semconv.ErrorType(err))
		}
		return res, err
	}
}

// insertSpan returns the name and attributes of the span of an insert of
// params: "send QUEUE" when its jobs go to one queue, "send" otherwise.
func insertSpan(params []docket.InsertManyParams) (string, []attribute.KeyValue) {
	attrs := []attribute.KeyValue{system, semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("insert")}
	if len(params) != 1 {
		attrs = append(attrs, semconv.MessagingBatchMessageCount(len(params)))
	}
	var queue, kind string
	for i, p := range params {
		q, k := target(p)
		if i == 0 {
			queue, kind = q, k
		}
		if q != queue {
			queue = ""
		}
		if k != kind {
			kind = ""
		}
	}
	if kind != "" {
		attrs = append(attrs, KindKey.String(clean(kind)))
	}
	if queue == "" {
		return "send", attrs
	}
	queue = clean(queue)
	return "send " + queue, append(attrs, semconv.MessagingDestinationName(queue))
}

// target returns the queue and kind of one job of an insert: its options',
// else its args' InsertOpts(), else the default queue.
func target(p docket.InsertManyParams) (queue, kind string) {
	if p.Args == nil {
		return "", "" // the insert refuses it
	}
	var o docket.InsertOpts
	if p.Opts != nil {
		o = *p.Opts
	}
	if queue = docket.InsertOptsFor(p.Args, o).Queue; queue == "" {
		queue = jobs.DefaultQueue
	}
	return queue, p.Args.Kind()
}
