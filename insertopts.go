package docket

// What an insert of the Go client takes from its args' own methods: the
// insert defaults their type declares (ArgsWithInsertOpts) and their
// Validate. Both are looked up on the value and on a pointer to a copy of
// it, so a method with a pointer receiver counts at insert as it does in
// the worker, which decodes args into a T and calls Validate on a *T.

import (
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
	if o.ID == "" {
		o.ID = d.ID
	}
	if o.Queue == "" {
		o.Queue = d.Queue
	}
	if o.Priority == 0 {
		o.Priority = d.Priority
	}
	if o.RunAt.IsZero() && o.Delay == 0 {
		o.RunAt, o.Delay = d.RunAt, d.Delay
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = d.MaxAttempts
	}
	if o.UniqueKey == "" {
		o.UniqueKey = d.UniqueKey
	}
	if o.UniqueFor == 0 {
		o.UniqueFor = d.UniqueFor
	}
	return o
}

// validateArgs runs the Validate of args, if they have one, and returns a
// *queue.ValidationError for job index naming the kind and wrapping its
// error: the worker would send the job dead with it.
func validateArgs(index int, args jobs.Args) error {
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
