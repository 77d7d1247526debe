package queue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// filters records the filters of the update and find commands a client
// sent to the collection coll: each update statement's q, each find's
// filter.
type filters struct {
	coll string
	mu   sync.Mutex
	all  []bson.Raw
}

func (f *filters) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		cmd := bson.Raw(e.Command)
		if name, _ := cmd.Lookup(e.CommandName).StringValueOK(); name != f.coll {
			return
		}
		var got []bson.Raw
		switch e.CommandName {
		case "update":
			vals, _ := cmd.Lookup("updates").Array().Values()
			for _, v := range vals {
				got = append(got, v.Document().Lookup("q").Document())
			}
		case "find":
			got = append(got, cmd.Lookup("filter").Document())
		}
		f.mu.Lock()
		f.all = append(f.all, got...)
		f.mu.Unlock()
	}}
}

func (f *filters) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.all = nil
}

// notByID returns the recorded filters that do not select by _id.
func (f *filters) notByID() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, q := range f.all {
		if _, err := q.LookupErr("_id"); err != nil {
			out = append(out, q.String())
		}
	}
	return out
}

// monitored returns a client of the bundle's database whose filters are
// recorded in f.
func (b bundle) monitored(t *testing.T, f *filters) *queue.Client {
	t.Helper()
	return b.monitoredBy(t, f.monitor())
}

// monitoredBy returns a client of the bundle's database whose commands
// mon sees.
func (b bundle) monitoredBy(t *testing.T, mon *event.CommandMonitor) *queue.Client {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(mon))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	q, err := queue.New(client.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	return q
}

// A parent's settle reads and writes its dependents by _id, from the list
// the link kept on it: what a parent's end costs does not grow with the
// jobs that wait for others (a settle that searched {after: id} reads, on
// devdb, every job with parents). Also a workflow's publish.
func TestDepSettleWritesToItsDependentsByID(t *testing.T) {
	b := setup(t)
	f := filters{coll: store.Of(b.q).Collection().Name()}
	q := b.monitored(t, &f)
	a := b.enqueueK(t, queue.InsertOpts{})
	other := b.enqueueK(t, queue.InsertOpts{})
	c1, c2 := b.after(t, a), b.after(t, a)
	c3 := b.after(t, other, a)
	b.run(t, a, jobs.StateSucceeded)
	f.reset()
	ok, err := q.SettleDependentsOf(b.ctx, a)
	require.NoError(t, err)
	require.True(t, ok)
	require.Empty(t, f.notByID(), "the settle's filters that do not select by _id")
	b.requireState(t, jobs.StateAvailable, c1, c2)
	b.requireState(t, jobs.StateBlocked, c3)
	require.Equal(t, []string{other}, b.get(t, c3).WaitingOn)

	wf := queue.NewWorkflow("wf")
	x := wf.Add("x", "k", nil, queue.TaskOpts{})
	wf.Add("y", "k", nil, queue.TaskOpts{After: []string{x}})
	f.reset()
	_, err = q.InsertWorkflow(b.ctx, wf)
	require.NoError(t, err)
	require.Empty(t, f.notByID(), "the workflow's insert, link, publish and settle filters that do not select by _id")
	b.requireState(t, jobs.StateAvailable, queue.TaskID("wf", "x"))
}

