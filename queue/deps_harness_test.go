package queue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/internal/testdb/asworker"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// The workflow harness: the counterpart, for dependencies, of
// handlers/harness_test.go. A worker A finishes a parent and then stalls,
// or dies, at one of its steps: right after its finishing write, or after
// any write of the settle that tells the parent's dependents. While it is
// stalled everything else happens: the leader's passes (SettleDependents),
// other workers claiming and finishing every job they can (and settling
// their own), and in half the runs retention deleting whatever it may
// (the other half keep every job, so that a late write to one is seen). Then A resumes, with
// what it read before the stall, or stays dead, and the world drains. The
// same for an enqueuer that stalls or dies between a dependent's insert
// and the steps of its link, while the parent finishes. Checked from the
// database:
//
//   - no job ran before every parent had succeeded (or, for a job that
//     runs anyway, finished): each run reads its parents as it starts;
//   - no job ran twice;
//   - every job ran whose parents all succeeded, and every other ended
//     cancelled, with why; none is left blocked, linking or due.

// flowShape is a workflow: jobs in insert order, each with its parents.
type flowShape struct {
	name   string
	jobs   []flowJob
	target string // the parent that A (or the late dependent) is about
}

type flowJob struct {
	id     string
	after  []string
	dies   bool // its handler fails permanently
	anyway bool
}

var flowShapes = []flowShape{
	{name: "chain", target: "a", jobs: []flowJob{{id: "a"}, {id: "b", after: []string{"a"}}, {id: "c", after: []string{"b"}}}},
	{name: "fan-in", target: "p1", jobs: []flowJob{{id: "p1"}, {id: "p2"}, {id: "p3"}, {id: "c", after: []string{"p1", "p2", "p3"}}}},
	{name: "diamond", target: "a", jobs: []flowJob{
		{id: "a"}, {id: "b1", after: []string{"a"}}, {id: "b2", after: []string{"a"}}, {id: "c", after: []string{"b1", "b2"}},
	}},
	{name: "failing-parent", target: "a", jobs: []flowJob{
		{id: "a", dies: true}, {id: "b", after: []string{"a"}}, {id: "c", after: []string{"b"}},
		{id: "d", after: []string{"a"}, anyway: true}, {id: "e", after: []string{"d", "c"}, anyway: true},
	}},
}

// flowWorld is one run of the harness: its own database.
type flowWorld struct {
	b     bundle
	shape flowShape
	// prefix is what the jobs' ids have before their names in the shape:
	// a workflow's id and "/" when the shape is inserted as a workflow.
	prefix string

	// logs are the warnings of the world's client: a step it leaves to
	// the leader's pass after a failure reply says so there.
	logs *observer.ObservedLogs

	mu    sync.Mutex
	runs  map[string]int
	early []string
	ended map[string]jobs.State // as the harness's workers ended them
}

func newFlowWorld(t *testing.T, shape flowShape) *flowWorld {
	b := setup(t)
	core, logs := observer.New(zapcore.WarnLevel)
	q, err := queue.New(b.db, queue.Config{RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond, Logger: zap.New(core)})
	require.NoError(t, err)
	b.q = q
	return &flowWorld{b: b, shape: shape, logs: logs, runs: map[string]int{}, ended: map[string]jobs.State{}}
}

// must runs f, a call of the world's workers, leader, retention or app,
// sending it again on one of MongoDB's failure replies as they do
// (testdb.Retry), and fails the test on any other error.
func (w *flowWorld) must(t *testing.T, what string, f func() error) {
	t.Helper()
	require.NoError(t, testdb.Retry(t.Logf, what, f), what)
}

// claim claims as a worker does (asworker.Claim): a claim whose reply
// failed gives its jobs back.
func (w *flowWorld) claim(t *testing.T) *jobs.Job {
	t.Helper()
	j, err := asworker.Claim(w.b.ctx, t.Logf, store.Of(w.b.q), claimAll, nil)
	require.NoError(t, err)
	return j
}

