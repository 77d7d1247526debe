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

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// WorkflowPage selects the tasks a WorkflowView holds: Limit of them from
// Offset, in the view's order (a workflow's by creation, a graph's
// nearest the job first), each page then ordered parents first.
type WorkflowPage struct {
	// Offset is how many tasks come before the page.
	Offset int
	// Limit is how many tasks the page holds, at most MaxWorkflowPage.
	Limit int
	// Walk bounds a job's graph: at most this many jobs are walked (ids
	// only). Defaults to 10,000.
	Walk int
}

const (
	// MaxWorkflowPage bounds WorkflowPage.Limit.
	MaxWorkflowPage = 1000
	// defaultWorkflowWalk is how many jobs of a graph WorkflowTasks walks
	// at most.
	defaultWorkflowWalk = 10000
	// maxViewStates bounds the states a view counts apart; jobs in
	// states past it (which only another application can write) are
	// counted under "".
	maxViewStates = 64
)

// WorkflowView is what WorkflowTasks read: a page of the tasks of a
// workflow, or of the graph of a job, and counts of them all.
type WorkflowView struct {
	// Workflow is the workflow's id when the id named a workflow; "" when
	// it named a job.
	Workflow string
	// Job is the job whose graph this is, when the id named a job.
	Job JobID
	// Tasks are the jobs of the page: parents before their dependents,
	// ties by creation (then id).
	Tasks []WorkflowTask
	// Gate is set when Tasks hold, beside the workflow's tasks, the job
	// whose id is the workflow's (the builder's gate, whose success
	// publishes the workflow); it is on the first page alone and not
	// counted in Total or States.
	Gate bool
	// Offset is how many tasks come before the page.
	Offset int
	// Total is how many tasks the workflow has, or jobs the graph; with
	// AtLeast, the walk stopped at WorkflowPage.Walk jobs, and there are
	// more.
	Total   int
	AtLeast bool
	// States counts the Total tasks by state, known states first; a
	// state that is not a string is counted under "", last.
	States []StateCount
}

// StateCount is how many tasks of a view are in one state.
type StateCount struct {
	State jobs.State
	N     int
}

// Shown is how many of the Total tasks the page holds (the gate aside).
func (v WorkflowView) Shown() int {
	if v.Gate {
		return len(v.Tasks) - 1
	}
	return len(v.Tasks)
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
	{Key: workflowField, Value: 1}, {Key: workflowTaskField, Value: 1}, {Key: "progress", Value: 1},
}

// WorkflowTasks reads, for id, a page of the tasks of the workflow it
// names (the jobs whose workflow field is id, a string), or, when no job
// carries that workflow, of the graph of the job it names: the job and
// every job connected to it through after (its parents and dependents,
// theirs, and so on), walked through at most p.Walk jobs. The view counts
// them all by state. ErrNotFound: id names neither.
//
// Its commands are bounded whatever the workflow: each sends at most a
// few hundred ids and reads at most a page of documents; a graph is
// walked by ids, each job asked for once per direction.
func (c *Client) WorkflowTasks(ctx context.Context, id JobID, p WorkflowPage) (WorkflowView, error) {
	if p.Limit < 1 || p.Limit > MaxWorkflowPage || p.Offset < 0 || p.Walk < 0 {
		return WorkflowView{}, fmt.Errorf("queue: workflow %s: page %+v: the limit must be 1 to %d, the offset and walk not negative", id, p, MaxWorkflowPage)
	}
	if p.Walk == 0 {
		p.Walk = defaultWorkflowWalk
	}
	if s, ok := id.StringID(); ok {
		v, found, err := c.workflowByName(ctx, s, p)
		if err != nil || found {
			return v, err
		}
	}
	return c.workflowOfJob(ctx, id, p)
}

