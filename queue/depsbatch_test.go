package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// A parent settled on its own whose settle fails does not stop the settles
// of the other parents of the batch: they are settled, it is left due for
// the leader's pass, and the failure is returned.
func TestDepSettleManyGoesOnAfterAFailure(t *testing.T) {
	b := setup(t)
	bad1, bad2 := b.enqueueK(t, queue.InsertOpts{}), b.enqueueK(t, queue.InsertOpts{})
	kid1, kid2 := b.after(t, bad1), b.after(t, bad2)
	b.run(t, bad1, jobs.StateDead)
	b.run(t, bad2, jobs.StateDead)

	require.Error(t, errOf(b.q.SettleDependentsOfAll(queue.WithDepsStep(b.ctx, failFirst(func(context.Context) error {
		return errors.New("the first settle fails")
	})), []string{bad1, bad2})))
	b.requireOneSettled(t, bad1, kid1, bad2, kid2)

	require.NoError(t, errOf(b.q.SettleDependentsOfAll(b.ctx, []string{bad1, bad2})))
	b.requireState(t, jobs.StateCancelled, kid1, kid2)
}

// Each parent settled on its own has a deadline of its own: one whose
// settle hangs (the caller's context has none) ends with its deadline, and
// the next is settled still.
func TestDepSettleManyEachHasItsDeadline(t *testing.T) {
	b := setup(t)
	bad1, bad2 := b.enqueueK(t, queue.InsertOpts{}), b.enqueueK(t, queue.InsertOpts{})
	kid1, kid2 := b.after(t, bad1), b.after(t, bad2)
	b.run(t, bad1, jobs.StateDead)
	b.run(t, bad2, jobs.StateDead)

	require.Error(t, errOf(b.q.SettleDependentsOfAll(queue.WithDepsStep(b.ctx, failFirst(func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})), []string{bad1, bad2})))
	b.requireOneSettled(t, bad1, kid1, bad2, kid2)
}

// failFirst is a settle step hook whose first settle of a dead parent
// ends with fail.
func failFirst(fail func(context.Context) error) func(context.Context, string) error {
	var steps atomic.Int64
	return func(ctx context.Context, step string) error {
		if step == "settle:"+string(jobs.StateDead) && steps.Add(1) == 1 {
			return fail(ctx)
		}
		return nil
	}
}

// requireOneSettled requires that of the dead parents bad1 and bad2 one
// is settled, its kid cancelled, and the other left due.
func (b *bundle) requireOneSettled(t *testing.T, bad1, kid1, bad2, kid2 string) {
	t.Helper()
	// Either parent may be read first: its settle failed, the other's did not.
	due := 0
	for _, p := range []struct{ parent, kid string }{{bad1, kid1}, {bad2, kid2}} {
		if b.get(t, p.parent).Dependents {
			b.requireState(t, jobs.StateCancelled, p.kid)
		} else {
			due++
		}
	}
	require.Equal(t, 1, due, "one parent left due, the other settled")
}

// errOf is the error of a call that also returns what it settled.
func errOf(_ queue.SettleReport, err error) error { return err }

// completeReading claims the one runnable job, which must be id, and
// completes it with CompleteReading, returning the job as written.
func (b bundle) completeReading(t *testing.T, id string) bson.Raw {
	t.Helper()
	doc, err := store.Of(b.q).CompleteReading(b.ctx, store.LeaseOf(b.claimID(t, id)))
	require.NoError(t, err)
	require.NotNil(t, doc)
	return doc
}

