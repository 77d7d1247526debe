package docket_test

import (
	"context"
	"fmt"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/jobs"
)

// ShipArgs declare their kind's insert defaults: every process that
// inserts a ShipArgs, one without its handler too, gives the job the same
// queue and attempts.
type ShipArgs struct {
	Order string `bson:"order"`
}

// Kind implements jobs.Args.
func (ShipArgs) Kind() string { return "ship" }

// InsertOpts implements docket.ArgsWithInsertOpts.
func (ShipArgs) InsertOpts() docket.InsertOpts {
	return docket.InsertOpts{Queue: "shipping", MaxAttempts: 5}
}

// The same insert gives the same job in every process: a producer that
// never registers the handler and a worker that does insert alike, as the
// defaults come from the args type alone. A handler's KindOptions cannot
// set them otherwise: AddHandler refuses it, saying where they belong.
func ExampleArgsWithInsertOpts() {
	ctx := context.Background()
	db := exampleDB("insert_opts")
	producer, err := docket.NewClient(db, docket.Config{}) // inserts only
	if err != nil {
		panic(err)
	}
	worker, err := docket.NewClient(db, docket.Config{Queues: []string{"shipping"}})
	if err != nil {
		panic(err)
	}
	ship := func(ctx context.Context, _ *jobs.Job, a ShipArgs) error { return nil }
	//lint:ignore SA1019 shows the refusal of a deprecated insert default
	fmt.Println(docket.AddHandler(worker, ship, jobs.KindOptions{MaxAttempts: 3}))
	docket.MustAddHandler(worker, ship, jobs.KindOptions{Timeout: time.Minute})

	for _, c := range []*docket.Client{producer, worker} {
		res, err := c.Insert(ctx, ShipArgs{Order: "o-1"}, nil)
		if err != nil {
			panic(err)
		}
		job, err := c.JobGet(ctx, res.JobID())
		if err != nil {
			panic(err)
		}
		fmt.Println(job.Queue, job.MaxAttempts)
	}
	// Output:
	// docket: AddHandler "ship": jobs.KindOptions MaxAttempts: 3: insert defaults must be the same in every process, one that inserts without this handler too, so they come from the args type alone: leave them zero in KindOptions (ShipArgs.InsertOpts() declares MaxAttempts 5), and set in ShipArgs.InsertOpts() what every insert should take
	// shipping 5
	// shipping 5
}
