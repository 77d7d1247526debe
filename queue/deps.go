package queue

// Dependencies: jobs that wait for other jobs (docs/WORKFLOWS.md).
//
// A job enqueued with InsertOpts.After is inserted blocked (no claim
// matches it) with after (its parents, as given), waitingOn (the parents
// not succeeded yet) and linking: true. Without transactions, three steps
// keep the documents consistent. Each is a write conditioned on what made
// it right and safe to repeat; a process may stall or die before any of
// them, and a pass of the leader finishes what it left:
//
//  1. link (the enqueuer, after the insert; else the leader's pass once the
//     job has been linking for a grace period): list the job on each parent
//     (depslist.go), then mark each parent dependents: true, moving its
//     updatedAt (a finished one dependentsDue too, so that retention keeps
//     it until it is settled), then read the parents' states, apply those
//     that have finished to the job, and unset linking. A parent read
//     unfinished was marked before it was read, so its finishing write sees
//     the mark; one read running may have been claimed before the mark, its
//     worker not knowing of it (depswatch.go).
//  2. the parent's finishing write (finish, lease.go) renames dependents to
//     dependentsDue: set on a job with dependents only, by the very write
//     that records the outcome, so nothing falls between.
//  3. settle (the parent's worker right after its finishing write, or the
//     process that linked a dependent while the parent ran, depswatch.go;
//     else the leader's pass): apply the parent's outcome to the blocked
//     jobs of its list (by _id) whose waitingOn holds it ($pull it when it
//     succeeded, or for a job that runs anyway; cancel the job otherwise),
//     turn available those whose waitingOn is now empty, then rename
//     dependentsDue back to dependents, conditioned on the state settled.
//
// Exactly once: a blocked job turns available only by a write conditioned
// on state blocked and a waitingOn that is empty or holds only parents that
// succeeded, the ones settled (releaseLastModel); nothing makes a job
// blocked but its insert and an operator's retry; a $pull of one parent's
// id changes nothing the second time. A dependent cancelled here is
// finished by finish, so its own dependents are settled the same way: the
// settle goes on down the graph (settleDown), and whatever a stopped
// process left is flagged due for the leader's pass.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// The fields of the dependency protocol (the bson names of jobs.Job's
// After, WaitingOn, RunAnyway, Linking and Dependents).
const (
	afterField         = "after"
	waitingOnField     = "waitingOn"
	runAnywayField     = "runAnyway"
	linkingField       = store.LinkingField
	dependentsField    = store.DependentsField
	dependentsDueField = store.DependentsDueField
)

// MaxAfter is the most parents one job may wait for.
const MaxAfter = 20_000

// DefaultLinkGrace is how long a blocked job may stay linking (its
// enqueuer between its insert and its link) before the leader's pass links
// it instead.
const DefaultLinkGrace = time.Minute

// unfinishedStates are the states of a job that has not ended, as a
// filter's $in: a blocked job holds its slot of a bounded queue's
// capacity (capacity.go) while it waits, as an available one does.
var unfinishedStates = bson.A{jobs.StateBlocked, jobs.StateAvailable, jobs.StateRunning}

// finishedStates are the final states, as a filter's $in.
var finishedStates = bson.A{jobs.StateSucceeded, jobs.StateDead, jobs.StateCancelled}

// isDue matches a job whose dependents have not been told of its outcome
// (store.NotDue the others).
var isDue = bson.E{Key: dependentsDueField, Value: bson.D{{Key: "$exists", Value: true}}}

// noDependents matches a job that no link has marked.
var noDependents = bson.E{Key: dependentsField, Value: bson.D{{Key: "$exists", Value: false}}}

// depsStepKey is the context key of a test's hook that runs after each
// write of a link or a settle, named by step; an error it returns stops
// the link or settle there, as if its process had died.
type depsStepKey struct{}

// depsStep runs the test hook of ctx after the write step, if any.
func depsStep(ctx context.Context, step string) error {
	if hook, ok := ctx.Value(depsStepKey{}).(func(context.Context, string) error); ok {
		return hook(ctx, step)
	}
	return nil
}

// runningKey is the context key of the job whose handler runs under a
// context (WithRunningJob).
type runningKey struct{}

type runningJob struct {
	id     string
	marked *atomic.Bool
}

