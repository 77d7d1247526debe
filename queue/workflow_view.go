package queue

// The operator's view of a workflow (docketctl workflow, the dashboard's
// workflow page): the tasks of a workflow, or the graph of jobs a job is
// part of through after, in an order parents come before dependents.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The fields a workflow builder stamps on each of its tasks: the
// workflow's id and the task's name in it.
const (
	workflowField     = WorkflowField
	workflowTaskField = WorkflowTaskField
)

// workflowScanFactor bounds a job's graph: WorkflowTasks walks at most
// this many times limit jobs (ids and parents only) to count what it
// leaves out.
const workflowScanFactor = 10

// WorkflowView is what WorkflowTasks read: the tasks of a workflow, or the
// graph of a job.
type WorkflowView struct {
	// Workflow is the workflow's id when the id named a workflow; "" when
	// it named a job.
	Workflow string
	// Job is the job whose graph this is, when the id named a job.
	Job JobID
	// Tasks are the jobs shown: parents before their dependents, ties by
	// creation (then id).
	Tasks []WorkflowTask
	// Gate is set when Tasks hold, beside the workflow's tasks, the job
	// whose id is the workflow's (the builder's gate, whose success
	// publishes the workflow).
	Gate bool
	// LeftOut is how many more jobs belong and are not shown; with
	// AtLeast, the walk stopped before it found them all.
	LeftOut int
	AtLeast bool
}

// WorkflowTask is one job of a WorkflowView, read field by field: any field
// of a document another application wrote may be missing or of another
// type.
type WorkflowTask struct {
	JobSummary
	// Name is its workflowTask, when a string.
	Name string
	// Workflow is its workflow field, when a string.
	Workflow string
	// After are its parents, as stored (of any type, in a document
	// another application wrote); nil when after is not an array.
	After []JobID
	// WaitingOn are the parents a blocked job still waits for.
	WaitingOn []JobID
	// RunAnyway is its runAnyway.
	RunAnyway bool
	// Cancelled is, for a job a parent cancelled, the message saying
	// which parent and how it ended.
	Cancelled string
	// ResultBytes is the size of its result document; HasResult says it
	// has one (a document: another type is not a result).
	ResultBytes int
	HasResult   bool
}

// workflowProjection are the fields a WorkflowTask is read from: not the
// args, which can be large.
var workflowProjection = bson.D{
	{Key: "kind", Value: 1}, {Key: "queue", Value: 1}, {Key: "state", Value: 1}, {Key: "attempt", Value: 1}, {Key: "maxAttempts", Value: 1},
	{Key: "createdAt", Value: 1}, {Key: "updatedAt", Value: 1}, {Key: "errors", Value: 1}, {Key: "result", Value: 1},
	{Key: afterField, Value: 1}, {Key: waitingOnField, Value: 1}, {Key: runAnywayField, Value: 1},
	{Key: workflowField, Value: 1}, {Key: workflowTaskField, Value: 1},
}

// WorkflowTasks reads, for id, the tasks of the workflow it names (the jobs
// whose workflow field is id, a string), or, when no job carries that
// workflow, the graph of the job it names: the job and every job
// connected to it through after (its parents and dependents, theirs, and
// so on). At most limit jobs are read (the first created of a
// workflow; of a graph, those nearest the job); the view says how many it
// left out. ErrNotFound: id names neither.
func (c *Client) WorkflowTasks(ctx context.Context, id JobID, limit int) (WorkflowView, error) {
	if limit < 1 {
		return WorkflowView{}, fmt.Errorf("queue: workflow %s: limit %d is not positive", id, limit)
	}
	if s, ok := id.StringID(); ok {
		v, found, err := c.workflowByName(ctx, s, limit)
		if err != nil || found {
			return v, err
		}
	}
	return c.workflowOfJob(ctx, id, limit)
}