// linkLeftToPass reports whether the world's client logged that an
// enqueue left its link to the leader's pass: a step of it failed.
func (w *flowWorld) linkLeftToPass() bool {
	return w.logs.FilterMessageSnippet("could not be linked to their parents").Len() > 0
}

// settleLeftToPass reports whether the world's client logged that a
// settle it runs on its own (after a publish) failed and was left to the
// leader's pass.
func (w *flowWorld) settleLeftToPass() bool {
	return w.logs.FilterMessageSnippet("telling a finished job's dependents failed").Len() > 0
}

// diedOnReply reports whether err is how a worker's settle or a builder stopped
// by a failure reply ends: as one that died at that write.
func diedOnReply(err error) bool {
	return testdb.Transient(err)
}

func (w *flowWorld) job(id string) flowJob {
	for _, j := range w.shape.jobs {
		if j.id == id {
			return j
		}
	}
	panic("no job " + id)
}

// insert enqueues the shape's jobs, those in skip aside, the target first
// in claim order.
func (w *flowWorld) insert(t *testing.T, skip string) {
	t.Helper()
	var ins []queue.Insert
	for _, j := range w.shape.jobs {
		if j.id == skip {
			continue
		}
		prio := 0
		if j.id == w.shape.target {
			prio = 10
		}
		ins = append(ins, queue.Insert{Kind: "k", Opts: queue.InsertOpts{ID: j.id, After: j.after, AfterRunAnyway: j.anyway, Priority: prio}})
	}
	w.must(t, "enqueue the workflow", func() error { _, err := w.b.q.EnqueueMany(w.b.ctx, ins); return err })
}

// work runs the claimed job j as a handler would: it reads its parents
// from the database as it starts, then its finishing write ends it.
func (w *flowWorld) work(t *testing.T, j *jobs.Job) {
	t.Helper()
	name := strings.TrimPrefix(j.ID, w.prefix)
	fj := w.job(name)
	for _, p := range fj.after {
		st := jobs.State("deleted")
		var pj *jobs.Job
		err := testdb.Retry(t.Logf, "read a parent", func() (err error) { pj, err = w.b.q.Get(w.b.ctx, w.prefix+p); return err })
		if err == nil {
			st = pj.State
		} else {
			require.ErrorIs(t, err, queue.ErrNotFound)
			// Deleted by retention, which deletes finished jobs only, and
			// only once they are settled.
			w.mu.Lock()
			switch {
			case w.ended[p] == jobs.StateSucceeded:
				st = jobs.StateSucceeded
			case fj.anyway:
				st = jobs.StateCancelled // or dead: finished, however
			}
			w.mu.Unlock()
		}
		if !(st == jobs.StateSucceeded || fj.anyway && st.Finished()) {
			w.mu.Lock()
			w.early = append(w.early, fmt.Sprintf("%s ran while parent %s was %s", j.ID, p, st))
			w.mu.Unlock()
		}
	}
	w.mu.Lock()
	w.runs[name]++
	w.mu.Unlock()
	end := jobs.StateSucceeded
	if fj.dies {
		end = jobs.StateDead
		w.must(t, "fail", func() error {
			_, err := store.Of(w.b.q).Fail(w.b.ctx, store.LeaseOf(j), j, jobs.Permanent(errors.New("this step fails")))
			return err
		})
	} else {
		w.must(t, "complete", func() error { return store.Of(w.b.q).Complete(w.b.ctx, store.LeaseOf(j)) })
	}
	w.mu.Lock()
	w.ended[name] = end
	w.mu.Unlock()
}

// drain is everyone but A until nothing moves: the leader's pass (with
// no link grace: a link in progress is redone beside it), workers that
// finish and settle every runnable job, and (with retention) retention
// deleting every finished job it may.
func (w *flowWorld) drain(t *testing.T, retention bool) {
	t.Helper()
	for range 200 {
		var got queue.DepsResult
		w.must(t, "the leader's pass", func() (err error) { got, err = w.b.q.SettleDependents(w.b.ctx, 0, 100); return err })
		j := w.claim(t)
		if j != nil {
			w.work(t, j)
			w.must(t, "settle", func() error { _, err := w.b.q.SettleDependentsOf(w.b.ctx, j.ID); return err })
		}
		for _, s := range []jobs.State{jobs.StateSucceeded, jobs.StateDead, jobs.StateCancelled} {
			if retention {
				w.cleanAll(t, s)
			}
		}
		if j == nil && got == (queue.DepsResult{}) {
			return
		}
	}
	t.Fatal("the workflow did not settle in 200 rounds")
}