// WithRunningJob returns ctx for the handler of the job with id, which a
// worker runs: a job enqueued under it that waits for that job sets
// marked once the job is marked as having dependents. The claimed job
// did not say so, and the worker then knows to settle its dependents
// right after its finishing write, rather than leaving them to the
// leader's pass.
func WithRunningJob(ctx context.Context, id string, marked *atomic.Bool) context.Context {
	return context.WithValue(ctx, runningKey{}, runningJob{id: id, marked: marked})
}

// checkAfter validates the parents of a job with id (empty: a new id).
func checkAfter(after []string, id string) (string, string) {
	if len(after) > MaxAfter {
		return "after", fmt.Sprintf("%d parents is over the limit of %d", len(after), MaxAfter)
	}
	seen := make(map[string]bool, len(after))
	for i, p := range after {
		if problem := jobs.NameProblem(p, jobs.MaxNameBytes); problem != "" {
			return fmt.Sprintf("after[%d]", i), problem
		}
		if seen[p] {
			return fmt.Sprintf("after[%d]", i), fmt.Sprintf("%q is named twice", p)
		}
		if p == id {
			return fmt.Sprintf("after[%d]", i), fmt.Sprintf("%q is the job's own id: a job cannot wait for itself", p)
		}
		seen[p] = true
	}
	return "", ""
}

// dependent is a blocked job to link: its id as stored and the parents it
// waits for.
type dependent struct {
	id        any
	waitingOn []string
	runAnyway bool
	// gate is the id of the workflow the job is a task of (its workflow
	// field), whose gate it waits for: a gate that did not open, or is
	// not in the collection, cancels it even when it runs anyway.
	gate string
}

// linkInserted links the jobs of docs that wait for parents and that
// results say are in the collection. A failure is logged, not returned:
// the jobs are in, still linking, and the leader's pass links them.
func (c *Client) linkInserted(ctx context.Context, docs []*jobs.Job, results []Result) {
	var ds []dependent
	tags, _ := ctx.Value(workflowTagKey{}).(map[string]workflowTag)
	for i, d := range docs {
		r := results[i]
		// A job found there (Existed) was inserted by an earlier enqueue,
		// which linked it or left it to the leader's pass.
		if r.Err != nil || r.Duplicate || r.Existed {
			continue
		}
		if len(tags[d.ID].Dependents) > 0 {
			preListed(ctx, d.ID) // inserted with its list (workflow.go)
		}
		if len(d.After) == 0 {
			continue
		}
		ds = append(ds, dependent{id: d.ID, waitingOn: d.WaitingOn, runAnyway: d.RunAnyway, gate: tags[d.ID].Workflow})
	}
	if len(ds) == 0 {
		return
	}
	if err := c.link(ctx, ds); err != nil {
		c.log.Warn("enqueued jobs that wait for others could not be linked to their parents; the leader's pass links them",
			zap.Int("jobs", len(ds)), zap.Error(err))
	}
}

// link makes the parents of ds know of them and applies to each the
// outcome of its parents that have finished (steps 1 of the protocol).
func (c *Client) link(ctx context.Context, ds []dependent) error {
	parents, seen := parentsOfAll(ds)
	if err := c.listAndMark(ctx, ds, parents, seen); err != nil {
		return err
	}
	states, gates, err := c.statesOf(ctx, parents)
	if err != nil {
		return fmt.Errorf("queue: read the parents of %d jobs: %w", len(ds), err)
	}
	// Perhaps claimed before the mark: their workers may not know of ds.
	c.watchParents(runningParents(ctx, parents, states))
	t := c.now()
	all := make(bson.A, 0, len(ds))
	var maybeReady bson.A
	for _, d := range ds {
		all = append(all, d.id)
		ready, wrote, err := c.applyParents(ctx, d, states, gates, t)
		if err != nil {
			return err
		}
		if ready {
			maybeReady = append(maybeReady, d.id)
		}
		if !wrote {
			continue
		}
		if err := depsStep(ctx, "link:apply"); err != nil {
			return err
		}
	}
	for _, ids := range idChunks(maybeReady) {
		if err := c.release(ctx, idIn(ids), t); err != nil {
			return err
		}
		if err := depsStep(ctx, "link:ready"); err != nil {
			return err
		}
	}
	// Last: a job is linking until every step above is done, so the
	// leader's pass redoes a link that stopped anywhere before.
	for _, ids := range idChunks(all) {
		if _, err := c.coll.UpdateMany(ctx, bson.D{idIn(ids), {Key: linkingField, Value: true}},
			bson.D{{Key: "$unset", Value: bson.D{{Key: linkingField, Value: ""}}}}); err != nil {
			return fmt.Errorf("queue: link %d jobs: %w", len(ds), err)
		}
	}
	return depsStep(ctx, "link:done")
}

