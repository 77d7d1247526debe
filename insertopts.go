package docket

// What an insert of the Go client takes from its args' own methods: the
// insert defaults their type declares (ArgsWithInsertOpts) and their
// Validate. Both are looked up on the value and on a pointer to a copy of
// it, so a method with a pointer receiver counts at insert as it does in
// the worker, which decodes args into a T and calls Validate on a *T.

import (
	"cmp"
	"context"
	"fmt"
	"reflect"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
)

// argsAs returns args as an I: args itself when it implements I, else a
// pointer to a copy of it when that does.
func argsAs[I any](args any) (I, bool) {
	if i, ok := args.(I); ok {
		return i, true
	}
	var zero I
	v := reflect.ValueOf(args)
	if !v.IsValid() || v.Kind() == reflect.Pointer {
		return zero, false
	}
	p := reflect.New(v.Type())
	p.Elem().Set(v)
	i, ok := p.Interface().(I)
	return i, ok
}

// InsertOptsFor returns the options an insert of args with opts uses: each
// field opts leaves zero is taken from the InsertOpts() that args declare
// (ArgsWithInsertOpts), if they do. Insert, InsertMany, InsertWorkflow and
// periodic jobs apply it; an insert middleware or a test can call it to
// learn, for one, the queue a job will go to.
func InsertOptsFor(args jobs.Args, opts InsertOpts) InsertOpts {
	if a, ok := argsAs[interface{ InsertOpts() InsertOpts }](args); ok {
		opts = fillOpts(opts, a.InsertOpts())
	}
	return opts
}

// fillOpts returns o with each field it leaves zero taken from d. RunAt and
// Delay are one setting: o's, when it sets either.
func fillOpts(o, d InsertOpts) InsertOpts {
	o.ID, o.Queue, o.Priority = cmp.Or(o.ID, d.ID), cmp.Or(o.Queue, d.Queue), cmp.Or(o.Priority, d.Priority)
	o.MaxAttempts, o.UniqueKey, o.UniqueFor = cmp.Or(o.MaxAttempts, d.MaxAttempts), cmp.Or(o.UniqueKey, d.UniqueKey), cmp.Or(o.UniqueFor, d.UniqueFor)
	if o.RunAt.IsZero() && o.Delay == 0 {
		o.RunAt, o.Delay = d.RunAt, d.Delay
	}
	return o
}

// validateArgs refuses nil args, and runs the Validate of args, if they
// have one, and returns a *ValidationError for job index naming the kind
// and wrapping its error: the worker would send the job dead with it.
func validateArgs(index int, args jobs.Args) error {
	if args == nil {
		return &queue.ValidationError{Index: index, Field: "args", Reason: "must not be nil"}
	}
	v, ok := argsAs[jobs.Validator](args)
	if !ok {
		return nil
	}
	if err := v.Validate(); err != nil {
		return &queue.ValidationError{Index: index, Field: "args",
			Reason: fmt.Sprintf("%q args fail their Validate: %v", args.Kind(), err), Err: err}
	}
	return nil
}

// ArgsWithInsertOpts is implemented by args types that carry their kind's
// insert defaults (River's JobArgsWithInsertOpts): every client that
// inserts the kind, with its handler or without, puts its jobs in the same
// queue with the same priority and attempts. A field of an insert's own
// InsertOpts that is set wins over the args'; a field the args leave zero
// takes the default. The method may have a value or a pointer receiver.
type ArgsWithInsertOpts interface {
	jobs.Args
	InsertOpts() InsertOpts
}

// InsertOpts are the options of one inserted job: ID, Queue, Priority,
// RunAt or Delay, MaxAttempts, UniqueKey and UniqueFor, After (the jobs it
// waits for), and a trace context (each field's doc: queue.InsertOpts).
// Each field left zero takes the args' own InsertOpts() (see
// ArgsWithInsertOpts), then the queue's defaults: the same in every
// process, whether it has the kind's handler or not.
type InsertOpts = queue.InsertOpts

// InsertResult says what an insert did: the job's id (JobID() is the id
// JobGet and JobCancel take), and whether its unique key was already held
// by an unfinished job (then no job was added and ID is that job's; when
// another application gave that job an id that is not a string, ID is its
// display form and only JobID() names it).
type InsertResult = queue.Result

// InsertManyParams is one job of an InsertMany.
type InsertManyParams struct {
	// Args are the job's args; their Kind names its kind. Required.
	Args jobs.Args
	// Opts are the job's options, as Insert takes them. Defaults to nil:
	// the args' InsertOpts(), then the defaults.
	Opts *InsertOpts
}

// InsertFunc inserts jobs as Client.InsertMany does: one result per job, in
// order. InsertMiddleware wraps it.
type InsertFunc func(ctx context.Context, params []InsertManyParams) ([]InsertResult, error)

// InsertMiddleware wraps every Insert and InsertMany of a client (River's
// JobInsertMiddleware): it runs around the insert, may change what each job
// is inserted with (its Opts), calls next to insert, and returns next's
// results and error. It runs before the jobs are validated. Package
// docketotel's tracing is one; a middleware that changes a job's options
// gives next a new InsertOpts rather than modifying the caller's.
type InsertMiddleware func(next InsertFunc) InsertFunc
