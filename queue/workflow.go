package queue

// Workflows: a named set of tasks with dependencies, inserted together,
// of which either every task becomes runnable or none does
// (docs/WORKFLOWS.md), without a transaction.
//
// A workflow is a gate and its tasks. The gate is a job document of kind
// WorkflowGateKind whose _id is the workflow's id, inserted first, blocked
// (no claim matches it) and with dependents: true. Every task is inserted
// blocked, waiting for the gate as well as for its parents among the
// tasks, by the dependency protocol (deps.go). Publishing is one write,
// last: the gate's finishing write, succeeded, conditioned on it still
// being blocked. Its settle then lets the tasks stop waiting for it, and
// those without parents run.
//
// A gate that ends otherwise (cancelled: by CancelWorkflow, or by the
// leader's pass, SweepWorkflows, once it has waited unpublished for longer
// than a grace) cancels every task that waits for it, those that run
// anyway too (the gate rule in settle and link): no task of a workflow
// that was not published ever runs, whatever stopped where, and the
// dependency protocol's passes finish whatever a stopped builder left.
// InsertWorkflow called again with the same id resumes a builder that
// stopped: it finds what is there (a task's id is the workflow's id and
// the task's name), inserts the rest and publishes the gate.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// The fields a workflow's tasks carry, for anyone listing a workflow: the
// workflow's id and the task's name in it, both strings.
const (
	workflowField     = "workflow"
	workflowTaskField = "workflowTask"
)

// WorkflowGateKind is the kind of a workflow's gate: the job document,
// with the workflow's id as its _id, that every task of the workflow waits
// for, and whose success publishes it. No handler runs it: it is never
// claimable.
const WorkflowGateKind = "docket.workflow"

// WorkflowGateQueue is the queue of the workflows' gates, so that they
// count against no queue of the application's: docketctl stats shows
// unpublished workflows as its blocked jobs.
const WorkflowGateQueue = "docket.workflows"

// DefaultWorkflowGrace is how long a workflow's gate may stay unpublished
// (its builder between the gate's insert and the publish) before the
// leader's pass cancels it, and so every task inserted for it.
const DefaultWorkflowGrace = 10 * time.Minute

// workflowChunk is how many tasks InsertWorkflow enqueues at a time,
// refreshing its gate's updatedAt between them.
const workflowChunk = 1000

// TaskSeparator joins a workflow's id and a task's name into the task's
// job id.
const TaskSeparator = "/"

// ErrWorkflowCancelled is returned by InsertWorkflow for a workflow whose
// gate was cancelled before it was published (by CancelWorkflow, or by the
// leader's pass after DefaultWorkflowGrace): none of its tasks runs.
// Insert it again under a new id.
var ErrWorkflowCancelled = errors.New("workflow cancelled before it was published")

// ErrWorkflowIDTaken is returned by InsertWorkflow when its id, or a
// task's id, is held by a job that is not part of that workflow.
var ErrWorkflowIDTaken = errors.New("id held by a job of another kind or workflow")

// ErrWorkflowGate is the error of Retry for a workflow's gate: a workflow
// is published by its builder only. Insert the workflow again under a
// new id.
var ErrWorkflowGate = errors.New("a workflow's gate is not retried: insert the workflow again under a new id")

// TaskOpts are the options of one task of a workflow.
type TaskOpts struct {
	// After names the tasks of the same workflow this one runs after (its
	// parents). A task without After runs once the workflow is published.
	After []string
	// AfterRunAnyway makes the task run once every parent has finished,
	// however it ended (InsertOpts.AfterRunAnyway). It still never runs
	// when the workflow is cancelled before it is published.
	AfterRunAnyway bool
	// Queue is the task's queue. Defaults to jobs.DefaultQueue.
	Queue string
	// Priority orders claims, higher first. Defaults to 0.
	Priority int
	// Delay makes the task runnable no sooner than this long after it is
	// inserted (and never before its parents succeeded).
	Delay time.Duration
	// MaxAttempts is how many attempts the task gets. Defaults to
	// jobs.DefaultMaxAttempts.
	MaxAttempts int
}

// Workflow is a named set of tasks with dependencies, built with Add and
// inserted, all of it or none, by Client.InsertWorkflow. Not safe for
// concurrent use.
type Workflow struct {
	id    string
	tasks []workflowTask
	names map[string]int
	err   error
}

type workflowTask struct {
	name string
	in   Insert
	opts TaskOpts
}

