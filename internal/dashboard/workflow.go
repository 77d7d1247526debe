package dashboard

// The workflow page: a workflow's tasks, or the jobs connected to a job
// through after, parents before their dependents (queue.WorkflowTasks),
// reached from the page of a job that has parents, dependents or a
// workflow.

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
)

// WorkflowTasks is how many tasks the workflow page shows.
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

type taskRow struct {
	N                                    int
	Name, Kind, ID, Href, State, Class   string
	Attempt, MaxAttempts                 int
	Waiting                              []idLink
	RunAnyway                            bool
	Result, ResultHref, Cancelled, Token string
}

type idLink struct{ ID, Href string }

func (s *Server) workflow(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, err)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	v, err := s.q.WorkflowTasks(ctx, id, WorkflowTasks)
	if errors.Is(err, queue.ErrNotFound) {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no workflow and no job with id %s", id))
		return
	}
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	rows := make([]taskRow, len(v.Tasks))
	for i, t := range v.Tasks {
		href := jobPath(t.JobID)
		row := taskRow{N: i + 1, Name: t.Name, Kind: t.Kind, ID: t.ID, Href: href, State: string(t.State), Class: stateClass(t.State),
			Attempt: t.Attempt, MaxAttempts: t.MaxAttempts, RunAnyway: t.RunAnyway, Cancelled: t.Cancelled, Token: t.JobID.Token()}
		for _, p := range t.WaitingOn {
			row.Waiting = append(row.Waiting, idLink{p.String(), jobPath(p)})
		}
		if t.HasResult {
			row.Result, row.ResultHref = byteSize(t.ResultBytes), href+"#result"
		}
		rows[i] = row
	}
	total := len(rows) + v.LeftOut
	if v.Gate {
		total-- // the gate is not a task
	}
	title := "Workflow " + v.Workflow
	var job idLink
	if v.Workflow == "" {
		job = idLink{v.Job.String(), jobPath(v.Job)}
		title = "Graph of job " + job.ID
	}
	left := ""
	if v.LeftOut > 0 {
		left = thousands(int64(v.LeftOut))
		if v.AtLeast {
			left = "at least " + left
		}
	}
	s.render(w, r, http.StatusOK, "workflow", struct {
		page
		Workflow string
		Job      idLink
		Tasks    []taskRow
		Total    int
		Gate     bool
		LeftOut  string
		Shown    int
	}{page{Title: title, Nav: "jobs", Refresh: s.cfg.Refresh}, v.Workflow, job, rows, total, v.Gate, left, WorkflowTasks})
}

// byteSize says how large a result is, for people.
func byteSize(n int) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f KB", float64(n)/1024)
}