// cleanAll is retention with no age: it deletes every job finished in s
// that it may.
func (w *flowWorld) cleanAll(t *testing.T, s jobs.State) {
	t.Helper()
	w.must(t, "age finished jobs", func() error {
		_, err := store.Of(w.b.q).Collection().UpdateMany(w.b.ctx, bson.M{"state": s, "finishedAt": bson.M{"$gt": time.Now().Add(-time.Hour)}},
			bson.M{"$set": bson.M{"finishedAt": time.Now().Add(-48 * time.Hour)}})
		return err
	})
	w.must(t, "retention", func() error { _, err := store.Of(w.b.q).Clean(w.b.ctx, s, time.Hour, 100); return err })
}

// expected is what each job must have done: ran, or (false) ended
// cancelled without running.
func (w *flowWorld) expected() map[string]bool {
	ran := map[string]bool{}
	ok := map[string]bool{}
	for _, j := range w.shape.jobs { // parents come first
		runs := true // a job that runs anyway runs once every parent has ended, however
		for _, p := range j.after {
			if !ok[p] && !j.anyway {
				runs = false
			}
		}
		ran[j.id] = runs
		ok[j.id] = runs && !j.dies
	}
	return ran
}

func (w *flowWorld) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	require.Empty(t, w.early, "jobs ran before their parents succeeded")
	for id, ran := range w.expected() {
		if ran {
			require.Equal(t, 1, w.runs[id], "runs of %s", id)
		} else {
			require.Zero(t, w.runs[id], "runs of %s", id)
		}
	}
	w.checkLeft(t)
}

// checkLeft checks that no job is left unfinished, linking or due.
func (w *flowWorld) checkLeft(t *testing.T) {
	t.Helper()
	coll := store.Of(w.b.q).Collection()
	for _, f := range []bson.M{
		{"state": bson.M{"$in": bson.A{"blocked", "available", "running"}}},
		{"linking": bson.M{"$exists": true}},
		{"dependentsDue": bson.M{"$exists": true}},
	} {
		var n int64
		w.must(t, "count", func() (err error) { n, err = coll.CountDocuments(w.b.ctx, f); return err })
		require.Zero(t, n, "jobs left matching %v", f)
	}
}

// stepper stalls or kills a settle or a link at step index at (0 is the
// first step it reports).
type stepper struct {
	at      int
	kill    bool
	n       int
	steps   []string
	stalled chan struct{}
	resume  chan struct{}
}

var errKilled = errors.New("harness: killed")

func newStepper(at int, kill bool) *stepper {
	return &stepper{at: at, kill: kill, stalled: make(chan struct{}), resume: make(chan struct{})}
}

func (s *stepper) step(_ context.Context, name string) error {
	k := s.n
	s.n++
	s.steps = append(s.steps, name)
	if k != s.at {
		return nil
	}
	if s.kill {
		close(s.stalled)
		return fmt.Errorf("%w after %s", errKilled, name)
	}
	close(s.stalled)
	<-s.resume
	return nil
}

// waitStall waits until s stalls (or is killed) at its step, or the work
// ends, on done, without reaching it. A work killed at the step ends at
// once, so both are ready and a select alone would pick either: the stall
// counts, and the work's error is put back on done.
func waitStall(s *stepper, done chan error) (stalled bool, err error) {
	select {
	case <-s.stalled:
		return true, nil
	case err := <-done:
		select {
		case <-s.stalled:
			done <- err
			return true, nil
		default:
			return false, err
		}
	}
}