// workflowByName reads the tasks of the workflow named wf.
func (c *Client) workflowByName(ctx context.Context, wf string, limit int) (WorkflowView, bool, error) {
	filter := bson.D{{Key: workflowField, Value: wf}}
	cur, err := c.coll.Find(ctx, filter, options.Find().SetProjection(workflowProjection).
		SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).SetLimit(int64(limit)+1))
	if err != nil {
		return WorkflowView{}, false, fmt.Errorf("queue: read workflow %q: %w", wf, err)
	}
	var tasks []WorkflowTask
	err = eachRaw(ctx, cur, func(d bson.Raw) error {
		tasks = append(tasks, readWorkflowTask(slices.Clone(d)))
		return nil
	})
	if err != nil {
		return WorkflowView{}, false, fmt.Errorf("queue: read workflow %q: %w", wf, err)
	}
	if len(tasks) == 0 {
		return WorkflowView{}, false, nil
	}
	v := WorkflowView{Workflow: wf}
	if len(tasks) > limit {
		tasks = tasks[:limit]
		n, err := c.coll.CountDocuments(ctx, filter)
		if err != nil {
			return WorkflowView{}, false, fmt.Errorf("queue: count the tasks of workflow %q: %w", wf, err)
		}
		v.LeftOut = max(int(n)-limit, 1)
	}
	// The job whose id is the workflow's, when it is not a task: the
	// builder's gate, which its tasks wait for and whose success publishes
	// the workflow. Listed with them, it says whether the workflow was
	// published (or cancelled before).
	raw, err := c.coll.FindOne(ctx, bson.D{{Key: "_id", Value: wf}}, options.FindOne().SetProjection(workflowProjection)).Raw()
	switch {
	case err == nil:
		if gate := readWorkflowTask(slices.Clone(raw)); gate.Workflow != wf {
			v.Gate = true
			tasks = append(tasks, gate)
		}
	case !errors.Is(err, mongo.ErrNoDocuments):
		return WorkflowView{}, false, fmt.Errorf("queue: read workflow %q: %w", wf, err)
	}
	v.Tasks = topoOrder(tasks)
	return v, true, nil
}

// workflowOfJob reads the graph of the job id: a walk over ids and
// parents first, up through after and down through the after index, of
// at most workflowScanFactor × limit jobs, then the limit nearest the job
// read whole.
func (c *Client) workflowOfJob(ctx context.Context, id JobID, limit int) (WorkflowView, error) {
	scanCap := limit * workflowScanFactor
	type node struct {
		v     bson.RawValue
		after []JobID
	}
	var order []node // in the order found: nearest first
	seen := map[string]bool{}
	read := func(filter bson.D) ([]node, error) {
		cur, err := c.coll.Find(ctx, filter, options.Find().SetProjection(bson.D{{Key: afterField, Value: 1}}).
			SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(scanCap+1)))
		if err != nil {
			return nil, err
		}
		var out []node
		err = eachRaw(ctx, cur, func(d bson.Raw) error {
			out = append(out, node{v: JobIDOf(d).v, after: anyIDs(d.Lookup(afterField))})
			return nil
		})
		return out, err
	}
	first, err := read(bson.D{{Key: "_id", Value: id.v}})
	if err != nil {
		return WorkflowView{}, fmt.Errorf("queue: read the graph of job %s: %w", id, err)
	}
	if len(first) == 0 {
		return WorkflowView{}, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	frontier := first
	seen[idKey(first[0].v)] = true
	order = append(order, first[0])
	atLeast := false
	for len(frontier) > 0 && !atLeast {
		var up, down bson.A
		for _, n := range frontier {
			down = append(down, n.v)
			for _, p := range n.after {
				if !seen[idKey(p.v)] {
					up = append(up, p.v)
				}
			}
		}
		var found []node
		for _, step := range []struct {
			field string
			ids   bson.A
		}{{"_id", up}, {afterField, down}} { // the parents, then the dependents
			if len(step.ids) == 0 {
				continue
			}
			ns, err := read(bson.D{{Key: step.field, Value: bson.D{{Key: "$in", Value: step.ids}}}})
			if err != nil {
				return WorkflowView{}, fmt.Errorf("queue: read the graph of job %s: %w", id, err)
			}
			found = append(found, ns...)
		}
		frontier = frontier[:0:0]
		for _, n := range found {
			if seen[idKey(n.v)] {
				continue
			}
			if len(order) >= scanCap {
				atLeast = true
				break
			}
			seen[idKey(n.v)] = true
			order = append(order, n)
			frontier = append(frontier, n)
		}
	}
	v := WorkflowView{Job: id, AtLeast: atLeast}
	if len(order) > limit {
		v.LeftOut = len(order) - limit
		order = order[:limit]
	}
	ids := make(bson.A, len(order))
	for i, n := range order {
		ids[i] = n.v
	}
	cur, err := c.coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, options.Find().SetProjection(workflowProjection))
	if err != nil {
		return WorkflowView{}, fmt.Errorf("queue: read the graph of job %s: %w", id, err)
	}
	var tasks []WorkflowTask
	err = eachRaw(ctx, cur, func(d bson.Raw) error {
		tasks = append(tasks, readWorkflowTask(slices.Clone(d)))
		return nil
	})
	if err != nil {
		return WorkflowView{}, fmt.Errorf("queue: read the graph of job %s: %w", id, err)
	}
	v.Tasks = topoOrder(tasks)
	return v, nil
}

