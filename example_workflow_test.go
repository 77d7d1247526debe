package docket_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/jobs"
)

// StepArgs are the args of the "step" kind: one task of a workflow.
type StepArgs struct {
	Name string `bson:"name"`
}

// Kind implements jobs.Args.
func (StepArgs) Kind() string { return "step" }

// A workflow is inserted whole or not at all: every task waits, unpublished,
// until one last write publishes it. Here a diamond: extract, then two
// transforms, then load once both have succeeded. Giving the workflow an id
// of your own makes InsertWorkflow safe to call again after any error.
func ExampleClient_InsertWorkflow() {
	ctx := context.Background()
	client, err := docket.NewClient(exampleDB("workflow"), docket.Config{})
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	var order []string
	done := make(chan struct{})
	docket.MustAddHandler(client, func(ctx context.Context, job *jobs.Job, args StepArgs) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, args.Name)
		if args.Name == "load" {
			close(done)
		}
		return nil
	}, jobs.KindOptions{})
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = client.Stop(ctx) }()

	wf := docket.NewWorkflow("nightly-2026-11-24")
	extract := wf.Add("extract", StepArgs{Name: "extract"}, nil)
	a := wf.Add("transform-a", StepArgs{Name: "transform"}, &docket.TaskOpts{After: []string{extract}})
	b := wf.Add("transform-b", StepArgs{Name: "transform"}, &docket.TaskOpts{After: []string{extract}})
	wf.Add("load", StepArgs{Name: "load"}, &docket.TaskOpts{After: []string{a, b}})
	res, err := client.InsertWorkflow(ctx, wf)
	if err != nil {
		panic(err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		panic("the workflow did not finish")
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Println(res.Tasks["load"])
	fmt.Println(order)
	// Output:
	// nightly-2026-11-24/load
	// [extract transform transform load]
}