// ClaimNext takes a chain's next task as it releases it, stamped as a
// claim is and released as a settle leaves it; it takes nothing where a
// settle must decide (two dependents, one waiting for another parent too,
// an outcome settled since, a queue or kind the worker does not take) or
// flow control applies, and the settle as usual then does the rest.
func TestClaimNextTakesAChainsNextTask(t *testing.T) {
	b := setup(t)
	a := b.enqueueK(t, queue.InsertOpts{})
	next := b.after(t, a)
	written := b.completeReading(t, a)
	p := claimAll
	p.Token = "next-token"
	j, err := b.q.ClaimNext(b.ctx, written, tokened(p))
	require.NoError(t, err)
	require.NotNil(t, j)
	require.Equal(t, next, j.ID)
	got := b.get(t, next)
	require.Equal(t, jobs.StateRunning, got.State)
	require.Equal(t, "next-token", got.LeaseToken)
	require.Equal(t, 1, got.Attempt)
	require.Empty(t, got.WaitingOn)
	require.False(t, got.Linking)
	require.False(t, b.get(t, a).Dependents, "still due until marked")
	require.NoError(t, b.q.MarkSettled(b.ctx, written))
	require.True(t, b.get(t, a).Dependents)

	// Taken again from the same document (a stalled worker's): nothing.
	j, err = b.q.ClaimNext(b.ctx, written, tokened(claimAll))
	require.NoError(t, err)
	require.Nil(t, j)
}

func TestClaimNextLeavesToTheSettleWhatItMustDecide(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shape func(b bundle, t *testing.T, parent string) (kids []string)
		p     func(b bundle, t *testing.T) store.ClaimParams
	}{
		{"two dependents", func(b bundle, t *testing.T, parent string) []string {
			return []string{b.after(t, parent), b.after(t, parent)}
		}, nil},
		{"another parent", func(b bundle, t *testing.T, parent string) []string {
			other := b.enqueueK(t, queue.InsertOpts{Queue: "other"})
			return []string{b.after(t, parent, other)}
		}, nil},
		{"another kind", func(b bundle, t *testing.T, parent string) []string {
			res, err := b.q.Enqueue(b.ctx, "other", nil, queue.InsertOpts{After: []string{parent}})
			require.NoError(t, err)
			return []string{res.ID}
		}, nil},
		{"a limit", nil, func(b bundle, t *testing.T) store.ClaimParams {
			require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 5, ""))
			return claimAll
		}},
		{"a rate", nil, func(b bundle, t *testing.T) store.ClaimParams {
			require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 5, Per: time.Second}, ""))
			return claimAll
		}},
		{"a paused queue", nil, func(b bundle, t *testing.T) store.ClaimParams {
			_, err := b.q.Pause(b.ctx, "default", "")
			require.NoError(t, err)
			return claimAll
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			a := b.enqueueK(t, queue.InsertOpts{})
			var kids []string
			if tc.shape != nil {
				kids = tc.shape(b, t, a)
			} else {
				kids = []string{b.after(t, a)}
			}
			written := b.completeReading(t, a)
			p := claimAll
			if tc.p != nil {
				p = tc.p(b, t)
			}
			j, err := b.q.ClaimNext(b.ctx, written, tokened(p))
			require.NoError(t, err)
			require.Nil(t, j)
			for _, k := range kids {
				require.Equal(t, jobs.StateBlocked, b.get(t, k).State, "job %s left to the settle", k)
			}
			_, err = b.q.SettleDependentsOfAll(b.ctx, []string{a}, written)
			require.NoError(t, err)
			require.True(t, b.get(t, a).Dependents, "settled")
		})
	}
}

// A worker that dies between ClaimNext and MarkSettled leaves the parent
// due: the leader's pass settles it, and leaves the next task, running,
// alone.
func TestClaimNextThenDeathIsFinishedByThePass(t *testing.T) {
	b := setup(t)
	a := b.enqueueK(t, queue.InsertOpts{})
	next := b.after(t, a)
	written := b.completeReading(t, a)
	j, err := b.q.ClaimNext(b.ctx, written, tokened(claimAll))
	require.NoError(t, err)
	require.NotNil(t, j)
	res, err := b.q.SettleDependents(b.ctx, time.Minute, 100)
	require.NoError(t, err)
	require.Equal(t, 1, res.Settled)
	require.True(t, b.get(t, a).Dependents)
	got := b.get(t, next)
	require.Equal(t, jobs.StateRunning, got.State)
	require.Equal(t, j.LeaseToken, got.LeaseToken)
}

