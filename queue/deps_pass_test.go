package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// notWritablePrimary is MongoDB's reply to a write sent to a primary that
// stepped down (an election): refused, not applied.
var notWritablePrimary = mongo.CommandError{Code: 10107, Name: "NotWritablePrimary", Message: "not primary"}

// TestSettleDependentsGoesOnPastAFailedSettle: the leader's pass finds two
// parents left due, x then y, and a job left linking. Each pass, the settle
// of the first job it takes up is refused (NotWritablePrimary on its
// release: an election, or a job whose settle keeps failing). The pass must
// go on: y's dependent released, the linking job linked, x left due for the
// next pass, the refusal returned. A pass that stopped at x would never
// reach y or the links while x's settle kept failing: a workflow's tasks
// would stay blocked behind it for good.
func TestSettleDependentsGoesOnPastAFailedSettle(t *testing.T) {
	b := setup(t)
	x := b.enqueueK(t, queue.InsertOpts{ID: "x", Priority: 2})
	y := b.enqueueK(t, queue.InsertOpts{ID: "y", Priority: 1})
	cx, cy := b.after(t, x), b.after(t, y)
	// A job whose enqueuer stopped after marking its parent: left linking.
	p, err := b.q.Enqueue(b.ctx, "p", nil, queue.InsertOpts{})
	require.NoError(t, err)
	died := queue.WithDepsStep(b.ctx, func(_ context.Context, step string) error {
		if step == "link:mark" {
			return context.Canceled
		}
		return nil
	})
	linking, err := b.q.Enqueue(died, "k", nil, queue.InsertOpts{After: []string{p.ID}})
	require.NoError(t, err)
	require.True(t, b.get(t, linking.ID).Linking)
	// Both parents succeed; their workers stop before they settle.
	b.run(t, x, jobs.StateSucceeded)
	b.run(t, y, jobs.StateSucceeded)

	for pass := range 2 {
		refused := false
		ctx := queue.WithDepsStep(b.ctx, func(_ context.Context, step string) error {
			if step == "settle:"+string(jobs.StateSucceeded) && !refused {
				refused = true
				return notWritablePrimary
			}
			return nil
		})
		_, err := b.q.SettleDependents(ctx, 0, 100)
		var refusal mongo.CommandError
		require.ErrorAs(t, err, &refusal, "pass %d", pass)
		require.True(t, refusal.HasErrorCode(10107), "pass %d: %v", pass, err)
	}
	b.requireState(t, jobs.StateBlocked, cx)
	b.requireState(t, jobs.StateAvailable, cy)
	require.False(t, b.get(t, linking.ID).Linking, "the job left linking was not linked")
	due, err := b.q.SettleDependents(b.ctx, 0, 100)
	require.NoError(t, err)
	require.Equal(t, 1, due.Settled, "x, left due, is settled by the next pass")
	b.requireState(t, jobs.StateAvailable, cx)
	n, err := b.db.Collection("jobs").CountDocuments(b.ctx, bson.D{{Key: "dependentsDue", Value: bson.D{{Key: "$exists", Value: true}}}})
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestSettleDependentsReleasesALinkingJobWaitingForNothing: another app
// inserts a job blocked and linking, as WORKFLOWS.md tells it to, with an
// empty waitingOn: the parent in its after had succeeded when it looked
// (or it has no parents at all). The leader's link must make it
// available, not only unset linking, which left it blocked for good with
// nothing to wait for.
func TestSettleDependentsReleasesALinkingJobWaitingForNothing(t *testing.T) {
	b := setup(t)
	p := b.enqueueK(t, queue.InsertOpts{})
	b.run(t, p, jobs.StateSucceeded) // no dependents then: nothing due
	now := time.Now()
	for _, id := range []string{"pulled", "foreign"} {
		after := bson.A{p}
		if id == "foreign" {
			after = bson.A{}
		}
		_, err := b.db.Collection("jobs").InsertOne(b.ctx, bson.D{
			{Key: "_id", Value: id}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "default"}, {Key: "state", Value: jobs.StateBlocked},
			{Key: "args", Value: bson.D{}}, {Key: "errors", Value: bson.A{}}, {Key: "after", Value: after}, {Key: "waitingOn", Value: bson.A{}},
			{Key: "linking", Value: true}, {Key: "runAt", Value: now}, {Key: "createdAt", Value: now}, {Key: "updatedAt", Value: now.Add(-time.Hour)},
		})
		require.NoError(t, err)
	}
	_, err := b.q.SettleDependents(b.ctx, queue.DefaultLinkGrace, 100)
	require.NoError(t, err)
	b.requireState(t, jobs.StateAvailable, "pulled", "foreign")
}