// A job waits for more parents than the bound of 1,000 there was, and runs
// once the last of them has succeeded.
func TestDepFanInOverTheOldBound(t *testing.T) {
	b := setup(t)
	const n = 1_200
	ins := make([]queue.Insert, n)
	parents := make([]string, n)
	for i := range ins {
		parents[i] = fmt.Sprintf("p%04d", i)
		ins[i] = queue.Insert{Kind: "k", Opts: queue.InsertOpts{ID: parents[i]}}
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	sink := b.after(t, parents...)
	require.Len(t, b.get(t, sink).WaitingOn, n)

	// Each parent ends by the finishing write every end makes.
	ids := make(bson.A, n)
	for i, p := range parents {
		ids[i] = p
	}
	coll := store.Of(b.q).Collection()
	r, err := coll.UpdateMany(b.ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "state", Value: jobs.StateAvailable}},
		store.Finish(jobs.StateSucceeded, time.Now()))
	require.NoError(t, err)
	require.EqualValues(t, n, r.ModifiedCount)
	for _, p := range parents[:n-1] {
		b.settle(t, p)
	}
	b.requireState(t, jobs.StateBlocked, sink)
	require.Equal(t, parents[n-1:], b.get(t, sink).WaitingOn)
	b.settle(t, parents[n-1])
	b.requireState(t, jobs.StateAvailable, sink)
}

// dependentsList reads a job's dependentIds and dependentsMany.
func (b bundle) dependentsList(t *testing.T, id string) (ids []string, listed, many bool) {
	t.Helper()
	raw, err := store.Of(b.q).Collection().FindOne(b.ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	require.NoError(t, err)
	v, err := raw.LookupErr("dependentIds")
	if err == nil {
		listed = true
		vals, _ := v.Array().Values()
		for _, e := range vals {
			ids = append(ids, e.StringValue())
		}
	}
	many, _ = raw.Lookup("dependentsMany").BooleanOK()
	return ids, listed, many
}

// A parent that a link marked before lists were kept (dependents: true, no
// dependentIds) gets no list, which would miss the dependents marked
// before: its settle finds them all by after.
func TestDepParentMarkedWithoutAListKeepsEveryDependent(t *testing.T) {
	b := setup(t)
	a := b.enqueueK(t, queue.InsertOpts{})
	coll := store.Of(b.q).Collection()
	_, err := coll.UpdateOne(b.ctx, bson.D{{Key: "_id", Value: a}}, bson.D{{Key: "$set", Value: bson.D{{Key: "dependents", Value: true}}}})
	require.NoError(t, err)
	old := "linked-before"
	_, err = coll.InsertOne(b.ctx, bson.D{
		{Key: "_id", Value: old}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "default"}, {Key: "state", Value: jobs.StateBlocked},
		{Key: "after", Value: bson.A{a}}, {Key: "waitingOn", Value: bson.A{a}}, {Key: "runAt", Value: time.Now()},
		{Key: "attempt", Value: 0}, {Key: "maxAttempts", Value: 3}, {Key: "priority", Value: 0},
		{Key: "createdAt", Value: time.Now()}, {Key: "updatedAt", Value: time.Now()},
	})
	require.NoError(t, err)
	c := b.after(t, a)
	_, listed, _ := b.dependentsList(t, a)
	require.False(t, listed, "a list begun on a parent marked without one")

	b.run(t, a, jobs.StateSucceeded)
	b.settle(t, a)
	b.requireState(t, jobs.StateAvailable, old, c)
}

// A parent lists its dependents up to a bound, then is flagged
// dependentsMany, and its settle finds them all by after.
func TestDepFullListFallsBackToAfter(t *testing.T) {
	b := setup(t)
	ctx := queue.WithMaxListed(b.ctx, 2)
	a := b.enqueueK(t, queue.InsertOpts{})
	var kids []string
	for range 4 {
		res, err := b.q.Enqueue(ctx, "k", nil, queue.InsertOpts{After: []string{a}})
		require.NoError(t, err)
		kids = append(kids, res.ID)
	}
	ids, _, many := b.dependentsList(t, a)
	require.Equal(t, kids[:2], ids)
	require.True(t, many)

	b.run(t, a, jobs.StateSucceeded)
	b.settle(t, a)
	b.requireState(t, jobs.StateAvailable, kids...)
}