// NewWorkflow returns an empty workflow with id. An id of the caller's
// makes InsertWorkflow safe to call again after any error: what the
// first call inserted is found, not added twice. An empty id gets a new
// UUIDv7 at the insert (WorkflowResult.ID). At most jobs.MaxNameBytes,
// with room for the tasks' names (TaskID).
func NewWorkflow(id string) *Workflow {
	return &Workflow{id: id, names: map[string]int{}}
}

// ID is the workflow's id, empty until InsertWorkflow gives it one when
// NewWorkflow was given none.
func (w *Workflow) ID() string { return w.id }

// Add adds a task named name (unique in the workflow) that runs a job of
// kind with args, and returns name, to be named in other tasks' After. A
// mistake (a name added twice, an empty one) is reported by
// InsertWorkflow, which then writes nothing.
func (w *Workflow) Add(name, kind string, args any, opts TaskOpts) string {
	if w.err != nil {
		return name
	}
	if p := jobs.NameProblem(name, jobs.MaxNameBytes); p != "" {
		w.err = &ValidationError{Index: len(w.tasks), Field: "name", Reason: p}
		return name
	}
	if _, dup := w.names[name]; dup {
		w.err = &ValidationError{Index: len(w.tasks), Field: "name", Reason: fmt.Sprintf("task %q is added twice", name)}
		return name
	}
	w.names[name] = len(w.tasks)
	w.tasks = append(w.tasks, workflowTask{name: name, in: Insert{Kind: kind, Args: args}, opts: opts})
	return name
}

// TaskID is the job id of the task named name in the workflow with id.
func TaskID(workflowID, name string) string { return workflowID + TaskSeparator + name }

// WorkflowResult says what InsertWorkflow did.
type WorkflowResult struct {
	// ID is the workflow's id: the gate's job id, and the value of every
	// task's workflow field.
	ID string
	// Tasks maps each task's name to its job id.
	Tasks map[string]string
	// Existed is true when the workflow had already been published, by an
	// earlier call whose reply was lost: nothing was written.
	Existed bool
}

// workflowTagKey is the context key of the workflow fields that the
// inserts of an EnqueueMany add to its jobs, by job id.
type workflowTagKey struct{}

// workflowTag is what a task's document carries besides a job's fields:
// also Dependents, the tasks that wait for it, inserted as its list of
// dependents (depslist.go) when there are some and not too many.
type workflowTag struct {
	Workflow, WorkflowTask string
	Dependents             []string
}

// tagged is a task's document as inserted: doc (a *jobs.Job, or a
// slotted job of a bounded queue) with its workflow's fields (exported:
// the driver encodes no unexported field, embedded or not).
type tagged[D any] struct {
	Doc          D        `bson:",inline"`
	Workflow     string   `bson:"workflow"`
	WorkflowTask string   `bson:"workflowTask"`
	DependentIDs []string `bson:"dependentIds,omitempty"`
}

// insertDoc is what the insert of doc, the job with id, sends under ctx:
// doc, with its workflow's fields when ctx tags it.
func insertDoc[D any](ctx context.Context, id string, doc D) any {
	tags, _ := ctx.Value(workflowTagKey{}).(map[string]workflowTag)
	if tag, ok := tags[id]; ok {
		return tagged[D]{Doc: doc, Workflow: tag.Workflow, WorkflowTask: tag.WorkflowTask, DependentIDs: tag.Dependents}
	}
	return doc
}

// workflowStepKey is the context key of a test's hook that runs after
// each write of InsertWorkflow ("gate", "tasks", "publish"); an error it
// returns stops the insert there, as if its process had died.
type workflowStepKey struct{}

func workflowStep(ctx context.Context, step string) error {
	if hook, ok := ctx.Value(workflowStepKey{}).(func(context.Context, string) error); ok {
		return hook(ctx, step)
	}
	return nil
}

