package docket

import (
	"context"
	"fmt"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
)

// TaskOpts are the options of one task of a workflow: the names of the
// tasks it runs after, and its queue, priority and attempts; see
// queue.TaskOpts. Fields left zero take the args' InsertOpts(), as
// InsertOpts do.
type TaskOpts = queue.TaskOpts

// WorkflowResult says what InsertWorkflow did: the workflow's id and its
// tasks' job ids by name.
type WorkflowResult = queue.WorkflowResult

// WorkflowCancelResult counts what WorkflowCancel did.
type WorkflowCancelResult = queue.WorkflowCancelResult

// ErrWorkflowCancelled is wrapped by the error of an InsertWorkflow whose
// workflow was cancelled before it was published (by WorkflowCancel, or by
// the leader after its builder stopped for ten minutes):
// none of its tasks runs.
var ErrWorkflowCancelled = queue.ErrWorkflowCancelled

// ErrWorkflowIDTaken is wrapped by the error of an InsertWorkflow whose id,
// or a task's id, a job outside that workflow holds.
var ErrWorkflowIDTaken = queue.ErrWorkflowIDTaken

// Workflow is a named set of tasks with dependencies, inserted by
// InsertWorkflow so that either every task becomes runnable or none does.
// See docs/WORKFLOWS.md.
type Workflow struct {
	id    string
	tasks []workflowTask
}

type workflowTask struct {
	name string
	args jobs.Args
	opts TaskOpts
}

// NewWorkflow returns an empty workflow with id: give one of your own to
// make InsertWorkflow safe to retry after any error (empty: a new UUIDv7).
func NewWorkflow(id string) *Workflow { return &Workflow{id: id} }

// Add adds a task named name that runs the job args describes, after the
// tasks opts.After names, and returns name for other tasks' After.
func (w *Workflow) Add(name string, args jobs.Args, opts *TaskOpts) string {
	var o TaskOpts
	if opts != nil {
		o = *opts
	}
	w.tasks = append(w.tasks, workflowTask{name: name, args: args, opts: o})
	return name
}

// InsertWorkflow inserts the workflow w, every task unpublished, then
// publishes it with one write: no task runs unless all are in. Every task
// is checked first, its args with their Validate too (see Insert): a
// workflow with an invalid task is refused whole, nothing written. After an
// error, calling it again with the same workflow (and id) finishes what
// the first call started; a workflow left unpublished is cancelled by the
// leader after ten minutes.
func (c *Client) InsertWorkflow(ctx context.Context, w *Workflow) (WorkflowResult, error) {
	qw := queue.NewWorkflow(w.id)
	for i, task := range w.tasks {
		if err := validateArgs(i, task.args); err != nil {
			return WorkflowResult{}, err
		}
		o := InsertOptsFor(task.args, InsertOpts{Queue: task.opts.Queue, Priority: task.opts.Priority, MaxAttempts: task.opts.MaxAttempts})
		opts := task.opts
		opts.Queue, opts.Priority, opts.MaxAttempts = o.Queue, o.Priority, o.MaxAttempts
		qw.Add(task.name, task.args.Kind(), task.args, opts)
	}
	res, err := c.q.InsertWorkflow(ctx, qw)
	if res.ID != "" {
		w.id = res.ID // a retry inserts the same workflow
	}
	if err != nil {
		return res, fmt.Errorf("docket: %w", err)
	}
	return res, nil
}

// WorkflowCancel cancels the tasks of the workflow with id that have not
// run: all of them when it is not published yet; the blocked and
// available ones otherwise, running ones being left to finish.
func (c *Client) WorkflowCancel(ctx context.Context, id string) (WorkflowCancelResult, error) {
	res, err := c.q.CancelWorkflow(ctx, id)
	return res, engineErr(err)
}
