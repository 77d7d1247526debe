package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// after enqueues a job of kind k waiting for parents.
func (b bundle) after(t *testing.T, parents ...string) string {
	t.Helper()
	res, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{After: parents})
	require.NoError(t, err)
	return res.ID
}

func (b bundle) enqueueK(t *testing.T, opts queue.InsertOpts) string {
	t.Helper()
	res, err := b.q.Enqueue(b.ctx, "k", nil, opts)
	require.NoError(t, err)
	return res.ID
}

// run claims the one runnable job, which must be id, and ends it in s.
func (b bundle) run(t *testing.T, id string, s jobs.State) {
	t.Helper()
	b.end(t, b.claimID(t, id), s)
}

func (b bundle) settle(t *testing.T, id string) {
	t.Helper()
	ok, err := b.q.SettleDependentsOf(b.ctx, id)
	require.NoError(t, err)
	require.True(t, ok, "job %s had no dependents due", id)
}

func (b bundle) requireState(t *testing.T, s jobs.State, ids ...string) {
	t.Helper()
	for _, id := range ids {
		require.Equal(t, s, b.get(t, id).State, "job %s", id)
	}
}

// requireNothingToClaim checks that no job is runnable.
func (b bundle) requireNothingToClaim(t *testing.T) {
	t.Helper()
	require.Nil(t, b.claim(t, claimAll))
}

func TestDepChainRunsInOrder(t *testing.T) {
	b := setup(t)
	a := b.enqueueK(t, queue.InsertOpts{})
	c1 := b.after(t, a)
	c2 := b.after(t, c1)
	b.requireState(t, jobs.StateBlocked, c1, c2)
	require.True(t, b.get(t, a).Dependents)
	require.Equal(t, []string{a}, b.get(t, c1).WaitingOn)
	require.False(t, b.get(t, c1).Linking)

	b.run(t, a, jobs.StateSucceeded)
	// The finishing write leaves the outcome due; nothing runs until it
	// is settled.
	b.requireNothingToClaim(t)
	b.settle(t, a)
	b.requireState(t, jobs.StateAvailable, c1)
	b.requireState(t, jobs.StateBlocked, c2)
	b.run(t, c1, jobs.StateSucceeded)
	b.settle(t, c1)
	b.run(t, c2, jobs.StateSucceeded)
	require.Equal(t, []string{a}, b.get(t, c1).After)
	require.Empty(t, b.get(t, c1).WaitingOn)

	// Settled once: a second settle finds nothing due.
	ok, err := b.q.SettleDependentsOf(b.ctx, a)
	require.NoError(t, err)
	require.False(t, ok)
}

func TestDepFanInWaitsForEveryParent(t *testing.T) {
	b := setup(t)
	p1 := b.enqueueK(t, queue.InsertOpts{})
	p2 := b.enqueueK(t, queue.InsertOpts{})
	p3 := b.enqueueK(t, queue.InsertOpts{})
	child := b.after(t, p1, p2, p3)
	for i, p := range []string{p1, p2, p3} {
		b.run(t, p, jobs.StateSucceeded)
		b.settle(t, p)
		if i < 2 {
			b.requireState(t, jobs.StateBlocked, child)
		}
	}
	b.run(t, child, jobs.StateSucceeded)
}

func TestDepFanOutReleasesEveryChild(t *testing.T) {
	b := setup(t)
	p := b.enqueueK(t, queue.InsertOpts{})
	ins := make([]queue.Insert, 20)
	for i := range ins {
		ins[i] = queue.Insert{Kind: "k", Opts: queue.InsertOpts{After: []string{p}}}
	}
	res, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	b.run(t, p, jobs.StateSucceeded)
	b.settle(t, p)
	for _, r := range res {
		b.requireState(t, jobs.StateAvailable, r.ID)
	}
}

func TestDepParentsInTheSameEnqueue(t *testing.T) {
	b := setup(t)
	res, err := b.q.EnqueueMany(b.ctx, []queue.Insert{
		{Kind: "k", Opts: queue.InsertOpts{ID: "child", After: []string{"p1", "p2"}}},
		{Kind: "k", Opts: queue.InsertOpts{ID: "p1"}},
		{Kind: "k", Opts: queue.InsertOpts{ID: "p2"}},
	})
	require.NoError(t, err)
	require.Len(t, res, 3)
	b.requireState(t, jobs.StateBlocked, "child")
	require.True(t, b.get(t, "p1").Dependents)
	require.True(t, b.get(t, "p2").Dependents)
}