// plan validates w and returns its tasks as inserts in an order where
// every task comes after its parents, each waiting for the gate too.
func (w *Workflow) plan(id string, t time.Time) ([]Insert, map[string]workflowTag, error) {
	if err := w.check(id); err != nil {
		return nil, nil, err
	}
	order, err := w.order()
	if err != nil {
		return nil, nil, err
	}
	ins := make([]Insert, 0, len(order))
	tags := make(map[string]workflowTag, len(order))
	children := w.children(id)
	for _, i := range order {
		task := w.tasks[i]
		after := make([]string, 0, len(task.opts.After)+1)
		after = append(after, id)
		for _, p := range task.opts.After {
			after = append(after, TaskID(id, p))
		}
		taskID := TaskID(id, task.name)
		in := task.in
		in.Opts = InsertOpts{
			ID: taskID, Queue: task.opts.Queue, Priority: task.opts.Priority, Delay: task.opts.Delay,
			MaxAttempts: task.opts.MaxAttempts, After: after, AfterRunAnyway: task.opts.AfterRunAnyway,
		}
		if _, err := NewJob(in, t); err != nil {
			var ve *ValidationError
			if errors.As(err, &ve) {
				ve.Index = i
				ve.Field = fmt.Sprintf("task %q: %s", task.name, ve.Field)
			}
			return nil, nil, err
		}
		ins = append(ins, in)
		tags[taskID] = workflowTag{Workflow: id, WorkflowTask: task.name, Dependents: children[i]}
	}
	return ins, tags, nil
}

// children returns, by task index, the ids of the tasks of the workflow
// with id that wait for each, none for a task with more than
// maxListedDependents (its links list them, depslist.go).
func (w *Workflow) children(id string) [][]string {
	out := make([][]string, len(w.tasks))
	for _, task := range w.tasks {
		for _, p := range task.opts.After {
			out[w.names[p]] = append(out[w.names[p]], TaskID(id, task.name))
		}
	}
	for i, kids := range out {
		if len(kids) > maxListedDependents {
			out[i] = nil
		}
	}
	return out
}

// check checks the workflow's id, and that its tasks are some and wait
// for tasks of its own, each for at most MaxAfter-1 (the gate is one more).
func (w *Workflow) check(id string) error {
	if w.err != nil {
		return w.err
	}
	if p := jobs.NameProblem(id, jobs.MaxNameBytes); p != "" {
		return &ValidationError{Index: -1, Field: "workflow id", Reason: p}
	}
	if len(w.tasks) == 0 {
		return &ValidationError{Index: -1, Field: "tasks", Reason: "a workflow needs at least one task"}
	}
	for i, task := range w.tasks {
		if len(task.opts.After)+1 > MaxAfter {
			return &ValidationError{Index: i, Field: "after", Reason: fmt.Sprintf("%d parents is over the limit of %d (one more is the workflow's gate)", len(task.opts.After), MaxAfter-1)}
		}
		for _, p := range task.opts.After {
			if _, ok := w.names[p]; !ok {
				return &ValidationError{Index: i, Field: "after", Reason: fmt.Sprintf("task %q: %q is not a task of the workflow", task.name, p)}
			}
		}
	}
	return nil
}

// order returns the tasks' indexes parents first (Kahn's algorithm, stable
// in the order of Add), or the error naming a task in a cycle.
func (w *Workflow) order() ([]int, error) {
	indegree := make([]int, len(w.tasks))
	children := make([][]int, len(w.tasks))
	for i, task := range w.tasks {
		for _, p := range task.opts.After {
			indegree[i]++
			children[w.names[p]] = append(children[w.names[p]], i)
		}
	}
	var order, ready []int
	for i := range w.tasks {
		if indegree[i] == 0 {
			ready = append(ready, i)
		}
	}
	for len(ready) > 0 {
		i := ready[0]
		ready = ready[1:]
		order = append(order, i)
		for _, c := range children[i] {
			if indegree[c]--; indegree[c] == 0 {
				ready = append(ready, c)
			}
		}
	}
	for i := range w.tasks {
		if indegree[i] > 0 {
			return nil, &ValidationError{Index: i, Field: "after", Reason: fmt.Sprintf("task %q is in a cycle", w.tasks[i].name)}
		}
	}
	return order, nil
}

