// Command testworker is the worker command with extra, test-only job kinds
// registered, for the multi-process tests. It runs exactly the code of
// cmd/worker (internal/cli.Worker); only its registry differs.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/docketq/docket/cmd/internal/cli"
	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
)

// RecordArgs are the args of a record job.
type RecordArgs struct {
	// SleepMs is how long the attempt takes.
	SleepMs int `bson:"sleepMs"`
	// SleepAttempts limits the sleep to attempts up to this one; 0 means
	// every attempt.
	SleepAttempts int `bson:"sleepAttempts"`
	// IgnoreCancel makes the handler sleep through its context's end.
	IgnoreCancel bool `bson:"ignoreCancel"`
	// FailAttempts makes attempts up to this one fail.
	FailAttempts int `bson:"failAttempts"`
}

// Kind implements jobs.Args.
func (RecordArgs) Kind() string { return "record" }

// StepArgs are the args of a step job: a workflow task of the chaos run
// (internal/chaos/workflow.go) that records each attempt in the steps
// collection.
type StepArgs struct {
	// SleepMs is how long the attempt takes.
	SleepMs int `bson:"sleepMs"`
	// Fail makes every attempt fail permanently: the job ends dead.
	Fail bool `bson:"fail"`
}

// Kind implements jobs.Args.
func (StepArgs) Kind() string { return "step" }

// workStep records the attempt's start (the claim's stamp and the
// handler's clock), works, and records its end just before it returns
// success: an attempt whose end is recorded returned success, whether or
// not its completion was then recorded (a lost lease fences it out).
func workStep(steps *mongo.Collection) func(context.Context, *jobs.Job, StepArgs) error {
	return func(ctx context.Context, j *jobs.Job, a StepArgs) error {
		rec := func(phase string) error {
			_, err := steps.InsertOne(ctx, bson.M{
				"jobId": j.ID, "attempt": j.Attempt, "owner": j.Owner, "token": j.LeaseToken,
				"phase": phase, "at": time.Now(), "claimedAt": j.HeartbeatAt,
			})
			return err
		}
		if err := rec("start"); err != nil {
			return err
		}
		select {
		case <-time.After(time.Duration(a.SleepMs) * time.Millisecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if a.Fail {
			return jobs.Permanent(errors.New("step: fails permanently"))
		}
		return rec("end")
	}
}

// CallArgs are the args of a call job: one call of a downstream HTTP
// service, as a job of an app's would make, for the tests that count what
// the downstream sees (cmd/internal/e2e/partition_test.go).
type CallArgs struct {
	// URL is the downstream's; the call is GET URL?customer=...&job=...
	URL string `bson:"url"`
	// Customer is whom the call is for, as the downstream counts calls.
	Customer string `bson:"customer"`
}

// Kind implements jobs.Args.
func (CallArgs) Kind() string { return "call" }

// callDownstream calls the downstream once; any answer but 200 fails the
// attempt.
func callDownstream(ctx context.Context, j *jobs.Job, a CallArgs) error {
	u := a.URL + "?" + url.Values{"customer": {a.Customer}, "job": {j.ID}, "attempt": {strconv.Itoa(j.Attempt)}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return jobs.Permanent(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("call: downstream answered %s", res.Status)
	}
	return nil
}

// recordExecution records the attempt j in execs, one document per
// attempt (its _id the job's id and the claim's token: a batch claim
// stamps its jobs with one token), as an app records what it did: an
// insert that failed may have been applied (its reply lost, or a
// writeConcernError), so it is sent again, for up to 30 s, until it lands
// or a duplicate key shows that an earlier send did.
func recordExecution(ctx context.Context, execs *mongo.Collection, j *jobs.Job) error {
	doc := bson.M{
		"_id": j.ID + "/" + j.LeaseToken, "jobId": j.ID, "attempt": j.Attempt, "owner": j.Owner, "token": j.LeaseToken, "at": time.Now(),
		"claimedAt": j.HeartbeatAt, // the claim's stamp
	}
	deadline := time.Now().Add(30 * time.Second)
	for try := 1; ; try++ {
		_, err := execs.InsertOne(ctx, doc)
		if err == nil || (try > 1 && mongo.IsDuplicateKeyError(err)) {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("record the execution: %w", err)
		}
		time.Sleep(time.Duration(min(try, 10)) * 100 * time.Millisecond)
	}
}

func main() {
	os.Exit(cli.Worker(os.Args[1:], os.Stdout, os.Stderr,
		func(reg *jobs.Registry, db *mongo.Database, q *queue.Client, log *zap.Logger) error {
			if err := handlers.Register(reg, handlers.Deps{DB: db, Queue: q, Logger: log}); err != nil {
				return err
			}
			if err := jobs.Register(reg, workStep(db.Collection("steps")), jobs.KindOptions{}); err != nil {
				return err
			}
			if err := jobs.Register(reg, callDownstream, jobs.KindOptions{}); err != nil {
				return err
			}
			execs := db.Collection("executions")
			return jobs.Register(reg, func(ctx context.Context, j *jobs.Job, a RecordArgs) error {
				// Record the execution first: the tests count them.
				if err := recordExecution(ctx, execs, j); err != nil {
					return err
				}
				if a.SleepAttempts == 0 || j.Attempt <= a.SleepAttempts {
					d := time.Duration(a.SleepMs) * time.Millisecond
					if a.IgnoreCancel {
						time.Sleep(d)
					} else {
						select {
						case <-time.After(d):
						case <-ctx.Done():
							return context.Cause(ctx)
						}
					}
				}
				if j.Attempt <= a.FailAttempts {
					return errors.New(fmt.Sprint("failing attempt ", j.Attempt))
				}
				return nil
			}, jobs.KindOptions{})
		}))
}