// A settle resumed late from a completion's reply leaves the parent due
// when it changed since (a dependent linked meanwhile moves updatedAt):
// that dependent's settle is not lost, the next pass does it.
func TestSettleFromAStaleReplyLeavesANewerDueFlag(t *testing.T) {
	b := setup(t)
	for _, claimNext := range []bool{false, true} {
		a := b.enqueueK(t, queue.InsertOpts{})
		next := b.after(t, a)
		written := b.completeReading(t, a)
		if claimNext {
			j, err := b.q.ClaimNext(b.ctx, written, tokened(claimAll))
			require.NoError(t, err)
			require.NotNil(t, j)
		}
		// As a link's mark of a finished parent does (deps.go, step 1).
		_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.D{{Key: "_id", Value: a}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "updatedAt", Value: time.Now().Add(time.Second)}}}})
		require.NoError(t, err)
		if claimNext {
			require.NoError(t, b.q.MarkSettled(b.ctx, written))
		} else {
			_, err = b.q.SettleDependentsOfAll(b.ctx, []string{a}, written)
			require.NoError(t, err)
			require.Equal(t, jobs.StateAvailable, b.get(t, next).State)
			b.end(t, b.claimID(t, next), jobs.StateSucceeded)
		}
		require.False(t, b.get(t, a).Dependents, "claimNext %v: still due", claimNext)
		if claimNext {
			b.end(t, b.get(t, next), jobs.StateSucceeded)
		}
	}
}

// The same with a real link (not a write of updatedAt standing for one):
// a job linked to the finished parent after the leader's pass settled it
// flags the parent due again, and a worker's settle that stalled since
// its completion's reply, or since its own read of the parent, leaves
// that flag for the next pass.
func TestStaleSettleLeavesTheFlagOfALaterLink(t *testing.T) {
	for _, path := range []string{"claim next", "read"} {
		t.Run(path, func(t *testing.T) {
			b := setup(t)
			due := func(id string) bool {
				t.Helper()
				d, err := store.Of(b.q).Collection().FindOne(b.ctx, bson.D{{Key: "_id", Value: id}}).Raw()
				require.NoError(t, err)
				return d.Lookup("dependentsDue").Type != 0
			}
			a := b.enqueueK(t, queue.InsertOpts{})
			b.after(t, a)
			written := b.completeReading(t, a)
			linkLater := func() {
				t.Helper()
				res, err := b.q.SettleDependents(b.ctx, time.Minute, 100) // the leader's pass
				require.NoError(t, err)
				require.Equal(t, 1, res.Settled)
				require.False(t, due(a))
				time.Sleep(2 * time.Millisecond) // updatedAt is in milliseconds
				b.after(t, a)
				require.True(t, due(a), "the link flags the finished parent due")
			}
			if path == "claim next" {
				j, err := b.q.ClaimNext(b.ctx, written, tokened(claimAll))
				require.NoError(t, err)
				require.NotNil(t, j)
				linkLater()
				require.NoError(t, b.q.MarkSettled(b.ctx, written))
			} else {
				ctx := queue.WithDepsStep(b.ctx, func(_ context.Context, step string) error {
					if step == "settle:read" {
						linkLater()
					}
					return nil
				})
				_, err := b.q.SettleDependentsOfAll(ctx, []string{a})
				require.NoError(t, err)
			}
			require.True(t, due(a), "the later link's flag is left for the next pass")
		})
	}
}

// MarkSettled clears the flags of many jobs in one command, each
// conditioned on the job as its completion's reply left it.
func TestMarkSettledManyInOneCommand(t *testing.T) {
	b := setup(t)
	var written []bson.Raw
	var ids []string
	for range 5 {
		a := b.enqueueK(t, queue.InsertOpts{})
		b.after(t, a)
		written = append(written, b.completeReading(t, a))
		ids = append(ids, a)
	}
	_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.D{{Key: "_id", Value: ids[2]}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "updatedAt", Value: time.Now().Add(time.Second)}}}})
	require.NoError(t, err)
	var commands atomic.Int64
	q := b.counted(t, &commands)
	require.NoError(t, q.MarkSettled(b.ctx, written...))
	require.Equal(t, int64(1), commands.Load())
	for i, id := range ids {
		require.Equal(t, i != 2, b.get(t, id).Dependents, "job %d settled", i)
	}
}

