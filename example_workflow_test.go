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

// PartArgs are the args of a task that counts one part and passes the
// count on as its result.
type PartArgs struct {
	N int `bson:"n"`
}

// Kind implements jobs.Args.
func (PartArgs) Kind() string { return "part" }

// SumArgs are the args of the task that adds its parents' counts.
type SumArgs struct{}

// Kind implements jobs.Args.
func (SumArgs) Kind() string { return "sum" }

// A task reads what the tasks it runs after passed on with jobs.SetResult:
// ParentResults lists them in its After's order (the workflow's own gate,
// which it also waits for, left out), and Decode decodes each.
func ExampleClient_ParentResults() {
	ctx := context.Background()
	client, err := docket.NewClient(exampleDB("parent_results"), docket.Config{})
	if err != nil {
		panic(err)
	}
	type count struct {
		N int `bson:"n"`
	}
	docket.MustAddHandler(client, func(ctx context.Context, _ *jobs.Job, a PartArgs) error {
		return jobs.SetResult(ctx, count(a))
	}, jobs.KindOptions{})
	sums := make(chan string, 1)
	docket.MustAddHandler(client, func(ctx context.Context, job *jobs.Job, _ SumArgs) error {
		parents, err := client.ParentResults(ctx, job)
		if err != nil {
			return err
		}
		total, line := 0, ""
		for _, p := range parents {
			var c count
			if err := p.Decode(&c); err != nil {
				return jobs.Permanent(err)
			}
			total += c.N
			line += fmt.Sprintf("%s=%d ", p.ID, c.N)
		}
		sums <- fmt.Sprintf("%stotal=%d", line, total)
		return nil
	}, jobs.KindOptions{})
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = client.Stop(ctx) }()

	wf := docket.NewWorkflow("tally")
	a := wf.Add("a", PartArgs{N: 2}, nil)
	b := wf.Add("b", PartArgs{N: 40}, nil)
	wf.Add("sum", SumArgs{}, &docket.TaskOpts{After: []string{a, b}})
	if _, err := client.InsertWorkflow(ctx, wf); err != nil {
		panic(err)
	}
	select {
	case s := <-sums:
		fmt.Println(s)
	case <-time.After(time.Minute):
		panic("the sum did not run")
	}
	// Output: tally/a=2 tally/b=40 total=42
}
