package dashboard

// The workflow page: a workflow's tasks, or the jobs connected to a job
// through after, parents before their dependents (queue.WorkflowTasks),
// reached from the page of a job that has parents, dependents or a
// workflow.

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
)

// WorkflowTasks is how many tasks a page of the workflow page shows
// (?page=N for the others).
const WorkflowTasks = 500

// workflowPath is the path of the workflow page of id: a workflow's id
// (a string: its JobID) or a job's, as a token in one path segment, as
// jobPath does.
func workflowPath(id queue.JobID) string {
	return "/workflows/" + url.PathEscape(id.Token())
}

// jobWorkflowPath is the path of the workflow page a job's page links to:
// its workflow's, when it has one; else, when other jobs wait for it or
// it waits for others, its own graph's; else "".
func jobWorkflowPath(j queue.JobSummary) string {
	if wf, ok := j.Raw.Lookup("workflow").StringValueOK(); ok && wf != "" {
		return workflowPath(queue.StringJobID(wf))
	}
	for _, f := range []string{"after", "dependents", "dependentsDue"} {
		if v := j.Raw.Lookup(f); v.Type != 0 && v.Type != bson.TypeNull {
			return workflowPath(j.JobID)
		}
	}
	return ""
}

// stateClass is the class that colours state s: s itself when it is a
// state, else "other" (a state another application wrote could name
// classes of its own).
func stateClass(s jobs.State) string {
	if s.Valid() {
		return string(s)
	}
	return "other"
}

// waitingShown is how many of a task's parents a row lists; the rest
// are counted.
const waitingShown = 10

type taskRow struct {
	N                                    int
	Name, Kind, ID, Href, State, Class   string
	Attempt, MaxAttempts                 int
	Waiting                              []idLink
	WaitingMore                          int
	RunAnyway                            bool
	Result, ResultHref, Cancelled, Token string
	Progress                             *progressView
}

type idLink struct{ ID, Href string }

type stateCount struct {
	State, Class, N string
}

// workflowPager says which tasks a page of the workflow page shows, and
// links to its neighbours.
type workflowPager struct {
	Empty              bool
	First, Last, Total string
	Prev, Next         string
}

func (s *Server) workflow(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, err)
		return
	}
	pageNo, err := workflowPageNo(r)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	v, err := s.q.WorkflowTasks(ctx, id, queue.WorkflowPage{Offset: (pageNo - 1) * WorkflowTasks, Limit: WorkflowTasks})
	if errors.Is(err, queue.ErrNotFound) {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no workflow and no job with id %s", id))
		return
	}
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	title := "Workflow " + v.Workflow
	var job idLink
	if v.Workflow == "" {
		job = idLink{v.Job.String(), jobPath(v.Job)}
		title = "Graph of job " + job.ID
	}
	s.render(w, r, http.StatusOK, "workflow", struct {
		page
		Workflow string
		Job      idLink
		Tasks    []taskRow
		Total    string
		States   []stateCount
		Gate     bool
		Pager    *workflowPager
		Graph    *graphView // workflow_graph.go
	}{page{Title: title, Nav: "jobs", Refresh: s.cfg.Refresh}, v.Workflow, job, taskRows(v), totalLabel(v), stateCounts(v), v.Gate, pager(r, v, pageNo), drawing(v)})
}

// workflowPageNo is the page the request asks for: ?page=N, from 1.
func workflowPageNo(r *http.Request) (int, error) {
	q := r.URL.Query().Get("page")
	if q == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 1 || n > math.MaxInt32/WorkflowTasks {
		return 0, fmt.Errorf("page %q: give a page number from 1", q)
	}
	return n, nil
}

// taskRows are the rows of a view's tasks.
func taskRows(v queue.WorkflowView) []taskRow {
	rows := make([]taskRow, len(v.Tasks))
	for i, t := range v.Tasks {
		href := jobPath(t.JobID)
		row := taskRow{N: v.Offset + i + 1, Name: t.Name, Kind: t.Kind, ID: t.ID, Href: href, State: string(t.State), Class: stateClass(t.State),
			Attempt: t.Attempt, MaxAttempts: t.MaxAttempts, RunAnyway: t.RunAnyway, Cancelled: t.Cancelled, Token: t.JobID.Token()}
		listed, more := queue.Listed(t.WaitingOn, waitingShown)
		for _, p := range listed {
			row.Waiting = append(row.Waiting, idLink{p.String(), jobPath(p)})
		}
		row.WaitingMore = more
		row.Progress = progressOf(t.Progress) // progress.go
		if t.HasResult {
			row.Result, row.ResultHref = byteSize(t.ResultBytes), href+"#result"
		}
		rows[i] = row
	}
	return rows
}

// totalLabel is how many tasks a view counts, "at least" when its walk
// stopped.
func totalLabel(v queue.WorkflowView) string {
	if v.AtLeast {
		return "at least " + thousands(int64(v.Total))
	}
	return thousands(int64(v.Total))
}

// stateCounts are a view's counts by state, as the page shows them: a
// state that is not a string as "other".
func stateCounts(v queue.WorkflowView) []stateCount {
	out := make([]stateCount, len(v.States))
	for i, c := range v.States {
		name := string(c.State)
		if name == "" {
			name = "other"
		}
		out[i] = stateCount{name, stateClass(c.State), thousands(int64(c.N))}
	}
	return out
}

// pager is what the page says of the tasks it leaves out: nil when it
// shows them all.
func pager(r *http.Request, v queue.WorkflowView, pageNo int) *workflowPager {
	if pageNo == 1 && v.Shown() >= v.Total && !v.AtLeast {
		return nil
	}
	link := func(n int) string {
		q := r.URL.Query()
		q.Set("page", strconv.Itoa(n))
		return "?" + q.Encode()
	}
	p := &workflowPager{Empty: v.Shown() == 0, First: thousands(int64(v.Offset + 1)), Last: thousands(int64(v.Offset + v.Shown())), Total: totalLabel(v)}
	if pageNo > 1 {
		p.Prev = link(min(pageNo-1, max((v.Total+WorkflowTasks-1)/WorkflowTasks, 1)))
	}
	if v.Offset+v.Shown() < v.Total {
		p.Next = link(pageNo + 1)
	}
	return p
}

// byteSize says how large a result is, for people.
func byteSize(n int) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f KB", float64(n)/1024)
}
