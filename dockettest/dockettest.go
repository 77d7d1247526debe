// Package dockettest helps test an application's docket handlers: run a
// handler on a job synchronously, as a worker would run one attempt, and
// check that code under test inserted the jobs it should.
//
//	func TestWelcome(t *testing.T) {
//		ctx := context.Background()
//		client := newClient(t) // your docket.Client on a test database, the app's handlers added
//		err := dockettest.Work(ctx, client, EmailArgs{To: "a@example.com"})
//		require.NoError(t, err)
//
//		signUp(ctx, client, "a@example.com") // inserts an EmailArgs job
//		dockettest.RequireInserted(t, client, EmailArgs{To: "a@example.com"})
//	}
//
// Work needs no started client, and no server unless the handler uses one;
// RequireInserted and RequireNotInserted read the client's jobs collection.
package dockettest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TB is the part of testing.TB the assertions use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Work runs the handler client has for args' kind on a job made from
// args, synchronously, as one attempt of a worker would: under the kind's
// timeout, with args decoded and validated as the worker does. It writes
// nothing to the database itself (the handler may). It returns the
// handler's error: nil, a retryable error, or one for which
// jobs.IsPermanent is true (including args that fail to decode or
// validate: Insert refuses such args, but a job inserted another way still
// meets the handler's check). The job is the one Insert would insert: its
// fields come from opts and the args type's InsertOpts(), as an insert's do.
//
// The handler's context carries a result slot and a progress reporter, as
// a worker's does, so jobs.SetResult and jobs.Progress work in it (WorkJob
// returns what they stored); a reporter already in ctx
// (jobs.WithProgressReporter) receives the reports too, and a slot
// (jobs.WithResultSlot) the result of a handler that succeeded.
func Work(ctx context.Context, client *docket.Client, args jobs.Args, opts ...docket.InsertOpts) error {
	_, err := WorkJob(ctx, client, args, opts...)
	return err
}

// WorkJob is Work that also returns the job the handler ran on, with the
// result the handler set (Job.Result, when it returned nil, as a worker
// stores it only on success) and the last progress it reported
// (Job.Progress).
func WorkJob(ctx context.Context, client *docket.Client, args jobs.Args, opts ...docket.InsertOpts) (*jobs.Job, error) {
	if args == nil {
		return nil, fmt.Errorf("dockettest: Work: args must not be nil")
	}
	var o docket.InsertOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	h, ko, ok := client.Handler(args.Kind())
	if !ok {
		return nil, fmt.Errorf("dockettest: Work: no handler for kind %q (registered: %v)", args.Kind(), client.Registry().Kinds())
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	job, err := queue.NewJob(queue.Insert{Kind: args.Kind(), Args: args, Opts: docket.InsertOptsFor(args, o)}, now)
	if err != nil {
		return nil, fmt.Errorf("dockettest: Work: %w", err)
	}
	expires := now.Add(ko.Timeout)
	job.State = jobs.StateRunning
	job.Attempt = 1
	job.Owner = "dockettest"
	job.LeaseToken = "dockettest"
	job.LeaseExpiresAt = &expires
	job.HeartbeatAt = &now
	ctx, cancel := context.WithTimeout(ctx, ko.Timeout)
	defer cancel()
	ctx, finish := asWorker(ctx, job)
	err = h.Work(ctx, job)
	finish(err == nil)
	return job, err
}

// asWorker gives ctx the result slot and progress reporter a worker gives
// a handler; finish stores in job what they received (the last progress,
// and the result when the handler succeeded) and passes the result on to
// a slot of ctx's own (jobs.WithResultSlot) when it succeeded, as each
// report is passed on to a reporter of ctx's own (jobs.WithProgressReporter)
// while the handler runs. Reports after finish are dropped, as a worker
// drops those of an attempt that ended.
func asWorker(ctx context.Context, job *jobs.Job) (_ context.Context, finish func(succeeded bool)) {
	outer := ctx
	slot := &jobs.ResultSlot{}
	var mu sync.Mutex
	var last *jobs.ProgressReport
	done := false
	ctx = jobs.WithProgressReporter(jobs.WithResultSlot(ctx, slot), func(r jobs.ProgressReport) {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return
		}
		last = &r
		_ = jobs.Progress(outer, r.Fraction, r.Message) // ErrNoProgressHere: none of its own
	})
	return ctx, func(succeeded bool) {
		mu.Lock()
		done = true
		job.Progress = last
		mu.Unlock()
		if res := slot.Result(); res != nil && succeeded {
			job.Result = res
			_ = jobs.SetResult(outer, res) // as checked when set; ErrNoResultHere: none of its own
		}
	}
}

// RequireInserted fails the test unless a job of want's kind whose args
// decode to a value equal to want is in client's jobs collection, in any
// state, and returns the newest such job.
func RequireInserted[T jobs.Args](t TB, client *docket.Client, want T) *jobs.Job {
	t.Helper()
	found, err := inserted(client, want)
	if err != nil {
		t.Fatalf("dockettest: RequireInserted: %v", err)
		return nil
	}
	if len(found) == 0 {
		t.Fatalf("dockettest: no %q job was inserted with args %+v", want.Kind(), want)
		return nil
	}
	return found[len(found)-1]
}

// RequireNotInserted fails the test if a job of want's kind whose args
// decode to a value equal to want is in client's jobs collection.
func RequireNotInserted[T jobs.Args](t TB, client *docket.Client, want T) {
	t.Helper()
	found, err := inserted(client, want)
	if err != nil {
		t.Fatalf("dockettest: RequireNotInserted: %v", err)
		return
	}
	if len(found) > 0 {
		t.Fatalf("dockettest: %d %q job(s) were inserted with args %+v, the first %s", len(found), want.Kind(), want, found[0].ID)
	}
}

// inserted returns the jobs of want's kind whose args equal want, oldest
// first.
func inserted[T jobs.Args](client *docket.Client, want T) ([]*jobs.Job, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var found []*jobs.Job
	params := &docket.JobListParams{JobFilter: docket.JobFilter{Kinds: []string{want.Kind()}}, Limit: docket.MaxJobListLimit}
	for {
		page, err := client.JobList(ctx, params)
		if err != nil {
			return nil, err
		}
		for _, s := range page.Jobs {
			if j, ok := argsEqual(s.Raw, want); ok {
				found = append(found, j)
			}
		}
		if page.Next == "" {
			break
		}
		params.After = page.Next
	}
	slices.SortStableFunc(found, func(a, b *jobs.Job) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return found, nil
}

// argsEqual decodes raw, a stored job of want's kind, and reports whether
// its args decode to a value equal to want. A document another app wrote
// that does not decode is not the job asked for.
func argsEqual[T jobs.Args](raw bson.Raw, want T) (*jobs.Job, bool) {
	var j jobs.Job
	if err := bson.Unmarshal(raw, &j); err != nil {
		return nil, false
	}
	var got T
	if err := bson.Unmarshal(j.Args, &got); err != nil {
		return nil, false
	}
	return &j, reflect.DeepEqual(got, want)
}