func TestDepFailedParentCancelsTransitively(t *testing.T) {
	for _, end := range []jobs.State{jobs.StateDead, jobs.StateCancelled} {
		t.Run(string(end), func(t *testing.T) {
			b := setup(t)
			a := b.enqueueK(t, queue.InsertOpts{})
			child := b.after(t, a)
			grandchild := b.after(t, child)
			anyway := b.enqueueK(t, queue.InsertOpts{After: []string{a}, AfterRunAnyway: true})
			b.run(t, a, end)
			b.settle(t, a)

			c := b.get(t, child)
			require.Equal(t, jobs.StateCancelled, c.State)
			require.Contains(t, c.Errors[len(c.Errors)-1].Message, "parent "+a+" ended "+string(end))
			b.requireState(t, jobs.StateAvailable, anyway)
			// The settle goes on down: the cancelled child's dependents
			// are told too.
			ok, err := b.q.SettleDependentsOf(b.ctx, child)
			require.NoError(t, err)
			require.False(t, ok, "settled already")
			g := b.get(t, grandchild)
			require.Equal(t, jobs.StateCancelled, g.State)
			require.Contains(t, g.Errors[len(g.Errors)-1].Message, "parent "+child+" ended cancelled")
			b.run(t, anyway, jobs.StateSucceeded)
		})
	}
}

func TestDepCancelOfABlockedJobCancelsItsDependents(t *testing.T) {
	b := setup(t)
	a := b.enqueueK(t, queue.InsertOpts{})
	child := b.after(t, a)
	grandchild := b.after(t, child)
	out, err := b.q.Cancel(b.ctx, child)
	require.NoError(t, err)
	require.Equal(t, queue.Cancelled, out)
	// Cancel settles the cancelled job's dependents at once.
	b.requireState(t, jobs.StateCancelled, child, grandchild)
	b.run(t, a, jobs.StateSucceeded)
	b.settle(t, a)
	b.requireState(t, jobs.StateCancelled, child)
}

func TestDepInsertedAfterItsParentFinished(t *testing.T) {
	b := setup(t)
	ok := b.enqueueK(t, queue.InsertOpts{})
	bad := b.enqueueK(t, queue.InsertOpts{})
	b.run(t, ok, jobs.StateSucceeded)
	b.run(t, bad, jobs.StateDead)

	b.requireState(t, jobs.StateAvailable, b.after(t, ok))
	cancelled := b.get(t, b.after(t, ok, bad))
	require.Equal(t, jobs.StateCancelled, cancelled.State)
	require.Contains(t, cancelled.Errors[0].Message, "parent "+bad+" ended dead")
	b.requireState(t, jobs.StateAvailable, b.enqueueK(t, queue.InsertOpts{After: []string{ok, bad}, AfterRunAnyway: true}))

	missing := b.get(t, b.after(t, "no-such-job"))
	require.Equal(t, jobs.StateCancelled, missing.State)
	require.Contains(t, missing.Errors[0].Message, "parent no-such-job is not in the collection")
	b.requireState(t, jobs.StateAvailable, b.enqueueK(t, queue.InsertOpts{After: []string{"no-such-job"}, AfterRunAnyway: true}))
}

func TestDepRejectsInvalidAfter(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		name  string
		opts  queue.InsertOpts
		field string
	}{
		{"self", queue.InsertOpts{ID: "me", After: []string{"x", "me"}}, "after[1]"},
		{"twice", queue.InsertOpts{After: []string{"x", "x"}}, "after[1]"},
		{"empty", queue.InsertOpts{After: []string{""}}, "after[0]"},
		{"too many", queue.InsertOpts{After: make([]string, queue.MaxAfter+1)}, "after"},
		{"anyway alone", queue.InsertOpts{AfterRunAnyway: true}, "afterRunAnyway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.q.Enqueue(b.ctx, "k", nil, tc.opts)
			var ve *queue.ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, tc.field, ve.Field)
		})
	}
}