// listAndMark lists ds on their parents, then marks the parents (seen:
// the parents' ids as a set).
func (c *Client) listAndMark(ctx context.Context, ds []dependent, parents bson.A, seen map[string]bool) error {
	if len(parents) == 0 {
		return nil
	}
	if err := c.listDependents(ctx, ds); err != nil {
		return err
	}
	if err := depsStep(ctx, "link:list"); err != nil {
		return err
	}
	if err := c.markParents(ctx, parents, len(ds)); err != nil {
		return err
	}
	if r, ok := ctx.Value(runningKey{}).(runningJob); ok && seen[r.id] {
		r.marked.Store(true)
	}
	return depsStep(ctx, "link:mark")
}

// parentsOfAll returns the parents ds wait for, each once.
func parentsOfAll(ds []dependent) (bson.A, map[string]bool) {
	var parents bson.A
	seen := map[string]bool{}
	for _, d := range ds {
		for _, p := range d.waitingOn {
			if !seen[p] {
				seen[p] = true
				parents = append(parents, p)
			}
		}
	}
	return parents, seen
}

// markParents marks parents as having dependents (n jobs of them), and
// flags those finished due at once (step 1). A parent the link then reads
// missing never was, or was deleted before the mark (or, settled since,
// the job no longer waits for it). Both marks move updatedAt: a claim that
// stamps a job read before (matching its updatedAt as read, internal/store)
// then misses it rather than returning it without the mark, and a settle
// of a finished parent as read before the flag (settledModels) leaves the
// flag for the next pass.
func (c *Client) markParents(ctx context.Context, parents bson.A, n int) error {
	var models []mongo.WriteModel
	// mark sets field on the parents whose state is ($in) or is not ($nin)
	// a finished one and whose field matches unmarked.
	mark := func(op, field string, unmarked bson.D) {
		for _, ids := range idChunks(parents) {
			models = append(models, mongo.NewUpdateManyModel().SetFilter(bson.D{
				idIn(ids), {Key: "state", Value: bson.D{{Key: op, Value: finishedStates}}}, {Key: field, Value: unmarked},
			}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: field, Value: true}, {Key: "updatedAt", Value: c.now()}}}}))
		}
	}
	mark("$nin", dependentsField, bson.D{{Key: "$ne", Value: true}})
	mark("$in", dependentsDueField, bson.D{{Key: "$exists", Value: false}})
	// Ordered: every unfinished parent is marked before any finished one
	// is flagged.
	if _, err := c.coll.BulkWrite(ctx, models); err != nil {
		return fmt.Errorf("queue: mark the parents of %d jobs: %w", n, err)
	}
	return nil
}

// judgeParents says, from its parents' states, which parents d no longer
// waits for (resolved), or why it is cancelled (cause, for parent
// culprit): a parent dead, cancelled or not in the collection cancels it,
// unless it runs anyway; a workflow's gate that did not open cancels even
// a task that runs anyway (workflow.go).
func judgeParents(d dependent, states map[string]jobs.State, gates map[string]bool) (resolved []string, cause, culprit string) {
	for _, p := range d.waitingOn {
		st, found := states[p]
		switch {
		case st == jobs.StateSucceeded:
			resolved = append(resolved, p)
		case !found || st == jobs.StateDead || st == jobs.StateCancelled:
			if d.runAnyway && !gates[p] && p != d.gate {
				resolved = append(resolved, p)
			} else if cause == "" {
				cause, culprit = parentEnded(p, st, found), p
			}
		}
	}
	return resolved, cause, culprit
}

