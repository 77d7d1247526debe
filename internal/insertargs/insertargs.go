// Package insertargs holds what an insert of the Go client takes from its
// args' own methods: the insert defaults their type declares
// (docket.ArgsWithInsertOpts) and their Validate. Both are looked up on the
// value and on a pointer to a copy of it, so a method with a pointer
// receiver counts at insert as it does in the worker, which decodes args
// into a T and calls Validate on a *T. The client's Insert, InsertMany,
// InsertWorkflow and periodic jobs use it, and so does dockettest, so that
// what a test runs is what an insert gives.
package insertargs

import (
	"fmt"
	"reflect"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
)

// WithInsertOpts is an args type that declares its kind's insert defaults.
type WithInsertOpts interface {
	InsertOpts() queue.InsertOpts
}

// As returns args as an I: args itself when it implements I, else a
// pointer to a copy of it when that does.
func As[I any](args any) (I, bool) {
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

// Opts returns o with each field it leaves zero taken from the InsertOpts()
// args declare, if they do.
func Opts(args any, o queue.InsertOpts) queue.InsertOpts {
	if a, ok := As[WithInsertOpts](args); ok {
		o = Fill(o, a.InsertOpts())
	}
	return o
}

// Fill returns o with each field it leaves zero taken from d. RunAt and
// Delay are one setting: o's, when it sets either.
func Fill(o, d queue.InsertOpts) queue.InsertOpts {
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

// Validate runs the Validate of args, if they have one, and returns a
// *queue.ValidationError for job index naming the kind and wrapping its
// error: the worker would send the job dead with it.
func Validate(index int, args jobs.Args) error {
	v, ok := As[jobs.Validator](args)
	if !ok {
		return nil
	}
	if err := v.Validate(); err != nil {
		return &queue.ValidationError{Index: index, Field: "args",
			Reason: fmt.Sprintf("%q args fail their Validate: %v", args.Kind(), err), Err: err}
	}
	return nil
}