// An enqueuer that stops between the insert and the link leaves the job
// linking; the leader's pass links it.
func TestDepLinkFinishedByThePass(t *testing.T) {
	for _, stop := range []string{"link:mark", "link:apply"} {
		t.Run(stop, func(t *testing.T) {
			b := setup(t)
			done := b.enqueueK(t, queue.InsertOpts{})
			running := b.enqueueK(t, queue.InsertOpts{})
			b.run(t, done, jobs.StateSucceeded)
			died := errors.New("enqueuer died")
			ctx := queue.WithDepsStep(b.ctx, func(_ context.Context, step string) error {
				if step == stop {
					return died
				}
				return nil
			})
			res, err := b.q.Enqueue(ctx, "k", nil, queue.InsertOpts{After: []string{done, running}})
			require.NoError(t, err, "the job is in; the link is the pass's to finish")
			require.True(t, b.get(t, res.ID).Linking)

			// Not before the grace period.
			got, err := b.q.SettleDependents(b.ctx, time.Hour, 100)
			require.NoError(t, err)
			require.Zero(t, got.Linked)
			got, err = b.q.SettleDependents(b.ctx, 0, 100)
			require.NoError(t, err)
			require.Equal(t, 1, got.Linked)
			j := b.get(t, res.ID)
			require.False(t, j.Linking)
			require.Equal(t, []string{running}, j.WaitingOn)
			require.True(t, b.get(t, running).Dependents)

			b.run(t, running, jobs.StateSucceeded)
			got, err = b.q.SettleDependents(b.ctx, 0, 100)
			require.NoError(t, err)
			require.Equal(t, 1, got.Settled)
			b.run(t, res.ID, jobs.StateSucceeded)
		})
	}
}

// Blocked jobs written by another app with parents docket cannot read go
// dead, saying why; one written right is run.
func TestDepForeignBlockedJobs(t *testing.T) {
	b := setup(t)
	parent := b.enqueueK(t, queue.InsertOpts{})
	b.run(t, parent, jobs.StateSucceeded)
	b.enqueueK(t, queue.InsertOpts{ID: "later", Priority: -1})
	coll := store.Of(b.q).Collection()
	blocked := func(id string, fields bson.D) bson.D {
		return append(bson.D{{Key: "_id", Value: id}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "default"},
			{Key: "state", Value: "blocked"}, {Key: "linking", Value: true}, {Key: "runAt", Value: time.Now()}}, fields...)
	}
	_, err := coll.InsertMany(b.ctx, []any{
		blocked("string", bson.D{{Key: "waitingOn", Value: parent}}),
		blocked("numbers", bson.D{{Key: "waitingOn", Value: bson.A{1, 2}}}),
		blocked("none", nil),
		blocked("anyway-text", bson.D{{Key: "waitingOn", Value: bson.A{parent}}, {Key: "runAnyway", Value: "yes"}}),
		blocked("null-errors", bson.D{{Key: "waitingOn", Value: bson.A{"gone"}}, {Key: "errors", Value: nil}}),
		blocked("right", bson.D{{Key: "waitingOn", Value: bson.A{parent}}}),
		blocked("after-only", bson.D{{Key: "after", Value: bson.A{parent}}}),
		blocked("waiting-only", bson.D{{Key: "waitingOn", Value: bson.A{parent, "later"}}}),
		blocked("outside", bson.D{{Key: "after", Value: bson.A{parent}}, {Key: "waitingOn", Value: bson.A{"other"}}}),
	})
	require.NoError(t, err)
	got, err := b.q.SettleDependents(b.ctx, 0, 100)
	require.NoError(t, err)
	require.Equal(t, 5, got.Buried)
	require.Equal(t, 4, got.Linked)
	for _, id := range []string{"string", "numbers", "none", "anyway-text", "outside"} {
		// Read field by field: these documents do not decode as a job.
		raw, err := coll.FindOne(b.ctx, bson.M{"_id": id}).Raw()
		require.NoError(t, err)
		require.Equal(t, "dead", raw.Lookup("state").StringValue(), id)
		msg := raw.Lookup("errors", "0", "message").StringValue()
		require.True(t, strings.HasPrefix(msg, "dead: a blocked job must name its parents"), msg)
		require.NotContains(t, raw.String(), `"linking"`)
	}
	c := b.get(t, "null-errors")
	require.Equal(t, jobs.StateCancelled, c.State)
	require.Contains(t, c.Errors[0].Message, "parent gone is not in the collection")
	b.requireState(t, jobs.StateAvailable, "right", "after-only")
	// Its second parent, unfinished when it was linked, releases it.
	w := b.get(t, "waiting-only")
	require.Equal(t, []string{parent, "later"}, w.After)
	require.Equal(t, []string{"later"}, w.WaitingOn)
	b.run(t, "later", jobs.StateSucceeded)
	b.settle(t, "later")
	b.requireState(t, jobs.StateAvailable, "waiting-only")
}