// settleSteps is how many steps a settle of a parent ending in s reports,
// with the step before it (A's finishing write done).
func settleSteps(s jobs.State) int {
	if s == jobs.StateSucceeded {
		return 1 + 3 // finished; settle:succeeded, settle:ready, settle:done
	}
	return 1 + 4 // finished; settle:pull, settle:<state>, settle:ready, settle:done
}

func TestWorkflowHarnessSettle(t *testing.T) {
	for _, shape := range flowShapes {
		end := jobs.StateSucceeded
		for _, j := range shape.jobs {
			if j.id == shape.target && j.dies {
				end = jobs.StateDead
			}
		}
		for at := range settleSteps(end) {
			for _, kill := range []bool{false, true} {
				for _, retention := range []bool{false, true} {
					mode := "stall"
					if kill {
						mode = "die"
					}
					if retention {
						mode += "-retention"
					}
					t.Run(fmt.Sprintf("%s/%s-at-%d", shape.name, mode, at), func(t *testing.T) {
						runSettle(t, shape, at, kill, retention)
					})
				}
			}
		}
	}
}

// runSettle runs one schedule of TestWorkflowHarnessSettle: worker A
// finishes the shape's target, then its settle stalls or dies at step at.
// A settle write that meets one of MongoDB's failure replies (devdb's
// --faults) ends the settle there, as a death at that write does: the
// leader's pass tells the dependents.
func runSettle(t *testing.T, shape flowShape, at int, kill, retention bool) {
	w := newFlowWorld(t, shape)
	w.insert(t, "")
	if w.linkLeftToPass() {
		// A failure reply stopped the enqueue's link: the leader's pass
		// links the dependents before A claims their parent, as the
		// schedule has it.
		w.must(t, "the leader's pass", func() error { _, err := w.b.q.SettleDependents(w.b.ctx, 0, 100); return err })
	}
	// A claims the target, runs it and makes its finishing write.
	j := w.claim(t)
	require.NotNil(t, j)
	require.Equal(t, shape.target, j.ID)
	require.True(t, j.Dependents)
	w.work(t, j)

	s := newStepper(at, kill)
	done := make(chan error, 1)
	go func() {
		if err := s.step(w.b.ctx, "finished"); err != nil {
			done <- err
			return
		}
		_, err := w.b.q.SettleDependentsOf(queue.WithDepsStep(w.b.ctx, s.step), j.ID)
		done <- err
	}()
	stalled, err := waitStall(s, done)
	if !stalled {
		require.True(t, diedOnReply(err), "the settle ended (%v) after steps %v, before step %d", err, s.steps, at)
		w.drain(t, retention)
		w.check(t)
		return
	}
	w.drain(t, retention)
	if !kill {
		close(s.resume)
	}
	err = <-done
	switch {
	case kill:
		require.ErrorIs(t, err, errKilled)
	case !diedOnReply(err):
		require.NoError(t, err)
	}
	require.Greater(t, len(s.steps), at, "the stall point was reached")
	w.drain(t, retention)
	w.check(t)
}

// linkSteps are the steps of the link of a dependent whose one parent is
// unfinished at the link's read (link:list, link:mark, link:done), or has
// finished (link:list, link:mark, link:apply, link:ready, link:done).
const linkSteps = 5

func TestWorkflowHarnessLink(t *testing.T) {
	for _, shape := range flowShapes {
		// The late dependent is the last job, enqueued on its own while
		// its parents run.
		late := shape.jobs[len(shape.jobs)-1]
		for at := range linkSteps {
			for _, kill := range []bool{false, true} {
				mode := "stall"
				if kill {
					mode = "die"
				}
				t.Run(fmt.Sprintf("%s/%s-at-%d", shape.name, mode, at), func(t *testing.T) {
					runLink(t, shape, late, at, kill)
				})
			}
		}
	}
}