// applyParents applies to d the outcome of its parents that have
// finished. ready says d may wait for nothing more (the link's release
// checks); wrote that a write was made.
func (c *Client) applyParents(ctx context.Context, d dependent, states map[string]jobs.State, gates map[string]bool, t time.Time) (ready, wrote bool, err error) {
	resolved, cause, culprit := judgeParents(d, states, gates)
	mine := bson.D{{Key: "_id", Value: d.id}, {Key: "state", Value: jobs.StateBlocked}}
	switch {
	case cause != "":
		// Only while the job still waits for that parent: one that
		// succeeded and was settled, then deleted, was pulled.
		return false, true, c.cancelBlocked(ctx, append(mine, bson.E{Key: waitingOnField, Value: culprit}), t, cause)
	case len(resolved) > 0:
		// $pullAll of the finished parents (internal/store's server.go
		// says why not $pull with $in).
		_, err := c.coll.UpdateOne(ctx, append(mine, bson.E{Key: waitingOnField, Value: bson.D{{Key: "$type", Value: "array"}}}), bson.D{
			{Key: "$pullAll", Value: bson.D{{Key: waitingOnField, Value: resolved}}},
			{Key: "$set", Value: bson.D{{Key: "updatedAt", Value: t}}},
		})
		if err != nil {
			return false, true, fmt.Errorf("queue: link job %v: %w", d.id, err)
		}
		return true, true, nil
	case len(d.waitingOn) == 0:
		// Waits for nothing: written so by another app (its parents
		// succeeded), or left by a link stopped before its release.
		return true, false, nil
	}
	return false, false, nil
}

// parentEnded says why a job waiting for parent p is cancelled: p ended
// in state st, or (found false) is not in the collection.
func parentEnded(p string, st jobs.State, found bool) string {
	if !found {
		return fmt.Sprintf("cancelled: parent %s is not in the collection (never enqueued, or deleted)", p)
	}
	return fmt.Sprintf("cancelled: parent %s ended %s", p, st)
}

// statesOf reads the state of each of ids that is in the collection (a
// state of another type reads as ""), and which of them are workflows'
// gates.
func (c *Client) statesOf(ctx context.Context, ids bson.A) (map[string]jobs.State, map[string]bool, error) {
	out := make(map[string]jobs.State, len(ids))
	gates := map[string]bool{}
	if len(ids) == 0 {
		return out, gates, nil
	}
	for _, chunk := range idChunks(ids) {
		cur, err := c.coll.Find(ctx, bson.D{idIn(chunk)},
			options.Find().SetProjection(bson.D{{Key: "state", Value: 1}, {Key: "kind", Value: 1}}))
		if err != nil {
			return nil, nil, err
		}
		if err := store.EachRaw(ctx, cur, func(d bson.Raw) error {
			if id, ok := d.Lookup("_id").StringValueOK(); ok {
				st, _ := d.Lookup("state").StringValueOK()
				out[id] = jobs.State(st)
				if kind, _ := d.Lookup("kind").StringValueOK(); kind == WorkflowGateKind {
					gates[id] = true
				}
			}
			return nil
		}); err != nil {
			return nil, nil, err
		}
	}
	return out, gates, nil
}

// cancelBlocked cancels the blocked jobs filter matches, recording why.
// filter must hold state: blocked.
func (c *Client) cancelBlocked(ctx context.Context, filter bson.D, t time.Time, why string) error {
	e := jobs.AttemptError{At: t, Message: why}
	update := store.Finish(jobs.StateCancelled, t)
	update = store.AlsoIn(update, "$unset", bson.E{Key: linkingField, Value: ""})
	// A job's errors is an array: the reason is pushed. One that another
	// app wrote as something else gets an array holding the reason.
	if _, err := c.coll.UpdateMany(ctx, append(slices.Clone(filter), bson.E{Key: "errors", Value: bson.D{{Key: "$type", Value: "array"}}}),
		append(update, bson.E{Key: "$push", Value: bson.D{{Key: "errors", Value: e}}})); err != nil {
		return fmt.Errorf("queue: cancel the dependents (%s): %w", why, err)
	}
	if _, err := c.coll.UpdateMany(ctx, filter, store.AlsoIn(update, "$set", bson.E{Key: "errors", Value: bson.A{e}})); err != nil {
		return fmt.Errorf("queue: cancel the dependents (%s): %w", why, err)
	}
	return nil
}

