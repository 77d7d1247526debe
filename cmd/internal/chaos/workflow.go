//go:build linux

package chaos

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
)

// The workflows' share of the run: each wave inserts five workflows with
// queue.InsertWorkflow (a chain, a fan-in, a diamond, one whose task
// fails permanently, and one whose task runs anyway after a failed
// parent) of step jobs (internal/testworker, whose binary the run's
// workers are), while workers are SIGKILLed, SIGSTOPped and cut off from
// devdb. A step records each attempt in the steps collection: a start
// (its claim's stamp, heartbeatAt as the claim wrote it, and the
// handler's clock) when its handler begins, an end just before it
// returns success. After the drain, from the job documents and the steps:
//   - every workflow was published (its gate succeeded) and every task
//     ended as its shape says: succeeded; dead for a failing task;
//     cancelled below a failed parent, unless it runs anyway (none lost,
//     none left blocked, available or running);
//   - no attempt of a task started before every parent (the gate
//     included) had finished, and succeeded unless it runs anyway: each
//     start's claim stamp, and the handler's clock, is at or after each
//     parent's finishedAt (BSON times, to the millisecond: a claim in the
//     millisecond of its parent's finishing write passes); a cancelled
//     task never started;
//   - no task succeeded twice, and none started after its success: the
//     success a document records is that of its last attempt started (no
//     attempt numbered higher), an attempt whose handler returned success
//     (its end recorded with the job's lease token); no attempt was
//     claimed after its finishedAt; and every earlier attempt that started
//     has a failure in the job's errors (its handler failed, or the reaper
//     took its expired lease). An earlier attempt without one ended
//     without the queue recording a failure, yet the job ran again: it
//     succeeded, and then ran (and here succeeded) again. A second success
//     also rewrites finishedAt, later than its dependents' starts, which
//     the rule above catches.
//
// At-least-once is not "ran once": an attempt can return success and lose
// its lease before its completion is recorded (SIGSTOPped, cut off), and
// run again; those are counted (WorkflowFencedEnds), not failed. Every
// stamp is written by some process's clock (store's c.now()), all on this
// host: the claim's and the finishing write's come from the database
// writes the workers and the builder make, not from the ledger.

// stepKind and stepArgs mirror internal/testworker's step kind.
const stepKind = "step"

type stepArgs struct {
	SleepMs int  `bson:"sleepMs"`
	Fail    bool `bson:"fail"`
}

// Kind implements jobs.Args.
func (stepArgs) Kind() string { return stepKind }

// stepsCollection is where step attempts are recorded.
const stepsCollection = "steps"

// wfTask is one task of a workflow the run inserted, as it was built.
type wfTask struct {
	name   string
	after  []string
	anyway bool
	fail   bool
}

// wfRecord is a workflow the run inserted: its id, its tasks by name in
// the order added (parents first) and their job ids.
type wfRecord struct {
	id, shape string
	tasks     []wfTask
	ids       map[string]string
}

// wfShapes are the shapes each wave inserts, parents before children.
var wfShapes = []struct {
	name  string
	tasks []wfTask
}{
	{"chain", []wfTask{{name: "a"}, {name: "b", after: []string{"a"}}, {name: "c", after: []string{"b"}}}},
	{"fanin", []wfTask{{name: "a"}, {name: "b"}, {name: "c"}, {name: "d", after: []string{"a", "b", "c"}}}},
	{"diamond", []wfTask{{name: "a"}, {name: "b", after: []string{"a"}}, {name: "c", after: []string{"a"}},
		{name: "d", after: []string{"b", "c"}}}},
	{"failing", []wfTask{{name: "a"}, {name: "bad", after: []string{"a"}, fail: true}, {name: "ok", after: []string{"a"}},
		{name: "c", after: []string{"bad"}}, {name: "d", after: []string{"c", "ok"}}}},
	{"anyway", []wfTask{{name: "a"}, {name: "bad", after: []string{"a"}, fail: true},
		{name: "cleanup", after: []string{"bad"}, anyway: true}, {name: "report", after: []string{"cleanup"}}}},
}

