package queue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// enqueueManyAfter enqueues n jobs of kind k waiting for parent in one
// EnqueueMany under ctx.
func (b bundle) enqueueManyAfter(t *testing.T, ctx context.Context, parent string, n int) []string {
	t.Helper()
	ins := make([]queue.Insert, n)
	for i := range ins {
		ins[i] = queue.Insert{Kind: "k", Opts: queue.InsertOpts{After: []string{parent}}}
	}
	res, err := b.q.EnqueueMany(ctx, ins)
	require.NoError(t, err)
	ids := make([]string, n)
	for i, r := range res {
		require.NoError(t, r.Err)
		ids[i] = r.ID
	}
	return ids
}

// One EnqueueMany adds all its jobs to a parent's list at once: the bound
// must hold for the list after the add, not before it. A list with room
// for some of them but not all, and more jobs than the bound, flag the
// parent instead, and its settle finds them all by after.
func TestDepEnqueueManyKeepsTheListWithinItsBound(t *testing.T) {
	b := setup(t)
	ctx := queue.WithMaxListed(b.ctx, 3)
	a := b.enqueueK(t, queue.InsertOpts{})
	first := b.enqueueManyAfter(t, ctx, a, 2)
	second := b.enqueueManyAfter(t, ctx, a, 2)
	ids, _, many := b.dependentsList(t, a)
	require.Equal(t, first, ids, "the list passed its bound of 3")
	require.True(t, many)

	c := b.enqueueK(t, queue.InsertOpts{})
	kids := b.enqueueManyAfter(t, ctx, c, 4)
	ids, _, many = b.dependentsList(t, c)
	require.Empty(t, ids, "4 jobs listed at once past a bound of 3")
	require.True(t, many)

	b.finishAs(t, jobs.StateSucceeded, a, c)
	b.settle(t, a)
	b.settle(t, c)
	b.requireState(t, jobs.StateAvailable, append(append(first, second...), kids...)...)
}

// Another app wrote a parent's dependentIds with elements that are not
// job ids: a regex (which an $in applies as a pattern) and a number. The
// list is not trusted: the settle finds the dependents by after.
func TestDepForeignListFallsBackToAfter(t *testing.T) {
	b := setup(t)
	a := b.enqueueK(t, queue.InsertOpts{})
	c := b.after(t, a)
	_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.D{{Key: "_id", Value: a}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "dependentIds", Value: bson.A{bson.Regex{Pattern: "^nothing"}, int32(1)}},
	}}})
	require.NoError(t, err)

	b.run(t, a, jobs.StateSucceeded)
	b.settle(t, a)
	b.requireState(t, jobs.StateAvailable, c)
}

// The leader links the jobs left linking as one batch. One of them waits
// for a parent whose document refuses the list (on MongoDB, one at its
// 16 MiB): every pass fails its link, and must still link the others.
func TestDepLinkLeftGoesOnPastAnUnlinkableJob(t *testing.T) {
	b := setup(t)
	coll := store.Of(b.q).Collection()
	bad, good := b.enqueueK(t, queue.InsertOpts{}), b.enqueueK(t, queue.InsertOpts{})
	died := queue.WithDepsStep(b.ctx, func(context.Context, string) error { return context.Canceled })
	var left []string
	for _, p := range []string{bad, good} {
		res, err := b.q.Enqueue(died, "k", nil, queue.InsertOpts{After: []string{p}})
		require.NoError(t, err)
		left = append(left, res.ID)
	}
	unlist := bson.D{{Key: "$unset", Value: bson.D{{Key: "dependentIds", Value: ""}}}}
	_, err := coll.UpdateOne(b.ctx, bson.D{{Key: "_id", Value: bad}}, unlist)
	require.NoError(t, err)
	// The list write to bad fails: undone, and the link stopped there.
	refuse := queue.WithDepsStep(b.ctx, func(ctx context.Context, step string) error {
		if step != "link:list" {
			return nil
		}
		res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: bad}, {Key: "dependentIds", Value: bson.D{{Key: "$exists", Value: true}}}}, unlist)
		if err != nil {
			return err
		}
		if res.ModifiedCount > 0 {
			return errors.New("the parent's document cannot take the list")
		}
		return nil
	})
	for pass := range 2 {
		res, err := b.q.SettleDependents(refuse, 0, 100)
		require.Error(t, err, "pass %d", pass)
		require.Equal(t, 1-pass, res.Linked, "pass %d", pass)
		require.True(t, b.get(t, left[0]).Linking, "pass %d", pass)
		require.False(t, b.get(t, left[1]).Linking, "pass %d: the job whose parent takes the list was not linked", pass)
	}
}
