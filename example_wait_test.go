package docket_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/jobs"
)

// WaitIdle waits until the given queues or kinds have nothing available or
// running: a batch program inserts its jobs, waits for them, and exits; a
// test waits for the work it caused. It reads the collection, so it waits
// for the jobs of every process.
func ExampleClient_WaitIdle() {
	ctx := context.Background()
	client, err := docket.NewClient(exampleDB("wait_idle"), docket.Config{})
	if err != nil {
		panic(err)
	}
	var greeted atomic.Int32
	docket.MustAddHandler(client, func(ctx context.Context, job *jobs.Job, args GreetArgs) error {
		greeted.Add(1)
		return nil
	}, jobs.KindOptions{})
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = client.Stop(ctx) }()

	for _, name := range []string{"Ada", "Grace", "Edsger"} {
		if _, err := client.Insert(ctx, GreetArgs{Name: name}, nil); err != nil {
			panic(err)
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := client.WaitIdle(waitCtx, docket.WaitParams{Kinds: []string{"greet"}}); err != nil {
		panic(err)
	}
	fmt.Println("greeted:", greeted.Load())
	// Output: greeted: 3
}
