package docket_test

import (
	"context"
	"fmt"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/jobs"
)

// The operator's verbs are methods of the one client, each with a params
// struct: list the dead jobs a page at a time, retry them, and delete
// what is finished.
func ExampleClient_JobList() {
	ctx := context.Background()
	client, err := docket.NewClient(exampleDB("admin"), docket.Config{})
	if err != nil {
		panic(err)
	}
	for _, name := range []string{"Ada", "Grace", "Linus"} {
		res, err := client.Insert(ctx, GreetArgs{Name: name}, &docket.InsertOpts{Delay: time.Hour})
		if err != nil {
			panic(err)
		}
		if _, err := client.JobCancel(ctx, res.JobID()); err != nil {
			panic(err)
		}
	}

	cancelled := docket.JobFilter{States: []jobs.State{jobs.StateCancelled}}
	params := &docket.JobListParams{JobFilter: cancelled, Limit: 2}
	for page := 1; ; page++ {
		res, err := client.JobList(ctx, params)
		if err != nil {
			panic(err)
		}
		fmt.Println("page", page, "jobs", len(res.Jobs))
		if res.Next == "" {
			break
		}
		params.After = res.Next
	}

	retried, err := client.JobRetry(ctx, &docket.JobRetryParams{JobFilter: cancelled})
	if err != nil {
		panic(err)
	}
	fmt.Println("retried", len(retried))

	// Available jobs are deleted only with Force; running ones never.
	deleted, err := client.JobDelete(ctx, &docket.JobDeleteParams{
		JobFilter: docket.JobFilter{Kinds: []string{"greet"}}, Force: true,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("deleted", len(deleted))
	// Output:
	// page 1 jobs 2
	// page 2 jobs 1
	// retried 3
	// deleted 3
}

// A queue is paused, bounded and listed from the client; closing it is
// spelled CapacityClosed, since 0 means "the default" throughout docket.
func ExampleClient_QueueList() {
	ctx := context.Background()
	client, err := docket.NewClient(exampleDB("queues"), docket.Config{})
	if err != nil {
		panic(err)
	}
	if _, err := client.Insert(ctx, GreetArgs{Name: "Ada"}, &docket.InsertOpts{Queue: "mail"}); err != nil {
		panic(err)
	}
	if _, err := client.QueuePause(ctx, "mail", &docket.QueuePauseOpts{By: "ops"}); err != nil {
		panic(err)
	}
	if err := client.QueueSetCapacity(ctx, "bulk", docket.CapacityClosed, nil); err != nil {
		panic(err)
	}
	queues, err := client.QueueList(ctx)
	if err != nil {
		panic(err)
	}
	for _, q := range queues {
		fmt.Printf("%s paused=%t closed=%t available=%d\n", q.Name, q.Paused,
			q.Capacity == docket.CapacityClosed, q.Counts["greet"][jobs.StateAvailable])
	}
	// Output:
	// bulk paused=false closed=true available=0
	// mail paused=true closed=false available=1
}