func TestDepRetentionAndDeleteKeepADueParent(t *testing.T) {
	b := setup(t)
	a := b.enqueueK(t, queue.InsertOpts{})
	child := b.after(t, a)
	b.finishAs(t, jobs.StateSucceeded, a) // 48 h ago, not settled
	n, err := store.Of(b.q).Clean(b.ctx, jobs.StateSucceeded, time.Hour, 100)
	require.NoError(t, err)
	require.Zero(t, n)
	purged, err := b.q.Purge(b.ctx, jobs.StateSucceeded, time.Hour)
	require.NoError(t, err)
	require.Zero(t, purged)
	out, err := b.q.Delete(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(a)}}, false)
	require.NoError(t, err)
	require.ErrorIs(t, out[0].Err, queue.ErrHasDependents)

	b.settle(t, a)
	b.requireState(t, jobs.StateAvailable, child)
	n, err = store.Of(b.q).Clean(b.ctx, jobs.StateSucceeded, time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func TestDepDeleteOfAWaitedForJobIsRefused(t *testing.T) {
	b := setup(t)
	a := b.enqueueK(t, queue.InsertOpts{})
	b.after(t, a)
	out, err := b.q.Delete(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(a)}}, true)
	require.NoError(t, err)
	require.ErrorIs(t, out[0].Err, queue.ErrHasDependents)
	b.requireState(t, jobs.StateAvailable, a)
}

// An operator retries a dead parent, then its cancelled dependent: the
// dependent waits for the parent again and runs once it succeeds.
func TestDepRetryADeadParentThenItsDependent(t *testing.T) {
	b := setup(t)
	a := b.enqueueK(t, queue.InsertOpts{})
	child := b.after(t, a)
	b.run(t, a, jobs.StateDead)
	b.settle(t, a)
	b.requireState(t, jobs.StateCancelled, child)

	b.retry(t, a)
	b.retry(t, child)
	b.requireState(t, jobs.StateBlocked, child)
	out, err := b.q.Retry(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(child)}})
	require.NoError(t, err)
	require.ErrorIs(t, out[0].Err, queue.ErrWaitingForParents)

	b.run(t, a, jobs.StateSucceeded)
	b.settle(t, a)
	b.run(t, child, jobs.StateSucceeded)

	// Run again, a succeeded parent would not run its dependents again.
	out, err = b.q.Retry(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(a)}})
	require.NoError(t, err)
	require.ErrorIs(t, out[0].Err, queue.ErrHasDependents)
	// A succeeded dependent retried runs again at once: its parents
	// succeeded.
	b.retry(t, child)
	b.run(t, child, jobs.StateSucceeded)
}

// A parent retried before its outcome was settled: its dependents wait
// for the retry's outcome.
func TestDepParentRetriedBeforeSettle(t *testing.T) {
	b := setup(t)
	a := b.enqueueK(t, queue.InsertOpts{})
	child := b.after(t, a)
	b.run(t, a, jobs.StateDead)
	b.retry(t, a)
	ok, err := b.q.SettleDependentsOf(b.ctx, a)
	require.NoError(t, err)
	require.False(t, ok)
	b.requireState(t, jobs.StateBlocked, child)
	b.run(t, a, jobs.StateSucceeded)
	b.settle(t, a)
	b.run(t, child, jobs.StateSucceeded)
}

// An enqueuer stalls between marking a dependent's parents and reading
// them; meanwhile one parent succeeds, is settled (which releases the
// dependent from it) and deleted by retention. Read missing when the link
// resumes, it must not cancel a job that no longer waits for it.
func TestDepParentSettledAndDeletedDuringLink(t *testing.T) {
	b := setup(t)
	p1 := b.enqueueK(t, queue.InsertOpts{Priority: 1})
	p2 := b.enqueueK(t, queue.InsertOpts{})
	stalled, resume := make(chan struct{}), make(chan struct{})
	ctx := queue.WithDepsStep(b.ctx, func(_ context.Context, step string) error {
		if step == "link:mark" {
			close(stalled)
			<-resume
		}
		return nil
	})
	done := make(chan string, 1)
	go func() {
		res, err := b.q.Enqueue(ctx, "k", nil, queue.InsertOpts{After: []string{p1, p2}})
		if err != nil {
			res.ID = err.Error()
		}
		done <- res.ID
	}()
	<-stalled
	b.run(t, p1, jobs.StateSucceeded)
	b.settle(t, p1)
	b.finishedLongAgo(t, p1)
	n, err := store.Of(b.q).Clean(b.ctx, jobs.StateSucceeded, time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	close(resume)
	child := <-done
	j := b.get(t, child)
	require.Equal(t, jobs.StateBlocked, j.State, "errors: %v", j.Errors)
	require.Equal(t, []string{p2}, j.WaitingOn)
	b.run(t, p2, jobs.StateSucceeded)
	b.settle(t, p2)
	b.run(t, child, jobs.StateSucceeded)
}

// A blocked job of a bounded queue holds its slot while it waits: the
// reaper's freeing of stranded slots leaves it, and admission counts it.
func TestDepBlockedJobHoldsItsCapacitySlot(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 2, "test"))
	parent, err := b.capped(queue.InsertOpts{})
	require.NoError(t, err)
	child, err := b.capped(queue.InsertOpts{After: []string{parent.ID}})
	require.NoError(t, err)
	b.requireState(t, jobs.StateBlocked, child.ID)
	n, err := b.q.FreeStrandedSlots(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, 2, b.occupied(t))
	b.requireFull(t, 2)
	// Cancelled while it waits, it frees its slot.
	_, err = b.q.Cancel(b.ctx, child.ID)
	require.NoError(t, err)
	require.Equal(t, 1, b.occupied(t))
}