// runLink runs one schedule of TestWorkflowHarnessLink: the enqueue of the
// late dependent stalls or dies at step at of its link. The app sends an
// enqueue that met one of MongoDB's failure replies again with the same
// id: its insert may have been applied, and is then found there.
func runLink(t *testing.T, shape flowShape, late flowJob, at int, kill bool) {
	w := newFlowWorld(t, shape)
	w.insert(t, late.id)
	// Half the runs have a parent finished before the
	// enqueue (the link applies it), half not.
	// (Without retention: a parent deleted before its
	// dependent is enqueued cancels it, TestDepInsertedAfterItsParentFinished.)
	if at%2 == 1 {
		w.drain(t, false)
	}
	s := newStepper(at, kill)
	done := make(chan error, 1)
	var res queue.Result
	go func() {
		done <- testdb.Retry(t.Logf, "enqueue", func() (err error) {
			res, err = w.b.q.Enqueue(queue.WithDepsStep(w.b.ctx, s.step), "k", nil,
				queue.InsertOpts{ID: late.id, After: late.after, AfterRunAnyway: late.anyway})
			return err
		})
	}()
	if stalled, err := waitStall(s, done); stalled {
		w.drain(t, true)
		if !kill {
			close(s.resume)
		}
	} else { // fewer steps than at: nothing to stall
		require.NoError(t, err)
		done <- nil
	}
	// The insert is in either way: a link that dies is
	// logged, not returned (the pass finishes it).
	require.NoError(t, <-done)
	w.drain(t, true)
	w.check(t)
	// The link was tried, unless a failure reply stopped it before its
	// first write or the enqueue found the job there from a send whose
	// reply was lost: the leader's pass linked it then.
	require.True(t, slices.Contains(s.steps, "link:mark") || w.linkLeftToPass() || res.Existed,
		"the link was never tried (steps %v)", s.steps)
}

// workflow is the shape as a workflow with id wf.
func (w *flowWorld) workflow(wf string) *queue.Workflow {
	out := queue.NewWorkflow(wf)
	for _, j := range w.shape.jobs {
		out.Add(j.id, "k", nil, queue.TaskOpts{After: j.after, AfterRunAnyway: j.anyway})
	}
	return out
}

// TestWorkflowHarnessBuilder: a builder inserting the shape as a workflow
// stalls or dies after any of its writes (the gate, each step of linking
// its tasks, the tasks, the publish, each step of the publish's settle)
// while the rest of the world drains (the leader's passes, in half the
// runs the sweep of unpublished workflows with no grace, workers,
// retention); then it resumes with what it read, or is called again with
// the same id; last a sweep with no grace and a drain. Checked from the
// database: when the gate ended succeeded (published) every task did what
// the shape says, once, none early; when it did not, no task ran at all
// (the tasks that run anyway included); nothing is left blocked, linking
// or due.
func TestWorkflowHarnessBuilder(t *testing.T) {
	// gate, link:list, link:mark, link:done, tasks, publish,
	// settle:succeeded, settle:ready, settle:done
	const builderSteps = 9
	for _, shape := range flowShapes {
		for at := range builderSteps {
			for _, kill := range []bool{false, true} {
				for _, sweep := range []bool{false, true} {
					mode := "stall"
					if kill {
						mode = "die"
					}
					if sweep {
						mode += "-swept"
					}
					t.Run(fmt.Sprintf("%s/%s-at-%d", shape.name, mode, at), func(t *testing.T) {
						runBuilder(t, shape, at, kill, sweep)
					})
				}
			}
		}
	}
}