// workflowWave inserts one workflow of every shape, each with an id of
// the wave's, retrying an insert that fails (a SIGKILL or an outage does
// not reach the builder, but a slow devdb may time it out): the retry
// resumes it.
func (r *run) workflowWave(ctx context.Context, w int) {
	for _, s := range wfShapes {
		rec := wfRecord{id: fmt.Sprintf("wf-w%d-%s", w, s.name), shape: s.name, tasks: s.tasks}
		wf := queue.NewWorkflow(rec.id)
		for _, t := range s.tasks {
			wf.Add(t.name, stepKind, stepArgs{SleepMs: 300 + r.intN(900), Fail: t.fail},
				queue.TaskOpts{After: t.after, AfterRunAnyway: t.anyway})
		}
		var res queue.WorkflowResult
		var err error
		for try := range 5 {
			if res, err = r.q.InsertWorkflow(ctx, wf); err == nil {
				break
			}
			r.t.Logf("chaos: insert workflow %s (try %d): %v", rec.id, try+1, err)
			time.Sleep(time.Second)
		}
		if err != nil {
			r.errorf("chaos: insert workflow %s: %v", rec.id, err)
			continue
		}
		rec.ids = res.Tasks
		r.wfs = append(r.wfs, rec)
	}
}

// isWorkflowJob says whether j is a gate or a task of the run's
// workflows, whose final states checkWorkflows judges.
func isWorkflowJob(j *jobs.Job) bool {
	return j.Kind == stepKind || j.Kind == queue.WorkflowGateKind
}

// stepRecord is one record of the steps collection.
type stepRecord struct {
	JobID     string     `bson:"jobId"`
	Attempt   int        `bson:"attempt"`
	Owner     string     `bson:"owner"`
	Token     string     `bson:"token"`
	Phase     string     `bson:"phase"`
	At        time.Time  `bson:"at"`
	ClaimedAt *time.Time `bson:"claimedAt"`
}

// checkWorkflows checks the workflows from the database after the drain
// (see the comment at the top of this file).
func (r *run) checkWorkflows(byID map[string]*jobs.Job) {
	ctx := context.Background()
	var recs []stepRecord
	r.readAll(ctx, "steps", r.db.Collection(stepsCollection), &recs)
	starts, ends := map[string][]stepRecord{}, map[string][]stepRecord{}
	for _, s := range recs {
		if s.Phase == "end" {
			ends[s.JobID] = append(ends[s.JobID], s)
		} else {
			starts[s.JobID] = append(starts[s.JobID], s)
			r.res.WorkflowAttempts++
		}
	}
	for _, w := range r.wfs {
		r.res.Workflows++
		gate := byID[w.id]
		if gate == nil || gate.State != jobs.StateSucceeded || gate.FinishedAt == nil {
			r.errorf("chaos: workflow %s (%s) was inserted but is not published: %+v", w.id, w.shape, gate)
			continue
		}
		want := map[string]jobs.State{}
		for _, t := range w.tasks {
			r.res.WorkflowTasks++
			id := w.ids[t.name]
			j := byID[id]
			want[t.name] = wantState(t, want)
			if j == nil {
				r.errorf("chaos: workflow %s: task %s (%s) is lost", w.id, t.name, id)
				continue
			}
			if j.State != want[t.name] {
				r.errorf("chaos: workflow %s: task %s is %s, want %s (errors %+v)", w.id, t.name, j.State, want[t.name], j.Errors)
			}
			r.checkStarts(w, t, j, gate, byID, starts[id])
			if j.State == jobs.StateSucceeded {
				r.checkOneSuccess(j, starts[id], ends[id])
			}
		}
	}
}

// wantState is the state task t must end in, given its parents'.
func wantState(t wfTask, parents map[string]jobs.State) jobs.State {
	for _, p := range t.after {
		if parents[p] != jobs.StateSucceeded && !t.anyway {
			return jobs.StateCancelled
		}
	}
	if t.fail {
		return jobs.StateDead
	}
	return jobs.StateSucceeded
}