// release makes available the blocked jobs that match match and wait for
// no parent any more.
func (c *Client) release(ctx context.Context, match bson.E, t time.Time) error {
	m := releaseModel(match, t)
	_, err := c.coll.UpdateMany(ctx, m.Filter, m.Update)
	if err != nil {
		return fmt.Errorf("queue: make ready the jobs whose parents succeeded: %w", err)
	}
	return nil
}

// releaseModel is release's write.
func releaseModel(match bson.E, t time.Time) *mongo.UpdateManyModel {
	return mongo.NewUpdateManyModel().SetFilter(bson.D{
		match,
		{Key: "state", Value: jobs.StateBlocked},
		{Key: waitingOnField, Value: bson.D{{Key: "$size", Value: 0}}},
	}).SetUpdate(bson.D{
		{Key: "$set", Value: bson.D{{Key: "state", Value: jobs.StateAvailable}, {Key: "updatedAt", Value: t}}},
		{Key: "$unset", Value: bson.D{{Key: linkingField, Value: ""}}},
	})
}

// SettleDependentsOf tells the jobs that wait for the job with id of its
// outcome, if it has finished and they have not been told yet: when it
// succeeded, each stops waiting for it and runs once it waits for no other
// job; when it ended dead or cancelled, each is cancelled, with why,
// unless it runs anyway. It reports whether there was anything to settle.
// Workers call it right after finishing a job that has dependents, and the
// leader's reaper for any job left due (SettleDependents); it is safe to
// call any number of times, from any number of processes at once.
func (c *Client) SettleDependentsOf(ctx context.Context, id string) (bool, error) {
	return c.settleDown(ctx, id)
}

// settleDown settles the dependents of the job with id, then those of the
// dependents that this cancelled, and so on down the graph, so that one
// call carries a cancel to every descendant. It reports whether the job
// itself had dependents due.
func (c *Client) settleDown(ctx context.Context, id any) (bool, error) {
	first := true
	var had bool
	for next := []any{id}; len(next) > 0; {
		id := next[0]
		next = next[1:]
		st, match, ok, err := c.settle(ctx, id)
		if err != nil {
			return had, err
		}
		if first {
			had, first = ok, false
		}
		if !ok || st == jobs.StateSucceeded {
			continue
		}
		for _, m := range match {
			due, err := c.cancelledDue(ctx, id, m)
			if err != nil {
				return had, err
			}
			next = append(next, due...)
		}
	}
	return had, nil
}

// cancelledDue returns the ids of the jobs match selects that are
// cancelled and flagged due to dependents of their own: those a settle of
// the job with id cancelled, to settle in turn.
func (c *Client) cancelledDue(ctx context.Context, id any, match bson.E) ([]any, error) {
	out, err := c.st.IDs(ctx, bson.D{match, {Key: "state", Value: jobs.StateCancelled}, isDue}, 0)
	if err != nil {
		return nil, fmt.Errorf("queue: find the cancelled dependents of job %v: %w", asID(id), err)
	}
	return out, nil
}

// settleNow settles the dependents of the job with id, which was just
// finished; a failure is logged: the job is left due, and the leader's
// pass settles it.
func (c *Client) settleNow(ctx context.Context, id any) {
	if _, err := c.settleDown(ctx, id); err != nil {
		c.log.Warn("telling a finished job's dependents failed; the leader's pass does it", zap.Any("job_id", asID(id)), zap.Error(err))
	}
}

// settle tells the dependents of the job with id (of any type) of its
// outcome st, if it has finished and they have not been told; ok reports
// whether it had, match the filter elements that selected its dependents
// (depslist.go).
func (c *Client) settle(ctx context.Context, id any) (st jobs.State, match []bson.E, ok bool, err error) {
	raw, err := c.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}, isDue},
		options.FindOne().SetProjection(store.SettleFields)).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return st, nil, false, nil
	}
	if err != nil {
		return st, nil, false, fmt.Errorf("queue: read job %v to settle its dependents: %w", id, err)
	}
	s, _ := raw.Lookup("state").StringValueOK()
	st = jobs.State(s)
	if !st.Finished() {
		// Retried before its dependents were told: they wait for the
		// retry's outcome, which its finishing write leaves due.
		return st, nil, false, nil
	}
	kind, _ := raw.Lookup("kind").StringValueOK()
	match = dependentsMatch(id, raw)
	t := c.now()
	for _, m := range match {
		if err := c.tell(ctx, id, st, kind == WorkflowGateKind, m, t); err != nil {
			return st, nil, false, err
		}
	}
	// Done, for this outcome: a retry that finished again since, in
	// another state, is left due for the next settle.
	if _, err := c.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "state", Value: st}, isDue}, settledUpdate); err != nil {
		return st, nil, false, fmt.Errorf("queue: settle the dependents of job %v: %w", id, err)
	}
	return st, match, true, depsStep(ctx, "settle:done")
}

