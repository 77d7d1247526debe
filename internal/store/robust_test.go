package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// expire moves the lease of job id a minute into the past.
func (b bundle) expire(t *testing.T, id string) {
	t.Helper()
	_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": id}, bson.M{"$set": bson.M{"leaseExpiresAt": time.Now().Add(-time.Minute)}})
	require.NoError(t, err)
}

// runningByHand inserts a running job with an expired lease as another app
// (or a worker that died between its claim and the burial) leaves it, with
// extra fields on top.
func (b bundle) runningByHand(t *testing.T, id string, extra ...bson.E) {
	t.Helper()
	now := time.Now()
	doc := bson.D{
		{Key: "_id", Value: id}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "default"}, {Key: "args", Value: bson.D{}},
		{Key: "state", Value: "running"}, {Key: "priority", Value: 0}, {Key: "runAt", Value: now},
		{Key: "attempt", Value: 1}, {Key: "maxAttempts", Value: 25}, {Key: "errors", Value: bson.A{}},
		{Key: "owner", Value: "gone"}, {Key: "leaseToken", Value: "tok-" + id},
		{Key: "leaseExpiresAt", Value: now.Add(-time.Minute)}, {Key: "createdAt", Value: now}, {Key: "updatedAt", Value: now},
	}
	for _, e := range extra {
		replaced := false
		for i := range doc {
			if doc[i].Key == e.Key {
				doc[i].Value, replaced = e.Value, true
			}
		}
		if !replaced {
			doc = append(doc, e)
		}
	}
	_, err := store.Of(b.q).Collection().InsertOne(b.ctx, doc)
	require.NoError(t, err)
}

// TestReapBuriesUndecodableJobsAndReapsTheRest: issue 10 scenario 2. One
// running job that does not decode must not stop the reaper.
func TestReapBuriesUndecodableJobsAndReapsTheRest(t *testing.T) {
	b := setup(t)
	res, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	good := b.claim(t, claimAll)
	b.expire(t, good.ID)
	b.runningByHand(t, "bad-attempt", bson.E{Key: "attempt", Value: "x"})
	b.runningByHand(t, "bad-errors", bson.E{Key: "errors", Value: 5})
	b.runningByHand(t, "bad-owner", bson.E{Key: "owner", Value: bson.A{1}}, bson.E{Key: "uniqueKey", Value: "u"})

	r, err := store.Of(b.q).Reap(b.ctx, 0, 100)
	require.NoError(t, err)
	require.Equal(t, store.ReapResult{Requeued: 1, Buried: 3}, r)
	require.Equal(t, jobs.StateAvailable, b.get(t, res.ID).State)
	for _, id := range []string{"bad-attempt", "bad-errors", "bad-owner"} {
		var doc struct {
			State  string `bson:"state"`
			Errors []struct {
				Message string `bson:"message"`
			} `bson:"errors"`
		}
		require.NoError(t, store.Of(b.q).Collection().FindOne(b.ctx, bson.M{"_id": id}).Decode(&doc))
		require.Equal(t, "dead", doc.State, id)
		require.Len(t, doc.Errors, 1, id)
		require.Contains(t, doc.Errors[0].Message, "malformed job document", id)
	}
	// The buried job freed its unique key.
	_, err = b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{UniqueKey: "u"})
	require.NoError(t, err)
	// And the good one runs again.
	again := b.claim(t, claimAll)
	require.Equal(t, res.ID, again.ID)
	require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(again)))
}

// TestCleanAndStatsReadEachDocumentOnItsOwn: ids and kinds of another
// type, written by another app, neither stop retention nor the stats.
func TestCleanAndStatsReadEachDocumentOnItsOwn(t *testing.T) {
	b := setup(t)
	old := time.Now().Add(-48 * time.Hour)
	_, err := store.Of(b.q).Collection().InsertMany(b.ctx, []any{
		bson.D{{Key: "_id", Value: 42}, {Key: "kind", Value: 5}, {Key: "state", Value: "succeeded"}, {Key: "finishedAt", Value: old}},
		bson.D{{Key: "_id", Value: "s1"}, {Key: "kind", Value: "k"}, {Key: "state", Value: "succeeded"}, {Key: "finishedAt", Value: old}},
		bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "state", Value: 7}},
	})
	require.NoError(t, err)

	stats, err := b.q.Stats(b.ctx)
	require.NoError(t, err)
	total := int64(0)
	for _, qs := range stats {
		for _, byState := range qs.Counts {
			for _, n := range byState {
				total += n
			}
		}
	}
	require.EqualValues(t, 3, total)

	n, err := store.Of(b.q).Clean(b.ctx, jobs.StateSucceeded, 24*time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	left, err := store.Of(b.q).Collection().CountDocuments(b.ctx, bson.M{})
	require.NoError(t, err)
	require.EqualValues(t, 1, left)
}

// cancelWhileRunning claims a job and asks it to stop, as `enqueue cancel`
// does while it runs.
func (b bundle) cancelWhileRunning(t *testing.T) *jobs.Job {
	t.Helper()
	_, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{UniqueKey: "c"})
	require.NoError(t, err)
	j := b.claim(t, claimAll)
	out, err := b.q.Cancel(b.ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, queue.CancelRequested, out)
	return j
}