// InsertWorkflow inserts the workflow w: its gate, then every task
// unpublished (blocked, waiting for the gate), then publishes it with one
// write, after which the tasks run as their dependencies allow. Until
// that write no task can run; a builder that stops before it leaves
// nothing runnable, and either a call of InsertWorkflow again with the
// same id finishes it, or the leader's pass cancels it after
// DefaultWorkflowGrace (ErrWorkflowCancelled for a call that comes later).
// Safe to call again after any error, with the same id: a workflow
// already published is reported Existed.
//
// An invalid workflow (a cycle, a parent that is not a task, a task an
// enqueue would refuse) is a *ValidationError, and nothing is written.
func (c *Client) InsertWorkflow(ctx context.Context, w *Workflow) (WorkflowResult, error) {
	t := c.now()
	if w.id == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return WorkflowResult{}, fmt.Errorf("queue: new workflow id: %w", err)
		}
		w.id = u.String()
	}
	id := w.id
	ins, tags, err := w.plan(id, t)
	if err != nil {
		return WorkflowResult{}, err
	}
	res := WorkflowResult{ID: id, Tasks: make(map[string]string, len(tags))}
	for taskID, tag := range tags {
		res.Tasks[tag.WorkflowTask] = taskID
	}
	pre := &prelisted{ids: map[string]bool{}}
	ctx = context.WithValue(ctx, prelistedKey{}, pre)
	st, err := c.insertGate(ctx, id, t, slices.Collect(maps.Values(res.Tasks)))
	if err != nil {
		return res, err
	}
	switch {
	case st == jobs.StateSucceeded:
		// Published by an earlier call, after every task was in; its
		// settle may not have run (else this finds nothing due).
		res.Existed = true
		c.settleNow(ctx, id)
		return res, nil
	case st != jobs.StateBlocked:
		return res, fmt.Errorf("queue: insert workflow %s: %w (its gate is %s)", id, ErrWorkflowCancelled, st)
	}
	if err := workflowStep(ctx, "gate"); err != nil {
		return res, err
	}
	results, err := c.insertTasks(context.WithValue(ctx, workflowTagKey{}, tags), id, ins)
	if err != nil {
		return res, err
	}
	if err := c.checkFoundTasks(ctx, id, ins, results); err != nil {
		return res, err
	}
	if err := workflowStep(ctx, "tasks"); err != nil {
		return res, err
	}
	if err := c.publish(ctx, id); err != nil {
		return res, err
	}
	if err := workflowStep(ctx, "publish"); err != nil {
		return res, err
	}
	c.settleNow(ctx, id)
	return res, nil
}

// insertTasks inserts the workflow's tasks, in chunks. A long insert keeps
// its gate young between chunks, so that the leader's pass does not cancel
// a builder that is making progress; a gate cancelled meanwhile stops it.
func (c *Client) insertTasks(ctx context.Context, id string, ins []Insert) ([]Result, error) {
	results := make([]Result, 0, len(ins))
	for lo := 0; lo < len(ins); lo += workflowChunk {
		if lo > 0 {
			r, err := c.coll.UpdateOne(ctx, gateFilter(id), bson.D{{Key: "$set", Value: bson.D{{Key: "updatedAt", Value: c.now()}}}})
			if err != nil {
				return nil, fmt.Errorf("queue: insert workflow %s: %w", id, err)
			}
			if r.MatchedCount == 0 {
				return nil, fmt.Errorf("queue: insert workflow %s: %w (while its tasks were inserted)", id, ErrWorkflowCancelled)
			}
		}
		rs, err := c.EnqueueMany(ctx, ins[lo:min(lo+workflowChunk, len(ins))])
		if err != nil {
			return nil, fmt.Errorf("queue: insert workflow %s: its tasks (it is not published; insert it again with the same id): %w", id, err)
		}
		results = append(results, rs...)
	}
	return results, nil
}

// checkFoundTasks checks the tasks an insert found there (results say
// which). They are an earlier call's, which must still be waiting (one
// that is not was cancelled, with the workflow by the sweep, or on its
// own: publishing would run the others), or jobs of someone else's holding
// the ids, which would not be gated. Either way the workflow is not
// published, and its gate is cancelled, with the tasks inserted here.
func (c *Client) checkFoundTasks(ctx context.Context, id string, ins []Insert, results []Result) error {
	var existed bson.A
	for i, r := range results {
		if r.Existed {
			existed = append(existed, ins[i].Opts.ID)
		}
	}
	if len(existed) == 0 {
		return nil
	}
	foreign, ended, err := c.classifyFound(ctx, id, existed)
	if err != nil {
		return fmt.Errorf("queue: insert workflow %s: check its tasks found inserted: %w", id, err)
	}
	if foreign+ended == 0 {
		return nil
	}
	why := fmt.Sprintf("cancelled: %d of the workflow's task ids are held by other jobs, and %d of its tasks had ended before it was published", foreign, ended)
	if _, err := c.cancelGate(ctx, []any{id}, nil, why); err != nil {
		return fmt.Errorf("queue: insert workflow %s: %s; cancelling it: %w", id, why, err)
	}
	if foreign > 0 {
		return fmt.Errorf("queue: insert workflow %s: %w: %d of its task ids (it is cancelled)", id, ErrWorkflowIDTaken, foreign)
	}
	return fmt.Errorf("queue: insert workflow %s: %w: %d of its tasks had ended", id, ErrWorkflowCancelled, ended)
}