// A fan-out parent lists every dependent, once however often it is
// linked, and its settle releases all of them, over several chunks of
// ids.
func TestDepFanOutListsEveryDependentOnce(t *testing.T) {
	b := setup(t)
	a := b.enqueueK(t, queue.InsertOpts{})
	const n = 1_100
	ins := make([]queue.Insert, n)
	for i := range ins {
		ins[i] = queue.Insert{Kind: "k", Opts: queue.InsertOpts{ID: fmt.Sprintf("c%04d", i), After: []string{a}}}
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	// The leader's pass links again what it finds linking: here, as if
	// every link had stopped before its last step.
	_, err = store.Of(b.q).Collection().UpdateMany(b.ctx, bson.D{{Key: "after", Value: a}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "linking", Value: true}}}})
	require.NoError(t, err)
	res, err := b.q.SettleDependents(b.ctx, 0, n)
	require.NoError(t, err)
	require.Equal(t, n, res.Linked)
	ids, _, many := b.dependentsList(t, a)
	require.False(t, many)
	require.Len(t, ids, n)
	slices.Sort(ids)
	require.Equal(t, n, len(slices.Compact(ids)))

	b.run(t, a, jobs.StateSucceeded)
	b.settle(t, a)
	n2, err := store.Of(b.q).Collection().CountDocuments(b.ctx, bson.D{{Key: "after", Value: a}, {Key: "state", Value: jobs.StateAvailable}})
	require.NoError(t, err)
	require.EqualValues(t, n, n2)
}

// fanIn enqueues n parents and a sink after all of them, and ends the
// parents in s by the finishing write every end makes.
func (b bundle) fanIn(t *testing.T, n int, s jobs.State) (parents []string, sink string) {
	t.Helper()
	ids := make(bson.A, n)
	for i := range n {
		parents = append(parents, b.enqueueK(t, queue.InsertOpts{}))
		ids[i] = parents[i]
	}
	sink = b.after(t, parents...)
	_, err := store.Of(b.q).Collection().UpdateMany(b.ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, store.Finish(s, time.Now()))
	require.NoError(t, err)
	return parents, sink
}

// fanOut returns a succeeded parent and the first of its n dependents,
// which wait for it only.
func (b bundle) fanOut(t *testing.T, n int) (parents []string, kid string) {
	t.Helper()
	root := b.enqueueK(t, queue.InsertOpts{})
	kid = b.after(t, root)
	for range n - 1 {
		b.after(t, root)
	}
	_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.D{{Key: "_id", Value: root}}, store.Finish(jobs.StateSucceeded, time.Now()))
	require.NoError(t, err)
	return []string{root}, kid
}

// Parents settled together cost the commands of one settle, whatever
// their number; one that failed is settled on its own, cancelling its
// dependent.
func TestDepSettleManyAtOnce(t *testing.T) {
	b := setup(t)
	parents, sink := b.fanIn(t, 30, jobs.StateSucceeded)
	a := b.enqueueK(t, queue.InsertOpts{})
	chained := b.after(t, a)
	bad := b.enqueueK(t, queue.InsertOpts{})
	cancelled := b.after(t, bad)
	b.run(t, a, jobs.StateSucceeded)
	b.run(t, bad, jobs.StateDead)

	var commands atomic.Int64
	q := b.counted(t, &commands)

	rep, err := q.SettleDependentsOfAll(b.ctx, append(slices.Clone(parents), a))
	require.NoError(t, err)
	require.LessOrEqual(t, commands.Load(), int64(2), "a read, then a pull, a release and a rename in one command")
	require.Equal(t, queue.SettleReport{Parents: 31, Dependents: 2}, rep)

	b.requireState(t, jobs.StateAvailable, sink, chained)
	for _, p := range append(parents, a) {
		require.True(t, b.get(t, p).Dependents, "job %s flagged settled", p)
	}

	_, err = q.SettleDependentsOfAll(b.ctx, []string{bad, a})
	require.NoError(t, err)
	b.requireState(t, jobs.StateCancelled, cancelled)
	b.requireState(t, jobs.StateAvailable, sink, chained)

	// Dependents that wait for one parent settled alone, and for it only,
	// are released by one write.
	root := b.enqueueK(t, queue.InsertOpts{})
	kids := []string{b.after(t, root), b.after(t, root), b.after(t, root)}
	_, err = store.Of(b.q).Collection().UpdateOne(b.ctx, bson.D{{Key: "_id", Value: root}}, store.Finish(jobs.StateSucceeded, time.Now()))
	require.NoError(t, err)
	commands.Store(0)
	rep, err = q.SettleDependentsOfAll(b.ctx, []string{root})
	require.NoError(t, err)
	require.LessOrEqual(t, commands.Load(), int64(2), "a read, then the release and the rename in one command")
	require.Equal(t, queue.SettleReport{Parents: 1, Dependents: 3}, rep)

	b.requireState(t, jobs.StateAvailable, kids...)
	require.Empty(t, b.get(t, kids[0]).WaitingOn)
}