// readWorkflowTask reads a WorkflowTask from a stored job document.
func readWorkflowTask(d bson.Raw) WorkflowTask {
	t := WorkflowTask{JobSummary: Summarize(d)}
	t.Name, _ = d.Lookup(workflowTaskField).StringValueOK()
	t.Workflow, _ = d.Lookup(workflowField).StringValueOK()
	t.After = anyIDs(d.Lookup(afterField))
	if t.State == jobs.StateBlocked { // a job that has left blocked waits for nothing
		t.WaitingOn = anyIDs(d.Lookup(waitingOnField))
	}
	t.RunAnyway, _ = d.Lookup(runAnywayField).BooleanOK()
	if r, ok := d.Lookup("result").DocumentOK(); ok {
		t.HasResult, t.ResultBytes = true, len(r)
	}
	if t.State == jobs.StateCancelled {
		if errs, ok := d.Lookup("errors").ArrayOK(); ok {
			vals, _ := errs.Values()
			for i := len(vals) - 1; i >= 0; i-- {
				doc, _ := vals[i].DocumentOK()
				if m, _ := doc.Lookup("message").StringValueOK(); strings.HasPrefix(m, "cancelled: parent ") {
					t.Cancelled = m
					break
				}
			}
		}
	}
	return t
}

// anyIDs are the values of the array v, as ids of any type; nil when v is
// not an array.
func anyIDs(v bson.RawValue) []JobID {
	arr, ok := v.ArrayOK()
	if !ok {
		return nil
	}
	vals, _ := arr.Values()
	out := make([]JobID, 0, len(vals))
	for _, e := range vals {
		out = append(out, JobID{bson.RawValue{Type: e.Type, Value: slices.Clone(e.Value)}})
	}
	return out
}

// idKey is a map key for the id v, of its type.
func idKey(v bson.RawValue) string { return string([]byte{byte(v.Type)}) + string(v.Value) }

// topoOrder orders tasks so that every parent among them comes before its
// dependents, ties (jobs ready at once) by creation then id. Jobs of a
// cycle, which only another application can write, follow in the same
// order of creation.
func topoOrder(tasks []WorkflowTask) []WorkflowTask {
	byCreation := func(a, b WorkflowTask) int {
		// A job without a createdAt (another application's) after the
		// others.
		if a.CreatedAt.IsZero() != b.CreatedAt.IsZero() {
			if a.CreatedAt.IsZero() {
				return 1
			}
			return -1
		}
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.JobID.Token(), b.JobID.Token())
	}
	slices.SortStableFunc(tasks, byCreation)
	index := make(map[string]int, len(tasks)) // by idKey
	for i, t := range tasks {
		index[idKey(t.JobID.v)] = i
	}
	waits := make([]int, len(tasks))
	children := make([][]int, len(tasks))
	for i, t := range tasks {
		seen := map[int]bool{}
		for _, p := range t.After {
			if j, ok := index[idKey(p.v)]; ok && j != i && !seen[j] {
				seen[j] = true
				waits[i]++
				children[j] = append(children[j], i)
			}
		}
	}
	// Always take the earliest created ready task: len(tasks) is bounded
	// by a page, so a scan per step is cheap enough.
	out := make([]WorkflowTask, 0, len(tasks))
	done := make([]bool, len(tasks))
	for len(out) < len(tasks) {
		next := -1
		for i := range tasks {
			if !done[i] && waits[i] == 0 {
				next = i
				break
			}
		}
		if next < 0 { // a cycle: the earliest left
			for i := range tasks {
				if !done[i] {
					next = i
					break
				}
			}
		}
		done[next] = true
		out = append(out, tasks[next])
		for _, ch := range children[next] {
			waits[ch]--
		}
	}
	return out
}