// checkStarts: no attempt of task t (job j) started before the gate and
// every parent had finished, as t's rule requires; a cancelled task never
// started.
func (r *run) checkStarts(w wfRecord, t wfTask, j, gate *jobs.Job, byID map[string]*jobs.Job, starts []stepRecord) {
	if j.State == jobs.StateCancelled {
		if len(starts) > 0 {
			r.errorf("chaos: workflow %s: task %s is cancelled yet started %d times: %+v", w.id, t.name, len(starts), starts)
		}
		return
	}
	if len(starts) == 0 {
		r.errorf("chaos: workflow %s: task %s is %s and never started", w.id, t.name, j.State)
		return
	}
	first := starts[0]
	for _, s := range starts[1:] {
		if s.claimed().Before(first.claimed()) {
			first = s
		}
	}
	parents := []string{w.id}
	for _, p := range t.after {
		parents = append(parents, w.ids[p])
	}
	for _, pid := range parents {
		p := byID[pid]
		switch {
		case p == nil || p.FinishedAt == nil:
			r.errorf("chaos: workflow %s: task %s started (attempt %d, claimed %s) but its parent %s never finished",
				w.id, t.name, first.Attempt, first.claimed().Format(time.StampMicro), pid)
		case p.State != jobs.StateSucceeded && !t.anyway:
			r.errorf("chaos: workflow %s: task %s started (attempt %d) though its parent %s is %s",
				w.id, t.name, first.Attempt, pid, p.State)
		// The handler's start, not the claim's stamp: a batch claim
		// stamps the time it was sent, before it read its candidates,
		// so a task released while that read ran carries a stamp before
		// its parents' finish (seen once on a loaded machine, the
		// handler 75 ms after the parents finished).
		case first.At.Before(*p.FinishedAt):
			r.errorf("chaos: workflow %s: task %s started (attempt %d, claimed %s, handler %s) before its parent %s finished (%s, %s)",
				w.id, t.name, first.Attempt, first.claimed().Format(time.StampMicro), first.At.Format(time.StampMicro),
				pid, p.State, p.FinishedAt.Format(time.StampMicro))
		}
	}
}

// claimed is the attempt's claim stamp, or the handler's start when the
// claim wrote none.
func (s stepRecord) claimed() time.Time {
	if s.ClaimedAt != nil {
		return *s.ClaimedAt
	}
	return s.At
}

// checkOneSuccess: the success job j records is that of its last attempt
// started, whose handler returned success, no attempt was claimed after
// it, and every earlier attempt failed; other attempts that returned
// success lost their lease.
func (r *run) checkOneSuccess(j *jobs.Job, starts, ends []stepRecord) {
	for _, s := range starts {
		if s.Attempt > j.Attempt {
			r.errorf("chaos: task %s succeeded in attempt %d, yet attempt %d started: %+v", j.ID, j.Attempt, s.Attempt, s)
		}
		if s.claimed().After(*j.FinishedAt) {
			r.errorf("chaos: task %s succeeded at %s, yet attempt %d was claimed after, at %s",
				j.ID, j.FinishedAt.Format(time.StampMicro), s.Attempt, s.claimed().Format(time.StampMicro))
		}
	}
	failed := map[int]bool{}
	for _, e := range j.Errors {
		failed[e.Attempt] = true
	}
	for _, s := range starts {
		if s.Attempt < j.Attempt && !failed[s.Attempt] && len(j.Errors) < jobs.MaxErrors {
			r.errorf("chaos: task %s: attempt %d started and no failure of it is recorded, yet attempt %d ran and succeeded: it succeeded twice (errors %+v)",
				j.ID, s.Attempt, j.Attempt, j.Errors)
		}
	}
	own := slices.IndexFunc(ends, func(e stepRecord) bool { return e.Attempt == j.Attempt && e.Token == j.LeaseToken })
	if own < 0 {
		r.errorf("chaos: task %s is succeeded by attempt %d (token %s), but no such attempt returned success: %+v",
			j.ID, j.Attempt, j.LeaseToken, ends)
	}
	r.res.WorkflowFencedEnds += len(ends) - min(1, len(ends))
}