// counted returns a client of the bundle's database whose commands are
// counted in n.
func (b bundle) counted(t *testing.T, n *atomic.Int64) *queue.Client {
	t.Helper()
	return b.monitoredBy(t, &event.CommandMonitor{
		Started: func(context.Context, *event.CommandStartedEvent) { n.Add(1) },
	})
}

// Parents settled together release each dependent that waits for none but
// them, pull themselves from those that wait for others too, and leave the
// others' parents in their lists.
func TestSettleTogetherReleasesWhatTheyCover(t *testing.T) {
	b := setup(t)
	p1, p2, p3 := b.enqueueK(t, queue.InsertOpts{}), b.enqueueK(t, queue.InsertOpts{}), b.enqueueK(t, queue.InsertOpts{})
	k12, k13, k2 := b.after(t, p1, p2), b.after(t, p1, p3), b.after(t, p2)
	b.run(t, p1, jobs.StateSucceeded)
	b.run(t, p2, jobs.StateSucceeded)
	var commands atomic.Int64
	q := b.counted(t, &commands)
	rep, err := q.SettleDependentsOfAll(b.ctx, []string{p1, p2})
	require.NoError(t, err)
	require.Equal(t, queue.SettleReport{Parents: 2, Dependents: 3}, rep)
	require.LessOrEqual(t, commands.Load(), int64(2), "a read of the parents, then one command")
	b.requireState(t, jobs.StateAvailable, k12, k2)
	require.Empty(t, b.get(t, k12).WaitingOn)
	got := b.get(t, k13)
	require.Equal(t, jobs.StateBlocked, got.State)
	require.Equal(t, []string{p3}, got.WaitingOn)
	require.True(t, b.get(t, p1).Dependents)
	require.True(t, b.get(t, p2).Dependents)
}

// A limit, a rate or a pause on other kinds and queues of the worker does
// not keep ClaimNext from a chain's next task of a kind and queue free of
// them.
func TestClaimNextBesideFlowControlOfOthers(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("limited"), 1, ""))
	require.NoError(t, b.q.SetRate(b.ctx, queue.QueueLimit("rated"), queue.Rate{N: 5, Per: time.Second}, ""))
	_, err := b.q.Pause(b.ctx, "paused", "")
	require.NoError(t, err)
	a := b.enqueueK(t, queue.InsertOpts{})
	next := b.after(t, a)
	written := b.completeReading(t, a)
	p := claimAll
	p.Kinds = []string{"k", "limited"}
	p.Queues = []string{"default", "rated", "paused"}
	j, err := b.q.ClaimNext(b.ctx, written, tokened(p))
	require.NoError(t, err)
	require.NotNil(t, j)
	require.Equal(t, next, j.ID)

	// Tasks of the limited kind, the rated queue or the paused queue are
	// left to the settle.
	for _, opts := range []struct{ kind, queue string }{{"limited", "default"}, {"k", "rated"}, {"k", "paused"}} {
		a, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
		require.NoError(t, err)
		res, err := b.q.Enqueue(b.ctx, opts.kind, nil, queue.InsertOpts{Queue: opts.queue, After: []string{a.ID}})
		require.NoError(t, err)
		written := b.completeReading(t, a.ID)
		j, err := b.q.ClaimNext(b.ctx, written, tokened(p))
		require.NoError(t, err)
		require.Nil(t, j, "a task of kind %s in queue %s", opts.kind, opts.queue)
		require.Equal(t, jobs.StateBlocked, b.get(t, res.ID).State)
	}
}