// workflowByName reads a page of the tasks of the workflow named wf.
func (c *Client) workflowByName(ctx context.Context, wf string, p WorkflowPage) (WorkflowView, bool, error) {
	filter := bson.D{{Key: workflowField, Value: wf}}
	counts := map[jobs.State]int{}
	if err := c.countStates(ctx, filter, counts); err != nil {
		return WorkflowView{}, false, fmt.Errorf("queue: count the tasks of workflow %q: %w", wf, err)
	}
	v := WorkflowView{Workflow: wf, Offset: p.Offset}
	v.setStates(counts)
	if v.Total == 0 {
		return WorkflowView{}, false, nil
	}
	cur, err := c.coll.Find(ctx, filter, options.Find().SetProjection(workflowProjection).
		SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).SetSkip(int64(p.Offset)).SetLimit(int64(p.Limit)))
	if err != nil {
		return WorkflowView{}, false, fmt.Errorf("queue: read workflow %q: %w", wf, err)
	}
	tasks, err := readWorkflowTasks(ctx, cur, nil)
	if err != nil {
		return WorkflowView{}, false, fmt.Errorf("queue: read workflow %q: %w", wf, err)
	}
	if p.Offset == 0 {
		// The gate (WorkflowView.Gate): listed with the tasks, it says
		// whether the workflow was published (or cancelled before).
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
	}
	v.Tasks = topoOrder(tasks)
	return v, true, nil
}

// readWorkflowTasks appends to tasks the jobs cur reads.
func readWorkflowTasks(ctx context.Context, cur *mongo.Cursor, tasks []WorkflowTask) ([]WorkflowTask, error) {
	err := store.EachRaw(ctx, cur, func(d bson.Raw) error {
		tasks = append(tasks, readWorkflowTask(d))
		return nil
	})
	return tasks, err
}

// countStates adds to counts the jobs filter matches, by state, from one
// aggregate. It tells at most maxViewStates states apart: when the server
// returns that many (another application's states), the jobs are counted
// too, and those in the states not returned are counted under "".
func (c *Client) countStates(ctx context.Context, filter bson.D, counts map[jobs.State]int) error {
	cur, err := c.coll.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$match", Value: filter}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$state"}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
		{{Key: "$limit", Value: maxViewStates}},
	})
	if err != nil {
		return err
	}
	read, sum := 0, 0
	err = store.EachRaw(ctx, cur, func(d bson.Raw) error {
		s, _ := d.Lookup("_id").StringValueOK()
		n, _ := d.Lookup("n").AsInt64OK()
		addState(counts, jobs.State(s), int(n))
		read, sum = read+1, sum+int(n)
		return nil
	})
	if err != nil || read < maxViewStates {
		return err
	}
	all, err := c.coll.CountDocuments(ctx, filter)
	if err != nil {
		return err
	}
	counts[""] += max(int(all)-sum, 0)
	return nil
}

// addState adds n jobs in state s to counts, under "" when counts
// already tells maxViewStates states apart.
func addState(counts map[jobs.State]int, s jobs.State, n int) {
	if _, ok := counts[s]; !ok && len(counts) >= maxViewStates {
		s = ""
	}
	counts[s] += n
}

// viewStates are the states in the order a view counts them.
var viewStates = []jobs.State{jobs.StateBlocked, jobs.StateAvailable, jobs.StateRunning, jobs.StateSucceeded, jobs.StateDead, jobs.StateCancelled}

// setStates sets the view's States and Total from counts: the known
// states in their order, then the others by name, then "".
func (v *WorkflowView) setStates(counts map[jobs.State]int) {
	var out []StateCount
	for _, s := range viewStates {
		if n, ok := counts[s]; ok {
			out = append(out, StateCount{s, n})
		}
	}
	var others []StateCount
	for s, n := range counts {
		if !s.Valid() {
			others = append(others, StateCount{s, n})
		}
	}
	slices.SortFunc(others, func(a, b StateCount) int {
		if (a.State == "") != (b.State == "") { // "" last
			return strings.Compare(string(b.State), string(a.State))
		}
		return strings.Compare(string(a.State), string(b.State))
	})
	v.States = append(out, others...)
	for _, s := range v.States {
		v.Total += s.N
	}
}

// readWorkflowTask reads a WorkflowTask from a stored job document.
func readWorkflowTask(d bson.Raw) WorkflowTask {
	t := WorkflowTask{JobSummary: summarize(d)}
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
	// Always take the earliest created ready task, or in a cycle the
	// earliest left: len(tasks) is bounded by a page, so a scan per step
	// is cheap enough.
	out := make([]WorkflowTask, 0, len(tasks))
	done := make([]bool, len(tasks))
	for len(out) < len(tasks) {
		next := -1
		for i := range tasks {
			if done[i] || (next >= 0 && waits[i] != 0) {
				continue
			}
			next = i
			if waits[i] == 0 {
				break
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

// Listed are the first n of ids and how many more there are: what a view
// shows of a task's parents.
func Listed(ids []JobID, n int) ([]JobID, int) {
	if len(ids) <= n {
		return ids, 0
	}
	return ids[:n], len(ids) - n
}