// tell applies the outcome st of the job with id (gate: a workflow's
// gate) to the blocked jobs that match selects and that wait for it, then
// releases those that wait for nothing more.
func (c *Client) tell(ctx context.Context, id any, st jobs.State, gate bool, match bson.E, t time.Time) error {
	waiting := bson.D{
		match,
		{Key: "state", Value: jobs.StateBlocked},
		{Key: waitingOnField, Value: bson.D{{Key: "$type", Value: "array"}, {Key: "$in", Value: bson.A{id}}}},
	}
	pull := bson.D{
		{Key: "$pull", Value: bson.D{{Key: waitingOnField, Value: id}}},
		{Key: "$set", Value: bson.D{{Key: "updatedAt", Value: t}}},
	}
	switch {
	case st == jobs.StateSucceeded:
		if _, err := c.coll.UpdateMany(ctx, waiting, pull); err != nil {
			return fmt.Errorf("queue: settle the dependents of job %v: %w", id, err)
		}
	case gate:
		// A workflow's gate that did not open: every task waiting for it
		// is cancelled, those that run anyway too (workflow.go).
		why := fmt.Sprintf("cancelled: workflow %v was %s before it was published", asID(id), st)
		if err := c.cancelBlocked(ctx, waiting, t, why); err != nil {
			return err
		}
	default:
		if _, err := c.coll.UpdateMany(ctx, append(slices.Clone(waiting), bson.E{Key: runAnywayField, Value: true}), pull); err != nil {
			return fmt.Errorf("queue: settle the dependents of job %v: %w", id, err)
		}
		if err := depsStep(ctx, "settle:pull"); err != nil {
			return err
		}
		why := fmt.Sprintf("cancelled: parent %v ended %s", asID(id), st)
		if err := c.cancelBlocked(ctx, append(slices.Clone(waiting), bson.E{Key: runAnywayField, Value: bson.D{{Key: "$ne", Value: true}}}), t, why); err != nil {
			return err
		}
	}
	if err := depsStep(ctx, "settle:"+string(st)); err != nil {
		return err
	}
	if err := c.release(ctx, match, t); err != nil {
		return err
	}
	return depsStep(ctx, "settle:ready")
}

// asID shows an id read as a bson.RawValue as its string when it is one.
func asID(id any) any {
	if v, ok := id.(bson.RawValue); ok {
		if s, ok := v.StringValueOK(); ok {
			return s
		}
	}
	return id
}

// DepsResult counts what one SettleDependents pass did.
type DepsResult struct {
	// Settled counts the finished jobs whose dependents were told of
	// their outcome.
	Settled int
	// Linked counts the blocked jobs linked to their parents in place of
	// an enqueuer that stopped before it did.
	Linked int
	// Buried counts the blocked jobs whose parents could not be read
	// (written by another app), now dead with why.
	Buried int
}

// SettleDependents is the leader's pass over dependencies: it settles
// (SettleDependentsOf) up to limit finished jobs whose dependents have not
// been told of their outcome, as when the worker that finished one stopped
// before it did, and links up to limit blocked jobs that have been linking
// for more than linkGrace, as when their enqueuer stopped between the
// insert and the link. Safe to run from many processes at once. A failure
// at one job does not stop the pass: it goes on to the others and to the
// links, and returns the failures with what it did.
func (c *Client) SettleDependents(ctx context.Context, linkGrace time.Duration, limit int) (DepsResult, error) {
	var res DepsResult
	settled, errSettle := c.settleDue(ctx, limit)
	res.Settled = settled
	if ctx.Err() != nil {
		return res, errSettle
	}
	linked, buried, errLink := c.linkLeft(ctx, linkGrace, limit)
	res.Linked, res.Buried = linked, buried
	return res, errors.Join(errSettle, errLink)
}