// A worker that stalls between its completion and ClaimNext, while the
// leader's pass settles the job (releasing the next task) and another
// worker claims that task, takes nothing when it resumes, and its mark
// changes nothing.
func TestClaimNextAfterTheLeadersPassTakesNothing(t *testing.T) {
	b := setup(t)
	a := b.enqueueK(t, queue.InsertOpts{})
	next := b.after(t, a)
	written := b.completeReading(t, a)
	res, err := b.q.SettleDependents(b.ctx, time.Minute, 100)
	require.NoError(t, err)
	require.Equal(t, 1, res.Settled)
	other := b.claimID(t, next)

	j, err := b.q.ClaimNext(b.ctx, written, tokened(claimAll))
	require.NoError(t, err)
	require.Nil(t, j)
	require.NoError(t, b.q.MarkSettled(b.ctx, written))
	got := b.get(t, next)
	require.Equal(t, jobs.StateRunning, got.State)
	require.Equal(t, other.LeaseToken, got.LeaseToken, "the other worker's claim stands")
	require.Equal(t, 1, got.Attempt)
	require.True(t, b.get(t, a).Dependents)
}

// tokened is p with a lease token of its own, as a worker's claims have
// (ClaimNext needs one, to give back a claim whose reply was lost).
func tokened(p store.ClaimParams) store.ClaimParams {
	if p.Token == "" {
		p.Token = uuid.NewString()
	}
	return p
}

// ClaimNext needs a token (a claim whose reply was lost is given back by
// it), and leaves a next task whose attempt another application wrote as
// a string to the settle and the claim that buries it: no error, nothing
// claimed.
func TestClaimNextNeedsATokenAndSkipsAForeignAttempt(t *testing.T) {
	b := setup(t)
	a := b.enqueueK(t, queue.InsertOpts{})
	next := b.after(t, a)
	written := b.completeReading(t, a)
	_, err := b.q.ClaimNext(b.ctx, written, claimAll)
	require.ErrorContains(t, err, "empty token")
	require.Equal(t, jobs.StateBlocked, b.get(t, next).State)

	_, err = store.Of(b.q).Collection().UpdateOne(b.ctx, bson.D{{Key: "_id", Value: next}}, bson.D{{Key: "$set", Value: bson.D{{Key: "attempt", Value: "x"}}}})
	require.NoError(t, err)
	j, err := b.q.ClaimNext(b.ctx, written, tokened(claimAll))
	require.NoError(t, err)
	require.Nil(t, j)
	d, err := store.Of(b.q).Collection().FindOne(b.ctx, bson.D{{Key: "_id", Value: next}}).Raw()
	require.NoError(t, err)
	require.Equal(t, string(jobs.StateBlocked), d.Lookup("state").StringValue(), "nothing half-applied")
}

// Parents settled together release each dependent that waits for none but
// them in one write (a pull and then a release would be two), on a server
// that can select them (Server.ElemMatchNot: MongoDB, devdb); on one that
// cannot, with a pull and a release: the same outcome either way. A
// dependent whose list another application wrote as other than an array
// is left as it is.
func TestSettleTogetherReleasesInOneWrite(t *testing.T) {
	for _, held := range []bool{true, false} {
		t.Run(fmt.Sprintf("held=%v", held), func(t *testing.T) {
			b := setup(t)
			var modified atomic.Int64
			q := b.monitoredBy(t, countModified(&modified))
			if !held {
				store.Of(q).Server().ElemMatchNot.Set(false)
			}
			// k12 and k1 released, k123 pulled, the flags of p1 and
			// p2 cleared; without the feature k12 and k1 are pulled,
			// then released.
			want := map[bool]int64{true: 5, false: 7}[held]
			settleTogether(t, b, q, &modified, want)
		})
	}
}

// A server that refuses the release (FerretDB v1: NotImplemented, nothing
// written; devdb's elemmatchnot fault) is found lacking at the first
// settle of parents together, which is sent again without it.
func TestSettleTogetherDetectsARefusedRelease(t *testing.T) {
	var modified atomic.Int64
	db := testdb.FaultyDBWith(t, "--faults elemmatchnot=1 --seed 1", options.Client().SetMonitor(countModified(&modified)))
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	b := bundle{ctx: context.Background(), db: db, q: q}
	require.NoError(t, q.EnsureIndexes(b.ctx))
	require.Equal(t, "unknown", store.Of(q).Server().ElemMatchNot.State())
	settleTogether(t, b, q, &modified, 7)
	require.Equal(t, "lacking", store.Of(q).Server().ElemMatchNot.State())
}

