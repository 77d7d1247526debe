package docket_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/jobs"
)

// DailyReportArgs are the args of a job that waits for its data.
type DailyReportArgs struct {
	Day string `bson:"day"`
}

// Kind implements jobs.Args.
func (DailyReportArgs) Kind() string { return "daily_report" }

// InsertOpts implements docket.ArgsWithInsertOpts: a daily report gets one
// attempt, whichever process inserts it.
func (DailyReportArgs) InsertOpts() docket.InsertOpts {
	return docket.InsertOpts{MaxAttempts: 1}
}

// A handler steers its job with what it returns: jobs.Snooze runs it again
// later without counting the attempt or recording an error (the data is
// not there yet), jobs.Cancel ends it cancelled with a reason, attempts
// left or not (there is nothing to do).
func Example_snoozeAndCancel() {
	ctx := context.Background()
	client, err := docket.NewClient(exampleDB("snooze"), docket.Config{})
	if err != nil {
		panic(err)
	}
	checks := 0
	docket.MustAddHandler(client, func(ctx context.Context, job *jobs.Job, args DailyReportArgs) error {
		switch {
		case args.Day == "holiday":
			return jobs.Cancel(errors.New("no report on a holiday"))
		case checks < 2: // the day's data has not landed yet
			checks++
			return jobs.Snooze(50 * time.Millisecond)
		}
		return nil
	}, jobs.KindOptions{})
	// Snoozed jobs wait for a later time, which WaitIdle does not wait
	// for: wait for the two jobs' ends instead.
	ended, unsubscribe := client.Subscribe(docket.EventJobSucceeded, docket.EventJobCancelled)
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(ctx)

	monday, err := client.Insert(ctx, DailyReportArgs{Day: "monday"}, nil)
	if err != nil {
		panic(err)
	}
	holiday, err := client.Insert(ctx, DailyReportArgs{Day: "holiday"}, nil)
	if err != nil {
		panic(err)
	}
	<-ended
	<-ended
	for _, id := range []string{monday.ID, holiday.ID} {
		job, err := client.JobGet(ctx, docket.StringJobID(id))
		if err != nil {
			panic(err)
		}
		fmt.Println(job.State, "attempt", job.Attempt, "errors", len(job.Errors))
		if len(job.Errors) > 0 {
			fmt.Println(job.Errors[0].Message)
		}
	}
	// Output:
	// succeeded attempt 1 errors 0
	// cancelled attempt 1 errors 1
	// cancelled by its handler: no report on a holiday
}