// settleDue settles up to limit finished jobs left due, and returns how
// many it settled. A job whose settle fails (a write refused in an
// election, say) is left due for the next pass, and the pass goes on to
// the others: a pass that stopped at it would never reach those after it
// while its settle kept failing.
func (c *Client) settleDue(ctx context.Context, limit int) (int, error) {
	due, err := c.st.IDs(ctx, bson.D{isDue, {Key: "state", Value: bson.D{{Key: "$in", Value: finishedStates}}}}, limit)
	if err != nil {
		return 0, fmt.Errorf("queue: find jobs whose dependents are due: %w", err)
	}
	settled, failed := 0, 0
	var first error
	for _, id := range due {
		ok, err := c.settleDown(ctx, id)
		if ok {
			settled++
		}
		if err != nil {
			failed++
			first = cmp.Or(first, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	if first != nil {
		return settled, fmt.Errorf("queue: %d of %d settles failed, left due; the first: %w", failed, len(due), first)
	}
	return settled, nil
}

// linkLeft links up to limit blocked jobs that have been linking for more
// than linkGrace (their enqueuer stopped before it linked them), and
// buries those whose parents cannot be read.
func (c *Client) linkLeft(ctx context.Context, linkGrace time.Duration, limit int) (linked, buried int, err error) {
	t := c.now()
	ds, bad, fills, err := c.readLinking(ctx, t.Add(-linkGrace), limit)
	if err != nil {
		return 0, 0, err
	}
	if len(fills) > 0 {
		// Settling matches after and pulls from waitingOn: a job written
		// with one of them gets the other first.
		if _, err := c.coll.BulkWrite(ctx, fills); err != nil {
			return 0, 0, fmt.Errorf("queue: fill in the parents of blocked jobs: %w", err)
		}
	}
	for _, d := range bad {
		if err := c.buryBlocked(ctx, d, t); err != nil {
			return 0, buried, err
		}
		buried++
	}
	linked, err = c.linkEach(ctx, ds)
	if linked > 0 {
		c.log.Info("linked blocked jobs whose enqueuer stopped before it did", zap.Int("jobs", linked))
	}
	return linked, buried, err
}

// linkEach links ds together, or, if that fails, each alone: one job whose
// link keeps failing (a parent whose document cannot take the list) must
// not hold back the links of the others. It returns how many it linked.
func (c *Client) linkEach(ctx context.Context, ds []dependent) (int, error) {
	if len(ds) == 0 {
		return 0, nil
	}
	err := c.link(ctx, ds)
	if err == nil {
		return len(ds), nil
	}
	if len(ds) == 1 || ctx.Err() != nil {
		return 0, err
	}
	linked, failed := 0, 0
	var first error
	for _, d := range ds {
		if ctx.Err() != nil {
			break
		}
		if err := c.link(ctx, []dependent{d}); err != nil {
			failed++
			first = cmp.Or(first, err)
			c.log.Warn("a blocked job could not be linked to its parents; left linking for the next pass",
				zap.Any("job_id", asID(d.id)), zap.Error(err))
			continue
		}
		linked++
	}
	if first != nil {
		return linked, fmt.Errorf("queue: %d of %d links failed, left linking; the first: %w", failed, len(ds), first)
	}
	return linked, ctx.Err()
}

// readLinking reads up to limit blocked jobs linking since before cutoff:
// ds to link, bad those whose parents cannot be read, and fills the writes
// that complete the ones written with after or waitingOn alone.
func (c *Client) readLinking(ctx context.Context, cutoff time.Time, limit int) (ds []dependent, bad []bson.Raw, fills []mongo.WriteModel, err error) {
	cur, err := c.coll.Find(ctx, bson.D{
		{Key: linkingField, Value: true},
		{Key: "state", Value: jobs.StateBlocked},
		// Missing or of another type counts as old.
		{Key: "updatedAt", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gt", Value: cutoff}}}}},
	}, options.Find().SetLimit(int64(limit)).SetProjection(bson.D{
		{Key: afterField, Value: 1}, {Key: waitingOnField, Value: 1}, {Key: runAnywayField, Value: 1},
		{Key: workflowField, Value: 1},
	}))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("queue: find blocked jobs left linking: %w", err)
	}
	err = store.EachRaw(ctx, cur, func(d bson.Raw) error {
		dep, fill, ok := readDependent(d)
		switch {
		case !ok:
			bad = append(bad, d)
		case fill != nil:
			fills = append(fills, mongo.NewUpdateOneModel().SetFilter(bson.D{
				{Key: "_id", Value: dep.id}, {Key: "state", Value: jobs.StateBlocked}, {Key: fill[0].Key, Value: nil},
			}).SetUpdate(bson.D{{Key: "$set", Value: fill}}))
			fallthrough
		default:
			ds = append(ds, dep)
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("queue: find blocked jobs left linking: %w", err)
	}
	return ds, bad, fills, nil
}

// readDependent reads a blocked job's parents from d: waitingOn and
// after, arrays of non-empty strings, the first within the second, one of
// them missing or null standing for the other; runAnyway a boolean or
// missing. ok is false when they are not so (another app wrote them).
// fill is the $set that writes the one that stands for the other.
func readDependent(d bson.Raw) (dep dependent, fill bson.D, ok bool) {
	dep.id = d.Lookup("_id")
	read := func(field string) ([]string, bool, bool) {
		v, err := d.LookupErr(field)
		if err != nil || v.Type == bson.TypeNull {
			return nil, false, true
		}
		ids, ok := stringIDs(v)
		return ids, true, ok
	}
	waiting, hasWaiting, okWaiting := read(waitingOnField)
	after, hasAfter, okAfter := read(afterField)
	switch {
	case !okWaiting || !okAfter || (!hasWaiting && !hasAfter):
		return dep, nil, false
	case !hasWaiting:
		waiting = after
		fill = bson.D{{Key: waitingOnField, Value: after}}
	case !hasAfter:
		after = waiting
		fill = bson.D{{Key: afterField, Value: waiting}}
	}
	for _, p := range waiting {
		if !slices.Contains(after, p) {
			return dep, nil, false
		}
	}
	dep.waitingOn = waiting
	dep.gate, _ = d.Lookup(workflowField).StringValueOK() // of another type: no gate
	if r, err := d.LookupErr(runAnywayField); err == nil && r.Type != bson.TypeNull {
		b, ok := r.BooleanOK()
		if !ok {
			return dep, nil, false
		}
		dep.runAnyway = b
	}
	return dep, fill, true
}

// stringIDs reads v as an array of non-empty strings.
func stringIDs(v bson.RawValue) ([]string, bool) {
	arr, ok := v.ArrayOK()
	if !ok {
		return nil, false
	}
	vals, err := arr.Values()
	if err != nil {
		return nil, false
	}
	out := make([]string, 0, len(vals))
	for _, e := range vals {
		s, ok := e.StringValueOK()
		if !ok || s == "" {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// buryBlocked ends dead the blocked job d, whose parents cannot be read,
// saying why; conditioned on it still being blocked and linking.
func (c *Client) buryBlocked(ctx context.Context, d bson.Raw, t time.Time) error {
	id := d.Lookup("_id")
	why := fmt.Sprintf("dead: a blocked job must name its parents in %s and %s (or one of them) as arrays of job ids (strings), the first within the second, and %s must be true, false or missing; found %s %s, %s %s, %s %s",
		afterField, waitingOnField, runAnywayField,
		waitingOnField, shown(d, waitingOnField), afterField, shown(d, afterField), runAnywayField, shown(d, runAnywayField))
	filter := bson.D{{Key: "_id", Value: id}, {Key: "state", Value: jobs.StateBlocked}, {Key: linkingField, Value: true}}
	update := store.AlsoIn(store.Finish(jobs.StateDead, t, bson.E{Key: "errors", Value: bson.A{jobs.AttemptError{At: t, Message: why}}}), "$unset", bson.E{Key: linkingField, Value: ""})
	if _, err := c.coll.UpdateOne(ctx, filter, update); err != nil {
		return fmt.Errorf("queue: bury blocked job %v: %w", id, err)
	}
	c.log.Warn("a blocked job's parents cannot be read; it is dead", zap.Any("job_id", asID(id)), zap.String("why", why))
	return nil
}

// shown is field of d as extended JSON, or "missing".
func shown(d bson.Raw, field string) string {
	v, err := d.LookupErr(field)
	if err != nil {
		return "missing"
	}
	return v.String()
}
