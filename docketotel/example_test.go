package docketotel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/docketotel"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A traced client: the insert's span, then the attempt's, which continues
// its trace, and the finishing write's inside it. A program would export
// to its collector instead of memory.
func ExampleInstrument() {
	ctx := context.Background()
	mc, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()))
	if err != nil {
		panic(err)
	}
	defer func() { _ = mc.Disconnect(ctx) }()
	db := mc.Database("example_instrument")
	if err := db.Drop(ctx); err != nil {
		panic(err)
	}

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	client, err := docket.NewClient(db, docket.Config{})
	if err != nil {
		panic(err)
	}
	docket.MustAddHandler(client, func(ctx context.Context, job *jobs.Job, a TracedArgs) error {
		return nil // spans started from ctx are children of the attempt's
	}, jobs.KindOptions{})
	if err := docketotel.Instrument(client, docketotel.Config{TracerProvider: tp}); err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	if _, err := client.Insert(ctx, TracedArgs{Mode: "ok"}, nil); err != nil {
		panic(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := client.WaitIdle(wctx, docket.WaitParams{}); err != nil {
		panic(err)
	}
	if err := client.Stop(ctx); err != nil {
		panic(err)
	}
	for len(exp.GetSpans()) < 3 && wctx.Err() == nil {
		time.Sleep(10 * time.Millisecond) // the attempt's spans end as its outcome is reported
	}
	spans := exp.GetSpans()
	for _, s := range spans {
		fmt.Println(s.SpanKind, s.Name, s.SpanContext.TraceID() == spans[0].SpanContext.TraceID())
	}
	// Output:
	// producer send default true
	// client settle default true
	// consumer process default true
}