// An operator's Retry of a succeeded job that has parents stalls between
// reading it (no dependents then) and its write; meanwhile a new job that
// waits for it is enqueued, linked and released by its success. The
// resumed write must not run it again: its dependent would not run again.
func TestDepRetryStalledWhileADependentIsLinked(t *testing.T) {
	b := setup(t)
	a := b.enqueueK(t, queue.InsertOpts{})
	child := b.after(t, a)
	b.run(t, a, jobs.StateSucceeded)
	b.settle(t, a)
	b.run(t, child, jobs.StateSucceeded)

	stalled, resume := make(chan struct{}), make(chan struct{})
	ctx := queue.WithDepsStep(b.ctx, func(_ context.Context, step string) error {
		if step == "retry:read" {
			close(stalled)
			<-resume
		}
		return nil
	})
	type outcome struct {
		out []queue.ActionResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		out, err := b.q.Retry(ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(child)}})
		done <- outcome{out, err}
	}()
	<-stalled
	grandchild := b.after(t, child)
	b.requireState(t, jobs.StateAvailable, grandchild)
	close(resume)
	o := <-done
	require.NoError(t, o.err)
	require.ErrorIs(t, o.out[0].Err, queue.ErrHasDependents)
	b.requireState(t, jobs.StateSucceeded, child)
	b.run(t, grandchild, jobs.StateSucceeded)
	b.requireNothingToClaim(t)
}

// A parent claimed before its dependent's link, whose worker so does not
// know of the dependent and settles nothing: the process that linked the
// dependent settles it as soon as it finishes, whether it finishes during
// the link (read finished) or after it (watched), and whoever else
// settles it too; a dead one cancels its dependent the same way.
func TestDepParentClaimedBeforeTheLink(t *testing.T) {
	b := setup(t)
	other, err := queue.New(b.db, queue.Config{}) // another process
	require.NoError(t, err)
	soon := func(s jobs.State, id string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			j, err := b.q.Get(b.ctx, id)
			require.NoError(c, err)
			assert.Equal(c, s, j.State)
		}, 2*time.Second, 10*time.Millisecond, "job %s", id)
	}

	// Finishes after the link: watched.
	p := b.claimID(t, b.enqueueK(t, queue.InsertOpts{}))
	res, err := other.Enqueue(b.ctx, "k", nil, queue.InsertOpts{After: []string{p.ID}})
	require.NoError(t, err)
	b.requireState(t, jobs.StateBlocked, res.ID)
	b.end(t, p, jobs.StateSucceeded)
	soon(jobs.StateAvailable, res.ID)
	b.run(t, res.ID, jobs.StateSucceeded)

	// Dead after the link, with its settle run by another at once too.
	p = b.claimID(t, b.enqueueK(t, queue.InsertOpts{}))
	d := b.after(t, p.ID)
	b.end(t, p, jobs.StateDead)
	_, err = other.SettleDependentsOf(b.ctx, p.ID)
	require.NoError(t, err)
	soon(jobs.StateCancelled, d)
	require.Len(t, b.get(t, d).Errors, 1, "cancelled once")

	// Finishes between the link's mark and its read.
	p = b.claimID(t, b.enqueueK(t, queue.InsertOpts{}))
	ctx := queue.WithDepsStep(b.ctx, func(ctx context.Context, step string) error {
		if step == "link:mark" {
			b.end(t, p, jobs.StateSucceeded)
		}
		return nil
	})
	res, err = b.q.Enqueue(ctx, "k", nil, queue.InsertOpts{After: []string{p.ID}})
	require.NoError(t, err)
	b.requireState(t, jobs.StateAvailable, res.ID)
	b.run(t, res.ID, jobs.StateSucceeded)
	b.requireNothingToClaim(t)
}
