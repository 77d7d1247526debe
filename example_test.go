package docket_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// GreetArgs are the args of the "greet" kind: a typed args struct names
// its kind.
type GreetArgs struct {
	Name string `bson:"name"`
}

// Kind implements jobs.Args.
func (GreetArgs) Kind() string { return "greet" }

// Validate implements jobs.Validator: a job whose args fail it goes to the
// dead state with the reason, and its handler never runs.
func (a GreetArgs) Validate() error {
	if a.Name == "" {
		return errors.New("name must not be empty")
	}
	return nil
}

// Insert a job and work it: register a typed handler, start the client,
// insert, and stop gracefully.
func Example_insertAndWork() {
	ctx := context.Background()
	db := exampleDB("insert_and_work")

	client, err := docket.NewClient(db, docket.Config{})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	docket.MustAddHandler(client, func(ctx context.Context, job *jobs.Job, args GreetArgs) error {
		fmt.Printf("hello, %s\n", args.Name)
		close(done)
		return nil
	}, jobs.KindOptions{Timeout: 10 * time.Second})
	if err := client.Start(ctx); err != nil {
		panic(err)
	}

	if _, err := client.Insert(ctx, GreetArgs{Name: "Ada"}, nil); err != nil {
		panic(err)
	}
	<-done
	if err := client.Stop(ctx); err != nil {
		panic(err)
	}
	// Output: hello, Ada
}

// A unique key makes a second insert return the unfinished job that holds
// the key instead of adding one; a client that only inserts needs no Start.
func ExampleClient_Insert_uniqueKey() {
	ctx := context.Background()
	client, err := docket.NewClient(exampleDB("unique_key"), docket.Config{})
	if err != nil {
		panic(err)
	}
	opts := &docket.InsertOpts{UniqueKey: "greet:ada"}
	first, err := client.Insert(ctx, GreetArgs{Name: "Ada"}, opts)
	if err != nil {
		panic(err)
	}
	second, err := client.Insert(ctx, GreetArgs{Name: "Ada"}, opts)
	if err != nil {
		panic(err)
	}
	fmt.Println("first duplicate:", first.Duplicate)
	fmt.Println("second duplicate:", second.Duplicate, "same job:", second.ID == first.ID)
	// Output:
	// first duplicate: false
	// second duplicate: true same job: true
}

// Stop shuts down in two stages: it stops claiming and waits for running
// jobs; when its context ends first, it cancels them, and handlers that
// return give their jobs back.
func ExampleClient_Stop() {
	ctx := context.Background()
	client, err := docket.NewClient(exampleDB("graceful_stop"), docket.Config{})
	if err != nil {
		panic(err)
	}
	started := make(chan struct{})
	docket.MustAddHandler(client, func(ctx context.Context, job *jobs.Job, args GreetArgs) error {
		close(started)
		select {
		case <-time.After(300 * time.Millisecond): // the work
			return nil
		case <-ctx.Done(): // Stop's context ended: give the job back
			return context.Cause(ctx)
		}
	}, jobs.KindOptions{})
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	res, err := client.Insert(ctx, GreetArgs{Name: "Grace"}, nil)
	if err != nil {
		panic(err)
	}
	<-started

	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		panic(err)
	}
	job, err := client.JobGet(ctx, res.JobID())
	if err != nil {
		panic(err)
	}
	fmt.Println("after Stop the job is", job.State)
	// Output: after Stop the job is succeeded
}

// A handler's error retries the job with backoff, up to the job's max
// attempts; an error wrapped in jobs.Permanent, or args that fail to decode
// or validate, send it to the dead state at once, with the error kept.
// Insert refuses args that fail their Validate; a job inserted another way
// (a shell, another language's driver) meets it in the worker.
func Example_permanentError() {
	ctx := context.Background()
	db := exampleDB("permanent_error")
	client, err := docket.NewClient(db, docket.Config{})
	if err != nil {
		panic(err)
	}
	docket.MustAddHandler(client, func(ctx context.Context, job *jobs.Job, args GreetArgs) error {
		if args.Name == "nobody" {
			return jobs.Permanent(fmt.Errorf("no such user %q", args.Name))
		}
		return nil
	}, jobs.KindOptions{})
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = client.Stop(ctx) }()

	unknown, _ := client.Insert(ctx, GreetArgs{Name: "nobody"}, &docket.InsertOpts{MaxAttempts: 5})
	_, err = client.Insert(ctx, GreetArgs{}, nil) // fails Validate: not inserted
	fmt.Println(err)
	// Another app writes a job with args that fail Validate.
	now := time.Now()
	_, _ = db.Collection(docket.DefaultCollection).InsertOne(ctx, bson.M{
		"_id": "invalid-1", "kind": "greet", "args": bson.M{"name": ""},
		"state": "available", "queue": "default", "priority": 0, "runAt": now,
		"attempt": 0, "maxAttempts": 5, "errors": bson.A{}, "createdAt": now, "updatedAt": now,
	})
	for _, id := range []string{unknown.ID, "invalid-1"} {
		job := waitFinished(ctx, client, id)
		fmt.Printf("%s after %d attempt(s) of %d: %s\n", job.State, job.Attempt, job.MaxAttempts, job.Errors[len(job.Errors)-1].Message)
	}
	// Output:
	// queue: job 0: args: "greet" args fail their Validate: name must not be empty
	// dead after 1 attempt(s) of 5: no such user "nobody"
	// dead after 1 attempt(s) of 5: name must not be empty
}

// Periodic jobs are enqueued by the elected process on their schedules,
// each tick once however many processes run.
func Example_periodicJob() {
	ctx := context.Background()
	ran := make(chan string, 10)
	client, err := docket.NewClient(exampleDB("periodic"), docket.Config{
		PeriodicJobs: []docket.PeriodicJob{{
			Name: "morning-greeting", Schedule: "@every 1s",
			Args: GreetArgs{Name: "world"},
		}},
	})
	if err != nil {
		panic(err)
	}
	docket.MustAddHandler(client, func(ctx context.Context, job *jobs.Job, args GreetArgs) error {
		ran <- fmt.Sprintf("hello, %s (a tick of morning-greeting: %t)", args.Name, strings.HasPrefix(job.ID, "periodic:morning-greeting:"))
		return nil
	}, jobs.KindOptions{})
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = client.Stop(ctx) }()
	fmt.Println(<-ran)
	// Output: hello, world (a tick of morning-greeting: true)
}

// waitFinished polls the job until it has finished.
func waitFinished(ctx context.Context, client *docket.Client, id string) *jobs.Job {
	for {
		job, err := client.JobGet(ctx, docket.StringJobID(id))
		if err != nil {
			panic(err)
		}
		if job.State.Finished() {
			return job
		}
		time.Sleep(50 * time.Millisecond)
	}
}
