package docket_test

import (
	"context"
	"fmt"

	"github.com/docketq/docket"
	"github.com/docketq/docket/jobs"
)

// Run is a program's main loop: it starts the client, waits for SIGINT or
// SIGTERM (here, for its context to end), and stops gracefully within the
// shutdown timeout.
func ExampleClient_Run() {
	ctx, cancel := context.WithCancel(context.Background())
	client, err := docket.NewClient(exampleDB("run"), docket.Config{})
	if err != nil {
		panic(err)
	}
	docket.MustAddHandler(client, func(ctx context.Context, job *jobs.Job, args GreetArgs) error {
		fmt.Printf("hello, %s\n", args.Name)
		cancel() // a program would get SIGTERM instead
		return nil
	}, jobs.KindOptions{})
	if _, err := client.Insert(ctx, GreetArgs{Name: "Ada"}, nil); err != nil {
		panic(err)
	}

	if err := client.Run(ctx); err != nil {
		panic(err)
	}
	fmt.Println("stopped")
	// Output:
	// hello, Ada
	// stopped
}