// insertGate inserts the gate of the workflow with id, unpublished, or
// finds it inserted, and returns its state.
func (c *Client) insertGate(ctx context.Context, id string, t time.Time, tasks []string) (jobs.State, error) {
	gate := &jobs.Job{
		ID: id, Kind: WorkflowGateKind, Queue: WorkflowGateQueue, Args: bson.Raw{5, 0, 0, 0, 0},
		State: jobs.StateBlocked, RunAt: t, MaxAttempts: 1, Errors: []jobs.AttemptError{},
		// Its tasks are linked to it: the publish (its finishing write)
		// leaves it due to them whatever their links have done.
		Dependents: true,
		CreatedAt:  t, UpdatedAt: t,
	}
	// With the list of its dependents, the tasks (depslist.go): the
	// publish's settle writes to the tasks by _id. Over the bound, an
	// empty list, which the tasks' links fill up to the bound.
	list := bson.A{}
	if len(tasks) <= maxListedDependents {
		list = bsonA(tasks)
	}
	_, err := c.coll.InsertOne(ctx, listedGate{Job: *gate, DependentIDs: list})
	if err == nil {
		if len(list) > 0 {
			preListed(ctx, id)
		}
		return jobs.StateBlocked, nil
	}
	// Taken, or no answer (it may be in): read what holds the id.
	st, ferr := c.gateState(ctx, id)
	switch {
	case errors.Is(ferr, mongo.ErrNoDocuments):
		return "", fmt.Errorf("queue: insert workflow %s: its gate: %w", id, err)
	case errors.Is(ferr, ErrWorkflowIDTaken):
		return "", fmt.Errorf("queue: insert workflow %s: %w", id, ferr)
	case ferr != nil:
		return "", fmt.Errorf("queue: insert workflow %s: its gate: %w (and reading it: %w)", id, err, ferr)
	}
	if st == jobs.StateBlocked {
		// A builder resuming: the leader's pass gives it a grace of its
		// own from here (a pass that has cancelled it meanwhile wins, and
		// the publish says so).
		if _, err := c.coll.UpdateOne(ctx, gateFilter(id), bson.D{{Key: "$set", Value: bson.D{{Key: "updatedAt", Value: t}}}}); err != nil {
			return "", fmt.Errorf("queue: insert workflow %s: resume it: %w", id, err)
		}
	}
	return st, nil
}

// gateState reads the state of the gate of the workflow with id:
// mongo.ErrNoDocuments when no job has the id, ErrWorkflowIDTaken when a
// job of another kind has it.
func (c *Client) gateState(ctx context.Context, id string) (jobs.State, error) {
	raw, err := c.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}},
		options.FindOne().SetProjection(bson.D{{Key: "kind", Value: 1}, {Key: "state", Value: 1}})).Raw()
	if err != nil {
		return "", err
	}
	if kind, _ := raw.Lookup("kind").StringValueOK(); kind != WorkflowGateKind {
		return "", fmt.Errorf("%w: a job of kind %q has the id", ErrWorkflowIDTaken, kind)
	}
	st, _ := raw.Lookup("state").StringValueOK()
	return jobs.State(st), nil
}

// listedGate is a gate's document as inserted: a job with its list of
// dependents, an array even when empty, which the tasks' links add to.
type listedGate struct {
	jobs.Job     `bson:",inline"`
	DependentIDs bson.A `bson:"dependentIds"`
}

// gateFilter matches the unpublished gate of the workflow with id.
func gateFilter(id any) bson.D {
	return bson.D{{Key: "_id", Value: id}, {Key: "kind", Value: WorkflowGateKind}, {Key: "state", Value: jobs.StateBlocked}}
}