// countModified counts in n the documents the update commands it sees
// modified.
func countModified(n *atomic.Int64) *event.CommandMonitor {
	return &event.CommandMonitor{
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			if m, ok := e.Reply.Lookup("nModified").AsInt64OK(); ok && e.CommandName == "update" {
				n.Add(m)
			}
		},
	}
}

// settleTogether settles with q two succeeded parents of four dependents
// (one waiting for both, one for the first, one for a third parent too,
// one whose list another app wrote as a string) and checks the outcome
// and that the settle wrote want documents (modified counts q's).
func settleTogether(t *testing.T, b bundle, q *queue.Client, modified *atomic.Int64, want int64) {
	t.Helper()
	p1, p2, p3 := b.enqueueK(t, queue.InsertOpts{}), b.enqueueK(t, queue.InsertOpts{}), b.enqueueK(t, queue.InsertOpts{})
	k12, k1, k123, odd := b.after(t, p1, p2), b.after(t, p1), b.after(t, p1, p2, p3), b.after(t, p1, p2)
	_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.D{{Key: "_id", Value: odd}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "waitingOn", Value: p1}}}})
	require.NoError(t, err)
	b.run(t, p1, jobs.StateSucceeded)
	b.run(t, p2, jobs.StateSucceeded)
	modified.Store(0)
	rep, err := q.SettleDependentsOfAll(b.ctx, []string{p1, p2})
	require.NoError(t, err)
	require.Equal(t, queue.SettleReport{Parents: 2, Dependents: 4}, rep)
	b.requireState(t, jobs.StateAvailable, k12, k1)
	require.Empty(t, b.get(t, k12).WaitingOn)
	got := b.get(t, k123)
	require.Equal(t, jobs.StateBlocked, got.State)
	require.Equal(t, []string{p3}, got.WaitingOn)
	oddRaw, err := store.Of(b.q).Collection().FindOne(b.ctx, bson.D{{Key: "_id", Value: odd}}).Raw()
	require.NoError(t, err)
	require.Equal(t, string(jobs.StateBlocked), oddRaw.Lookup("state").StringValue())
	require.Equal(t, p1, oddRaw.Lookup("waitingOn").StringValue())
	require.Equal(t, want, modified.Load(), "documents written")
}

// A settle of parents together that stalls between its read and its
// writes, while an operator cancels one dependent and the leader's pass
// releases the other, which a worker then claims, changes neither when it
// resumes: its release is conditioned on the dependent still blocked.
func TestSettleTogetherStalledReleasesNothingTwice(t *testing.T) {
	b := setup(t)
	p1, p2 := b.enqueueK(t, queue.InsertOpts{}), b.enqueueK(t, queue.InsertOpts{})
	claimed, cancelled := b.after(t, p1, p2), b.after(t, p1, p2)
	b.run(t, p1, jobs.StateSucceeded)
	b.run(t, p2, jobs.StateSucceeded)
	var running *jobs.Job
	ctx := queue.WithDepsStep(b.ctx, func(_ context.Context, step string) error {
		if step != "settle:read" || running != nil {
			return nil
		}
		_, err := b.q.Cancel(b.ctx, cancelled)
		require.NoError(t, err)
		res, err := b.q.SettleDependents(b.ctx, time.Minute, 100) // the leader's pass
		require.NoError(t, err)
		require.Equal(t, 2, res.Settled)
		running = b.claimID(t, claimed)
		return nil
	})
	_, err := b.q.SettleDependentsOfAll(ctx, []string{p1, p2})
	require.NoError(t, err)
	require.NotNil(t, running, "the settle read its parents while they were due")
	got := b.get(t, claimed)
	require.Equal(t, jobs.StateRunning, got.State)
	require.Equal(t, running.LeaseToken, got.LeaseToken, "the worker's claim stands")
	require.Equal(t, jobs.StateCancelled, b.get(t, cancelled).State)
}