// A batch settle that stalls after any of its writes, while the leader's
// pass settles the same parents, then resumes with what it read, leaves
// each dependent released once and every flag settled; one that dies there
// is finished by the pass.
func TestDepSettleManyStalledOrDeadAtEachStep(t *testing.T) {
	// shape: "fan-out", a parent settled alone whose dependents are too
	// many to release in the settle's command; "chain", a parent settled
	// alone whose one dependent is released by the settle's command;
	// "fan-in", parents that share their dependent.
	for _, c := range []struct{ step, shape string }{
		{"settle:last", "fan-out"}, {"settle:done", "chain"}, {"settle:done", "fan-in"},
	} {
		step := c.step
		for _, die := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/%s/die=%v", step, c.shape, die), func(t *testing.T) {
				b := setup(t)
				var parents []string
				var sink string
				switch c.shape {
				case "fan-out":
					parents, sink = b.fanOut(t, queue.LastInBulk+1)
				case "chain":
					parents, sink = b.fanOut(t, 1)
				default:
					parents, sink = b.fanIn(t, 3, jobs.StateSucceeded)
				}
				resume := make(chan struct{})
				stalled := make(chan struct{})
				ctx := queue.WithDepsStep(b.ctx, func(_ context.Context, s string) error {
					if s != step {
						return nil
					}
					if die {
						return errors.New("died")
					}
					close(stalled)
					<-resume
					return nil
				})
				done := make(chan error, 1)
				go func() { done <- errOf(b.q.SettleDependentsOfAll(ctx, parents)) }()
				if !die {
					<-stalled
				}
				_, err := b.q.SettleDependents(b.ctx, time.Minute, 100)
				require.NoError(t, err)
				// The sink runs before the stalled settle resumes: a
				// release applied again would make it available twice.
				b.claimID(t, sink)
				close(resume)
				err = <-done
				if die {
					require.Error(t, err)
				} else {
					require.NoError(t, err)
				}
				b.requireState(t, jobs.StateRunning, sink)
				require.Empty(t, b.get(t, sink).WaitingOn)
				n, err := store.Of(b.q).Collection().CountDocuments(b.ctx, bson.D{{Key: "dependentsDue", Value: bson.D{{Key: "$exists", Value: true}}}})
				require.NoError(t, err)
				require.Zero(t, n, "flags left due")
			})
		}
	}
}

// updateStatements counts the statements of the update commands a client
// sent.
type updateStatements struct{ n atomic.Int64 }

func (u *updateStatements) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "update" {
			vals, _ := bson.Raw(e.Command).Lookup("updates").Array().Values()
			u.n.Add(int64(len(vals)))
		}
	}}
}