// publish opens the gate of the workflow with id: its finishing write,
// succeeded, which flags it due to its tasks. A gate found succeeded was
// published by an earlier write whose reply was lost.
func (c *Client) publish(ctx context.Context, id string) error {
	r, err := c.coll.UpdateOne(ctx, gateFilter(id), store.Finish(jobs.StateSucceeded, c.now()))
	if err != nil {
		return fmt.Errorf("queue: publish workflow %s: %w", id, err)
	}
	if r.MatchedCount == 1 {
		return nil
	}
	states, _, err := c.statesOf(ctx, bson.A{id})
	if err != nil {
		return fmt.Errorf("queue: publish workflow %s: read its gate: %w", id, err)
	}
	switch st, ok := states[id]; {
	case st == jobs.StateSucceeded:
		return nil
	case !ok:
		return fmt.Errorf("queue: publish workflow %s: its gate is gone (deleted by an operator): %w", id, ErrWorkflowCancelled)
	default:
		return fmt.Errorf("queue: publish workflow %s: %w (its gate is %s)", id, ErrWorkflowCancelled, st)
	}
}

// WorkflowCancelResult counts what CancelWorkflow did.
type WorkflowCancelResult struct {
	// Unpublished is true when the workflow had not been published: its
	// gate was cancelled, and so was every task.
	Unpublished bool
	// Cancelled counts the tasks cancelled (blocked or available, not
	// run yet); with Unpublished, the tasks cancelled with the gate.
	Cancelled int
	// Running counts the tasks left to finish the attempt they run; their
	// dependents among the tasks were cancelled.
	Running int
}

// CancelWorkflow cancels the tasks of the workflow with id that have not
// run: an unpublished workflow is cancelled whole (its gate, and with it
// every task, even those inserted later); in a published one, every
// blocked or available task is cancelled, dependents before their parents,
// each as Cancel does (its cancel hook first), so that no task that runs
// anyway is let run by its parents' cancel. Tasks running are left to
// finish; those that waited for them are cancelled already. Cancelling a
// workflow that has finished, or again, does nothing.
func (c *Client) CancelWorkflow(ctx context.Context, id string) (WorkflowCancelResult, error) {
	var res WorkflowCancelResult
	switch _, err := c.gateState(ctx, id); {
	case errors.Is(err, mongo.ErrNoDocuments):
		// A workflow inserted by another driver, or whose gate retention
		// deleted: its tasks are still found by their workflow field.
	case err != nil:
		return res, fmt.Errorf("queue: cancel workflow %s: %w", id, err)
	default:
		n, err := c.cancelGate(ctx, []any{id}, nil, "cancelled: the workflow was cancelled before it was published")
		if err != nil {
			return res, fmt.Errorf("queue: cancel workflow %s: %w", id, err)
		}
		res.Unpublished = n > 0
	}
	tasks, err := c.workflowTasks(ctx, id)
	if err != nil {
		return res, err
	}
	for _, task := range tasks {
		switch task.state {
		case jobs.StateRunning:
			res.Running++
			continue
		case jobs.StateBlocked, jobs.StateAvailable:
		default:
			continue
		}
		switch out, err := c.CancelJobID(ctx, task.id); {
		case errors.Is(err, ErrFinished), errors.Is(err, ErrNotFound):
		case err != nil:
			return res, fmt.Errorf("queue: cancel workflow %s: %w", id, err)
		case out == Cancelled:
			res.Cancelled++
		case out == CancelRequested:
			// Claimed since it was read: it runs.
			res.Running++
		}
	}
	if res.Unpublished {
		// The tasks the gate's cancel ended (0 when the count fails).
		n, _ := c.coll.CountDocuments(ctx, bson.D{{Key: workflowField, Value: id}, {Key: "state", Value: jobs.StateCancelled}})
		res.Cancelled = int(n)
	}
	return res, nil
}

// classifyFound reads, with one find, the jobs ids that an insert of
// workflow id found already there, and counts those that are not its tasks
// (another job holds the id) and, of its tasks, those no longer blocked.
func (c *Client) classifyFound(ctx context.Context, id string, ids bson.A) (foreign, ended int, err error) {
	cur, err := c.coll.Find(ctx, bson.D{idIn(ids)},
		options.Find().SetProjection(bson.D{{Key: workflowField, Value: 1}, {Key: "state", Value: 1}}))
	if err != nil {
		return 0, 0, err
	}
	err = store.EachRaw(ctx, cur, func(d bson.Raw) error {
		wf, _ := d.Lookup(workflowField).StringValueOK()
		st, _ := d.Lookup("state").StringValueOK()
		switch {
		case wf != id:
			foreign++
		case jobs.State(st) != jobs.StateBlocked:
			ended++
		}
		return nil
	})
	return foreign, ended, err
}

