package store

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The fields of the dependency protocol that the finishing writes and
// retention read (package queue links and settles dependents; see its
// deps.go). A job others wait for carries DependentsField until it ends;
// every finishing write renames it to DependentsDueField in the same
// write as the outcome, and the settle that told its dependents renames it
// back.
const (
	DependentsField    = "dependents"
	DependentsDueField = "dependentsDue"
	// DependentIdsField lists a parent's dependents, and
	// DependentsManyField says the list is not complete (package queue's
	// depslist.go).
	DependentIdsField   = "dependentIds"
	DependentsManyField = "dependentsMany"
	// LinkingField marks a blocked job whose enqueuer has not yet linked
	// it to its parents.
	LinkingField = "linking"
)

// NotDue is a filter element that leaves out a finished job whose
// dependents have not been told of its outcome: retention, purge and
// delete keep it until they are.
var NotDue = bson.E{Key: DependentsDueField, Value: bson.D{{Key: "$exists", Value: false}}}

// resultKey is the context key of a job's result for Complete.
type resultKey struct{}

// WithResult returns ctx carrying result, which Complete under it stores
// in the job's result field by the write that records its success. A
// worker passes what the handler set (jobs.SetResult).
func WithResult(ctx context.Context, result bson.Raw) context.Context {
	if result == nil {
		return ctx
	}
	return context.WithValue(ctx, resultKey{}, result)
}

// resultOf is the $set element of the result ctx carries, nil without.
func resultOf(ctx context.Context) []bson.E {
	if r, ok := ctx.Value(resultKey{}).(bson.Raw); ok {
		return []bson.E{{Key: "result", Value: r}}
	}
	return nil
}
