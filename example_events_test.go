package docket_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/docketprom"
	"github.com/docketq/docket/jobs"
	"github.com/prometheus/client_golang/prometheus"
)

// Middleware runs around every handler, events say how each attempt ended,
// and a collector exports the client's metrics on the application's own
// Prometheus registry. Middleware and the collector are added before
// Start; a subscription may start any time.
func ExampleClient_Subscribe() {
	ctx := context.Background()
	client, err := docket.NewClient(exampleDB("events"), docket.Config{
		Concurrency: 1, // one job at a time: the output's order
	})
	if err != nil {
		panic(err)
	}
	docket.MustAddHandler(client, func(ctx context.Context, job *jobs.Job, args GreetArgs) error {
		if args.Name == "Mallory" {
			return jobs.Permanent(errors.New("not greeting Mallory"))
		}
		return nil
	}, jobs.KindOptions{})

	// Middleware that counts attempts by kind: logging, tracing or panic
	// reporting go the same way.
	var attempts sync.Map
	err = client.Use(func(next jobs.Handler) jobs.Handler {
		return jobs.HandlerFunc(func(ctx context.Context, job *jobs.Job) error {
			n, _ := attempts.LoadOrStore(job.Kind, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			return next.Work(ctx, job)
		})
	})
	if err != nil {
		panic(err)
	}
	collector, err := docketprom.NewCollector(client, nil)
	if err != nil {
		panic(err)
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collector) // serve it with promhttp.HandlerFor(registry, ...)

	events, cancel := client.Subscribe(docket.EventJobSucceeded, docket.EventJobDead)
	defer cancel()

	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = client.Stop(ctx) }()
	// One job at a time, each awaited: the pool frees a job's slot as its
	// handler returns, before its outcome is written and told, so two jobs
	// inserted together may be told in either order.
	for _, name := range []string{"Ada", "Mallory"} {
		if _, err := client.Insert(ctx, GreetArgs{Name: name}, nil); err != nil {
			panic(err)
		}
		select {
		case e := <-events:
			fmt.Println("event:", e.Kind, e.Job.State, len(e.Job.Errors), "error(s)")
		case <-time.After(time.Minute):
			panic("no event")
		}
	}
	n, _ := attempts.Load("greet")
	fmt.Println("greet attempts seen by the middleware:", n.(*atomic.Int32).Load())
	// The metrics and the events observe each finish apart: an event may
	// arrive before its job is counted.
	series := func() int {
		families, err := registry.Gather()
		if err != nil {
			panic(err)
		}
		for _, f := range families {
			if f.GetName() == "docket_jobs_finished_total" {
				return len(f.GetMetric())
			}
		}
		return 0
	}
	for deadline := time.Now().Add(10 * time.Second); series() < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("docket_jobs_finished_total series:", series())
	// Output:
	// event: succeeded succeeded 0 error(s)
	// event: dead dead 1 error(s)
	// greet attempts seen by the middleware: 2
	// docket_jobs_finished_total series: 2
}