// workflowTaskState is one task as CancelWorkflow reads it.
type workflowTaskState struct {
	id    JobID
	state jobs.State
	depth int
}

// workflowTasks reads the tasks of the workflow with id (by their workflow
// field), deepest first: every task comes before its parents among them.
func (c *Client) workflowTasks(ctx context.Context, id string) ([]workflowTaskState, error) {
	cur, err := c.coll.Find(ctx, bson.D{{Key: workflowField, Value: id}},
		options.Find().SetProjection(bson.D{{Key: "state", Value: 1}, {Key: afterField, Value: 1}, {Key: workflowField, Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("queue: read the tasks of workflow %s: %w", id, err)
	}
	var tasks []workflowTaskState
	parents := map[string][]string{}
	err = store.EachRaw(ctx, cur, func(d bson.Raw) error {
		if wf, ok := d.Lookup(workflowField).StringValueOK(); !ok || wf != id {
			return nil // an array holding id, written by another app: not a task
		}
		st, _ := d.Lookup("state").StringValueOK()
		jid := JobIDOf(d)
		tasks = append(tasks, workflowTaskState{id: jid, state: jobs.State(st)})
		after, _ := stringIDs(d.Lookup(afterField))
		parents[jid.String()] = after
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: read the tasks of workflow %s: %w", id, err)
	}
	// depth: the longest path from a root, bounded by the number of
	// tasks, so that a cycle written by another app ends.
	depth := map[string]int{}
	var walk func(string, int) int
	walk = func(t string, budget int) int {
		if d, ok := depth[t]; ok || budget == 0 {
			return d
		}
		d := 0
		for _, p := range parents[t] {
			if _, ok := parents[p]; ok {
				d = max(d, walk(p, budget-1)+1)
			}
		}
		depth[t] = d
		return d
	}
	for i := range tasks {
		tasks[i].depth = walk(tasks[i].id.String(), len(tasks))
	}
	slices.SortStableFunc(tasks, func(a, b workflowTaskState) int { return b.depth - a.depth })
	return tasks, nil
}

// cancelGate cancels the unpublished gates with ids that still match also
// (the sweep's age), recording why, and settles each: every task waiting
// for it is cancelled. It returns how many this call cancelled.
func (c *Client) cancelGate(ctx context.Context, ids []any, also bson.D, why string) (int, error) {
	n := 0
	for _, id := range ids {
		t := c.now()
		// Conditioned on still being unpublished (and old): a gate
		// published since is left alone.
		e := jobs.AttemptError{At: t, Message: why}
		r, err := c.coll.UpdateOne(ctx, append(gateFilter(id), also...),
			store.Finish(jobs.StateCancelled, t, bson.E{Key: "errors", Value: bson.A{e}}))
		if err != nil {
			return n, fmt.Errorf("cancel workflow %v: %w", asID(id), err)
		}
		if r.MatchedCount == 1 {
			n++
		}
		// Settled whether this write or an earlier one cancelled it.
		if _, err := c.settleDown(ctx, id); err != nil {
			return n, err
		}
	}
	return n, nil
}

// SweepWorkflows is the leader's pass over workflows: it cancels up to
// limit workflows left unpublished for more than grace (by the gate's
// updatedAt), as when their builder stopped between its inserts and the
// publish, and with them every task inserted for them. A builder that
// resumes later gets ErrWorkflowCancelled. Safe to run from many
// processes at once. It returns how many it cancelled.
func (c *Client) SweepWorkflows(ctx context.Context, grace time.Duration, limit int) (int, error) {
	// Missing or of another type counts as old.
	old := bson.E{Key: "updatedAt", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gt", Value: c.now().Add(-grace)}}}}}
	filter := bson.D{{Key: "kind", Value: WorkflowGateKind}, {Key: "state", Value: jobs.StateBlocked}, old}
	ids, err := c.st.IDs(ctx, filter, limit)
	if err != nil {
		return 0, fmt.Errorf("queue: find unpublished workflows: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := c.cancelGate(ctx, ids, bson.D{old},
		fmt.Sprintf("cancelled: the workflow was not published within %s of its last insert (its builder stopped)", grace))
	if n > 0 {
		c.log.Info("cancelled workflows left unpublished", zap.Int("workflows", n), zap.Duration("grace", grace))
	}
	if err != nil {
		return n, fmt.Errorf("queue: %w", err)
	}
	return n, nil
}
