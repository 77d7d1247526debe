package docket_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/jobs"
)

// A handler that returns a plain error is retried with backoff; the job
// records each attempt's error. (The backoff is shortened here with
// Config.RetryBase; it defaults to seconds, doubling per attempt.)
func Example_retryWithBackoff() {
	ctx := context.Background()
	client, err := docket.NewClient(exampleDB("retry"), docket.Config{
		RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	succeeded := make(chan struct{})
	docket.MustAddHandler(client, func(ctx context.Context, job *jobs.Job, args GreetArgs) error {
		if job.Attempt < 3 {
			return fmt.Errorf("mail server busy (attempt %d)", job.Attempt)
		}
		fmt.Printf("hello, %s, at attempt %d\n", args.Name, job.Attempt)
		close(succeeded)
		return nil
	}, jobs.KindOptions{})
	if err := client.Start(ctx); err != nil {
		panic(err)
	}

	res, err := client.Insert(ctx, GreetArgs{Name: "Ada"}, nil)
	if err != nil {
		panic(err)
	}
	<-succeeded
	if err := client.Stop(ctx); err != nil { // waits for the outcome to be written
		panic(err)
	}
	job, err := client.JobGet(ctx, res.JobID())
	if err != nil {
		panic(err)
	}
	fmt.Println("state:", job.State)
	for _, e := range job.Errors {
		fmt.Println("error:", e.Message)
	}
	// Output:
	// hello, Ada, at attempt 3
	// state: succeeded
	// error: mail server busy (attempt 1)
	// error: mail server busy (attempt 2)
}

// InsertMany inserts many jobs in as few commands as it can (after
// checking every one); each result says whether its job is in.
func ExampleClient_InsertMany() {
	ctx := context.Background()
	client, err := docket.NewClient(exampleDB("insert_many"), docket.Config{})
	if err != nil {
		panic(err)
	}
	results, err := client.InsertMany(ctx, []docket.InsertManyParams{
		{Args: GreetArgs{Name: "Ada"}},
		{Args: GreetArgs{Name: "Grace"}, Opts: &docket.InsertOpts{Priority: 5}},
		{Args: GreetArgs{Name: "Linus"}, Opts: &docket.InsertOpts{Delay: time.Hour}},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("inserted:", len(results))

	queues, err := client.QueueList(ctx)
	if err != nil {
		panic(err)
	}
	for _, q := range queues {
		fmt.Println(q.Name, q.Counts["greet"][jobs.StateAvailable])
	}
	// Output:
	// inserted: 3
	// default 3
}

// A bounded queue refuses inserts past its capacity at once, with an
// error that says so; a job that ends frees its place.
func Example_boundedQueue() {
	ctx := context.Background()
	client, err := docket.NewClient(exampleDB("bounded"), docket.Config{})
	if err != nil {
		panic(err)
	}
	if err := client.QueueSetCapacity(ctx, "imports", 2, &docket.CapacityOpts{By: "example"}); err != nil {
		panic(err)
	}
	opts := &docket.InsertOpts{Queue: "imports"}
	for _, name := range []string{"a", "b", "c"} {
		_, err := client.Insert(ctx, GreetArgs{Name: name}, opts)
		switch {
		case errors.Is(err, docket.ErrQueueFull):
			fmt.Println(name, "refused: the queue is full")
		case err != nil:
			panic(err)
		default:
			fmt.Println(name, "admitted")
		}
	}
	// Output:
	// a admitted
	// b admitted
	// c refused: the queue is full
}

// Pausing a queue stops every process from claiming its jobs until it is
// resumed; inserts go on.
func Example_pauseAQueue() {
	ctx := context.Background()
	client, err := docket.NewClient(exampleDB("pause"), docket.Config{})
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	var ran []string
	docket.MustAddHandler(client, func(ctx context.Context, job *jobs.Job, args GreetArgs) error {
		mu.Lock()
		ran = append(ran, args.Name)
		mu.Unlock()
		return nil
	}, jobs.KindOptions{})
	if _, err := client.QueuePause(ctx, "default", &docket.QueuePauseOpts{By: "example"}); err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(ctx)
	if _, err := client.Insert(ctx, GreetArgs{Name: "Ada"}, nil); err != nil {
		panic(err)
	}
	time.Sleep(300 * time.Millisecond) // claims come and go; none takes the job
	mu.Lock()
	fmt.Println("ran while paused:", len(ran))
	mu.Unlock()

	if _, err := client.QueueResume(ctx, "default", nil); err != nil {
		panic(err)
	}
	if err := client.WaitIdle(ctx, docket.WaitParams{PollInterval: 20 * time.Millisecond}); err != nil {
		panic(err)
	}
	mu.Lock()
	fmt.Println("ran after resume:", ran)
	mu.Unlock()
	// Output:
	// ran while paused: 0
	// ran after resume: [Ada]
}

// JobCancel ends a job that has not run at once; a running one is asked
// to stop, and its handler's context ends at the worker's next heartbeat.
func ExampleClient_JobCancel() {
	ctx := context.Background()
	client, err := docket.NewClient(exampleDB("cancel"), docket.Config{})
	if err != nil {
		panic(err)
	}
	res, err := client.Insert(ctx, GreetArgs{Name: "Ada"}, &docket.InsertOpts{Delay: time.Hour})
	if err != nil {
		panic(err)
	}
	outcome, err := client.JobCancel(ctx, res.JobID())
	if err != nil {
		panic(err)
	}
	job, err := client.JobGet(ctx, res.JobID())
	if err != nil {
		panic(err)
	}
	fmt.Println(outcome, job.State)
	// Output: cancelled cancelled
}

// Higher priorities are claimed first; within one priority, the job that
// has been runnable longest.
func Example_priority() {
	ctx := context.Background()
	// One job at a time, so that the order of claims is the order of runs.
	client, err := docket.NewClient(exampleDB("priority"), docket.Config{Concurrency: 1})
	if err != nil {
		panic(err)
	}
	for _, p := range []struct {
		name     string
		priority int
	}{{"low", 0}, {"high", 10}, {"middle", 5}} {
		if _, err := client.Insert(ctx, GreetArgs{Name: p.name}, &docket.InsertOpts{Priority: p.priority}); err != nil {
			panic(err)
		}
	}
	done := make(chan struct{}, 3)
	var mu sync.Mutex
	var order []string
	docket.MustAddHandler(client, func(ctx context.Context, job *jobs.Job, args GreetArgs) error {
		mu.Lock()
		order = append(order, args.Name)
		mu.Unlock()
		done <- struct{}{}
		return nil
	}, jobs.KindOptions{})
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(ctx)
	for range 3 {
		<-done
	}
	mu.Lock()
	fmt.Println(order)
	mu.Unlock()
	// Output: [high middle low]
}