// requireCancelled checks that a job whose cancel was acknowledged ended
// cancelled, says why, freed its key, and never runs again.
func (b bundle) requireCancelled(t *testing.T, id, instead string) {
	t.Helper()
	got := b.get(t, id)
	require.Equal(t, jobs.StateCancelled, got.State)
	require.NotNil(t, got.FinishedAt)
	require.Equal(t, "c", got.FinishedUniqueKey)
	require.NotEmpty(t, got.Errors)
	last := got.Errors[len(got.Errors)-1].Message
	require.Contains(t, last, "cancel requested at")
	require.Contains(t, last, instead)
	require.Nil(t, b.claim(t, claimAll), "a cancelled job must not run again")
}

// TestAcknowledgedCancelSurvivesFailReapAndRelease: issue 10 scenario 4.
func TestAcknowledgedCancelSurvivesFailReapAndRelease(t *testing.T) {
	t.Run("fail", func(t *testing.T) {
		b := setup(t)
		j := b.cancelWhileRunning(t)
		f, err := store.Of(b.q).Fail(b.ctx, store.LeaseOf(j), j, errors.New("boom"))
		require.NoError(t, err)
		require.Equal(t, jobs.StateCancelled, f.State)
		b.requireCancelled(t, j.ID, "instead of being retried")
		require.Equal(t, "boom", b.get(t, j.ID).Errors[0].Message)
	})
	t.Run("reap", func(t *testing.T) {
		b := setup(t)
		j := b.cancelWhileRunning(t)
		b.expire(t, j.ID)
		r, err := store.Of(b.q).Reap(b.ctx, 0, 100)
		require.NoError(t, err)
		require.Equal(t, store.ReapResult{Cancelled: 1}, r)
		b.requireCancelled(t, j.ID, "instead of being re-queued")
	})
	t.Run("release", func(t *testing.T) {
		b := setup(t)
		j := b.cancelWhileRunning(t)
		require.NoError(t, store.Of(b.q).Release(b.ctx, store.LeaseOf(j)))
		b.requireCancelled(t, j.ID, "instead of being released")
	})
	t.Run("batch claim then fail", func(t *testing.T) {
		b := setup(t)
		_, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{UniqueKey: "c"})
		require.NoError(t, err)
		enqueueN(t, b, 1)
		got, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 2)
		require.NoError(t, err)
		require.Len(t, got, 2)
		_, err = b.q.Cancel(b.ctx, got[0].ID)
		require.NoError(t, err)
		f, err := store.Of(b.q).Fail(b.ctx, store.LeaseOf(got[0]), got[0], errors.New("boom"))
		require.NoError(t, err)
		require.Equal(t, jobs.StateCancelled, f.State)
		// The other job of the batch, not asked to stop, is retried.
		f, err = store.Of(b.q).Fail(b.ctx, store.LeaseOf(got[1]), got[1], errors.New("boom"))
		require.NoError(t, err)
		require.Equal(t, jobs.StateAvailable, f.State)
		require.Equal(t, jobs.StateCancelled, b.get(t, got[0].ID).State)
	})
	t.Run("null is no request", func(t *testing.T) {
		b := setup(t)
		_, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
		require.NoError(t, err)
		j := b.claim(t, claimAll)
		_, err = store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": j.ID}, bson.M{"$set": bson.M{"cancelRequestedAt": nil}})
		require.NoError(t, err)
		require.NoError(t, store.Of(b.q).Release(b.ctx, store.LeaseOf(j)))
		require.Equal(t, jobs.StateAvailable, b.get(t, j.ID).State)
	})
	t.Run("a lost lease still writes nothing", func(t *testing.T) {
		b := setup(t)
		j := b.cancelWhileRunning(t)
		stale := store.Lease{JobID: j.ID, Token: "stale"}
		_, err := store.Of(b.q).Fail(b.ctx, stale, j, errors.New("late"))
		require.ErrorIs(t, err, jobs.ErrLeaseLost)
		require.ErrorIs(t, store.Of(b.q).Release(b.ctx, stale), jobs.ErrLeaseLost)
		require.Equal(t, jobs.StateRunning, b.get(t, j.ID).State)
	})
}

// TestCancelOfAnUnknownStateReturns: issue 10 scenario 9. Cancel of a job
// whose state is none of the five returns an error naming it, even with a
// context that never ends.
func TestCancelOfAnUnknownStateReturns(t *testing.T) {
	b := setup(t)
	_, err := store.Of(b.q).Collection().InsertMany(b.ctx, []any{
		bson.D{{Key: "_id", Value: "weird"}, {Key: "state", Value: "weird"}},
		bson.D{{Key: "_id", Value: "numeric"}, {Key: "state", Value: 3}},
		bson.D{{Key: "_id", Value: "stateless"}},
	})
	require.NoError(t, err)
	for id, want := range map[string]string{
		"weird":     `unknown job state "weird"`,
		"numeric":   `state is 32-bit integer {"$numberInt":"3"}, not a string`,
		"stateless": "no state field",
	} {
		done := make(chan error, 1)
		go func() {
			_, err := b.q.Cancel(context.Background(), id)
			done <- err
		}()
		select {
		case err := <-done:
			require.ErrorIs(t, err, queue.ErrUnknownState, id)
			require.ErrorContains(t, err, want)
		case <-time.After(20 * time.Second):
			t.Fatalf("Cancel of job %s did not return", id)
		}
	}
}