// runBuilder runs one schedule of TestWorkflowHarnessBuilder. A builder
// whose call met one of MongoDB's failure replies (devdb's --faults)
// stopped at that write, its outcome unknown (a publish may have been
// applied with its reply lost): it is called again with the same id, as
// one that died, and as InsertWorkflow's contract says.
func runBuilder(t *testing.T, shape flowShape, at int, kill, sweep bool) {
	w := newFlowWorld(t, shape)
	w.prefix = "wf" + queue.TaskSeparator
	s := newStepper(at, kill)
	done := make(chan error, 1)
	go func() {
		ctx := queue.WithDepsStep(queue.WithWorkflowStep(w.b.ctx, s.step), s.step)
		_, err := w.b.q.InsertWorkflow(ctx, w.workflow("wf"))
		done <- err
	}()
	meanwhile := func() {
		if sweep {
			w.must(t, "sweep workflows", func() error { _, err := w.b.q.SweepWorkflows(w.b.ctx, 0, 100); return err })
		}
		// Retention only while a builder stalls: one that
		// dies is called again, and a workflow retention
		// deleted whole is inserted again by its id, as a
		// job is (InsertOpts.ID).
		w.drain(t, !kill)
	}
	var err error
	stalled := false
	select {
	case <-s.stalled:
		stalled = true
		meanwhile()
		if !kill {
			close(s.resume)
		}
		err = <-done
	case err = <-done:
		// Stopped by a failure reply before the step: at a write of its
		// own, or in a link or the settle after its publish, which it
		// logs and leaves to the leader's pass (with fewer steps).
		require.True(t, diedOnReply(err) || err == nil && (w.settleLeftToPass() || w.linkLeftToPass()),
			"the builder ended (%v) after steps %v, before step %d", err, s.steps, at)
		meanwhile()
	}
	published := builderPublished(t, s, at, stalled && kill, err)
	if !kill && diedOnReply(err) && w.publishedAsRead(t) {
		// The app reads what its call did rather than call again: with
		// retention on meanwhile, a workflow that ran and was deleted
		// would be inserted again by its id.
		published = true
	} else if kill || diedOnReply(err) {
		// Called again with the same id. (After a publish
		// whose gate retention deleted since, it finds
		// tasks ended and refuses: ErrWorkflowCancelled.)
		err = testdb.Retry(t.Logf, "insert the workflow again", func() error {
			_, err := w.b.q.InsertWorkflow(w.b.ctx, w.workflow("wf"))
			return err
		})
		if err != nil {
			require.ErrorIs(t, err, queue.ErrWorkflowCancelled)
		} else {
			published = true
		}
	}
	w.drain(t, !kill)
	w.must(t, "sweep workflows", func() error { _, err := w.b.q.SweepWorkflows(w.b.ctx, 0, 100); return err })
	w.drain(t, false)

	if published {
		w.check(t)
	} else {
		w.mu.Lock()
		require.Empty(t, w.runs, "tasks of a workflow that was not published ran")
		w.mu.Unlock()
		w.checkLeft(t)
	}
}

// publishedAsRead reads whether workflow wf was published: its gate
// succeeded, or it is gone (retention) after tasks ran, which only a
// published workflow's do.
func (w *flowWorld) publishedAsRead(t *testing.T) bool {
	t.Helper()
	var gate *jobs.Job
	err := testdb.Retry(t.Logf, "read the gate", func() (err error) { gate, err = w.b.q.Get(w.b.ctx, "wf"); return err })
	if errors.Is(err, queue.ErrNotFound) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.runs) > 0
	}
	require.NoError(t, err)
	return gate.State == jobs.StateSucceeded
}

// builderPublished says whether the builder's first call published the
// workflow, from how it ended: err, and killed at step at when killed.
func builderPublished(t *testing.T, s *stepper, at int, killed bool, err error) bool {
	t.Helper()
	// The publish step reports after its write: the
	// workflow was published. A settle killed after it
	// is logged, not returned.
	published := slices.Contains(s.steps, "publish")
	if diedOnReply(err) {
		return published // or not yet known: the call again tells
	}
	// A link's error is logged, not returned (the
	// leader's pass links): a builder "killed" at a
	// link step goes on, and its publish finds the
	// gate the sweep cancelled meanwhile when the
	// sweep came first.
	goesOn := killed && strings.HasPrefix(s.steps[at], "link:")
	switch {
	case killed && published:
	case goesOn && err != nil:
		require.ErrorIs(t, err, queue.ErrWorkflowCancelled)
	case goesOn:
		published = true
	case killed:
		require.ErrorIs(t, err, errKilled)
	case err != nil:
		require.ErrorIs(t, err, queue.ErrWorkflowCancelled)
	default:
		published = true
	}
	return published
}