// A workflow's tasks and gate are inserted with their lists of
// dependents: its links write no statement per parent, and each task's
// list holds the tasks after it. Then it runs in order.
func TestWorkflowTasksInsertedWithTheirLists(t *testing.T) {
	b := setup(t)
	var u updateStatements
	client, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(u.monitor()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	q, err := queue.New(client.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)

	const layers, width = 5, 20
	wf := queue.NewWorkflow("layered")
	for l := range layers {
		for i := range width {
			var after []string
			if l > 0 {
				after = []string{fmt.Sprintf("%d-%d", l-1, i), fmt.Sprintf("%d-%d", l-1, (i+1)%width)}
			}
			wf.Add(fmt.Sprintf("%d-%d", l, i), "k", nil, queue.TaskOpts{After: after})
		}
	}
	_, err = q.InsertWorkflow(b.ctx, wf)
	require.NoError(t, err)
	// Gate's touch, mark, unset linking, publish, settle's pull, release
	// and rename: none per parent.
	require.LessOrEqual(t, u.n.Load(), int64(12), "update statements of a workflow of %d tasks", layers*width)
	ids, _, many := b.dependentsList(t, queue.TaskID("layered", "1-3"))
	require.False(t, many)
	require.ElementsMatch(t, []string{queue.TaskID("layered", "2-3"), queue.TaskID("layered", "2-2")}, ids)
	gate, _, _ := b.dependentsList(t, "layered")
	require.Len(t, gate, layers*width)

	ran := map[string]bool{}
	for range layers * width {
		j := b.claim(t, claimAll)
		require.NotNil(t, j)
		for _, p := range j.After[1:] {
			require.True(t, ran[p], "task %s ran before its parent %s", j.ID, p)
		}
		ran[j.ID] = true
		b.end(t, j, jobs.StateSucceeded)
		if j.Dependents {
			b.settle(t, j.ID)
		}
	}
	b.requireNothingToClaim(t)
}

// A parent completed by CompleteReading is settled from the document its
// completion returned: one command, no read of the parent, for a chain's
// next task and a fan-out's children alike; a parent whose document came
// back without its outcome due (settled since by the leader) is left
// alone.
func TestDepSettleFromTheCompletionsDocument(t *testing.T) {
	b := setup(t)
	var commands atomic.Int64
	q := b.counted(t, &commands)

	root := b.enqueueK(t, queue.InsertOpts{})
	kids := []string{b.after(t, root), b.after(t, root)}
	next := b.after(t, kids[0])
	doc, err := store.Of(b.q).CompleteReading(b.ctx, store.LeaseOf(b.claimID(t, root)))
	require.NoError(t, err)
	require.Equal(t, root, doc.Lookup("_id").StringValue())
	commands.Store(0)
	rep, err := q.SettleDependentsOfAll(b.ctx, []string{root}, doc)
	require.NoError(t, err)
	require.Equal(t, int64(1), commands.Load(), "the release and the rename in one command, no read")
	require.Equal(t, queue.SettleReport{Parents: 1, Dependents: 2}, rep)
	b.requireState(t, jobs.StateAvailable, kids...)
	b.requireState(t, jobs.StateBlocked, next)
	require.True(t, b.get(t, root).Dependents, "root's outcome no longer due")

	// Settled again from the same document (a stalled worker's): nothing
	// changes.
	_, err = q.SettleDependentsOfAll(b.ctx, []string{root}, doc)
	require.NoError(t, err)
	b.requireState(t, jobs.StateAvailable, kids...)

	// A document without the outcome due: nothing to settle, no command.
	j := b.claimID(t, kids[0])
	_, err = store.Of(b.q).CompleteReading(b.ctx, store.LeaseOf(j))
	require.NoError(t, err)
	ok, err := b.q.SettleDependentsOf(b.ctx, kids[0])
	require.NoError(t, err)
	require.True(t, ok)
	b.requireState(t, jobs.StateAvailable, next)
	commands.Store(0)
	stale, err := bson.Marshal(bson.D{{Key: "_id", Value: kids[0]}, {Key: "state", Value: jobs.StateSucceeded}})
	require.NoError(t, err)
	_, err = q.SettleDependentsOfAll(b.ctx, []string{kids[0]}, stale)
	require.NoError(t, err)
	require.Zero(t, commands.Load())
}
