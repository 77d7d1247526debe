package store

import (
	"context"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// progressField holds a running job's progress (jobs.ProgressReport),
// written by its lease's renewals (HeartbeatMany) and by the
// write that finishes it (WithProgress); a claim and a re-queue clear it.
const progressField = "progress"

// progressKey is the context key of a job's progress for its finishing
// write.
type progressKey struct{}

// WithProgress returns ctx carrying p, the latest progress the job's
// handler reported that no renewal wrote yet: a write under ctx that
// finishes the job (Complete, Cancelled, a Fail that ends it dead, a
// release, snooze or retry that a cancel request turns into cancelled)
// stores it in the job's progress field. A write that gives the job back
// clears the field instead.
func WithProgress(ctx context.Context, p jobs.ProgressReport) context.Context {
	return context.WithValue(ctx, progressKey{}, p)
}

// carriesProgress reports whether ctx carries a progress (WithProgress).
func carriesProgress(ctx context.Context) bool {
	_, ok := ctx.Value(progressKey{}).(jobs.ProgressReport)
	return ok
}

// withProgress returns update, a write that finishes a job, with the
// progress ctx carries (WithProgress), if any, added to its $set.
func withProgress(ctx context.Context, update bson.D) bson.D {
	p, ok := ctx.Value(progressKey{}).(jobs.ProgressReport)
	if !ok {
		return update
	}
	return AlsoIn(update, "$set", bson.E{Key: progressField, Value: p})
}
