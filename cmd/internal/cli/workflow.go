package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/docketq/docket/cmd/internal/workflowgraph"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
)

func init() {
	ctlCommands["workflow"] = subcommand{"a workflow's tasks (workflow ID), or a job's graph through after (a job's id as list prints it), parents before dependents, counted by state: state, attempt, what each waits on, why cancelled, result size; --limit and --offset page (--json; --dot draws the page for Graphviz)", ctlWorkflow}
}

// waitingShown is how many of a task's parents the table lists; the
// rest are counted.
const waitingShown = 10

func ctlWorkflow(fs *flag.FlagSet) func(*env, []string) error {
	limit := fs.Int("limit", 200, fmt.Sprintf("tasks per page, 1 to %d", queue.MaxWorkflowPage))
	offset := fs.Int("offset", 0, "tasks to skip: the offset the previous page printed")
	asJSON := fs.Bool("json", false, "print the view as one JSON document")
	asDOT := fs.Bool("dot", false, "print the page's tasks as a Graphviz digraph, laid out and bounded as the dashboard draws them")
	return func(e *env, rest []string) error {
		if len(rest) != 1 {
			return badInput("give one id: a workflow's, or a job's as list prints it (put flags before it)")
		}
		if *asJSON && *asDOT {
			return badInput("--json and --dot: give one")
		}
		if *limit < 1 || *limit > queue.MaxWorkflowPage {
			return badInput("--limit: %d must be 1 to %d", *limit, queue.MaxWorkflowPage)
		}
		if *offset < 0 {
			return badInput("--offset: %d is negative", *offset)
		}
		ids, err := parseJobIDs(rest)
		if err != nil {
			return err
		}
		v, err := e.q.WorkflowTasks(e.ctx, ids[0], queue.WorkflowPage{Offset: *offset, Limit: *limit})
		if errors.Is(err, queue.ErrNotFound) {
			return usageError{fmt.Errorf("no workflow and no job with id %s", idLabel(ids[0]))}
		}
		if err != nil {
			return err
		}
		switch {
		case *asJSON:
			err = printWorkflowJSON(e.stdout, v)
		case *asDOT:
			err = workflowgraph.DOT(e.stdout, workflowgraph.Layout(v.Tasks), dotTitle(v))
		default:
			err = printWorkflow(e.stdout, v)
		}
		if next := v.Offset + v.Shown(); err == nil && next < v.Total && v.Shown() > 0 {
			fmt.Fprintf(e.stderr, "more: --offset %d\n", next)
		}
		return err
	}
}

// printWorkflow prints a workflow view as a table, every stored value
// shown (escaped): a heading, the tasks by state, the page's tasks, and
// which they are when not all.
func printWorkflow(w io.Writer, v queue.WorkflowView) error {
	total := countLabel(v)
	if v.Workflow != "" {
		gate := ""
		if v.Gate {
			gate = " and the job of its id (its gate: the tasks wait for it; succeeded, it published them)"
		}
		fmt.Fprintf(w, "workflow %s: %s tasks%s, parents before dependents\n", idLabel(queue.StringJobID(v.Workflow)), total, gate)
	} else {
		fmt.Fprintf(w, "job %s and the jobs connected to it through after (its parents and dependents, theirs, and so on), %s in all, parents before dependents\n", idLabel(v.Job), total)
	}
	var states []string
	for _, s := range v.States {
		states = append(states, fmt.Sprintf("%d %s", s.N, stateLabel(s.State)))
	}
	fmt.Fprintf(w, "by state: %s\n", strings.Join(states, ", "))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "task\tid\tstate\tattempt\twaiting on\tresult\twhy cancelled")
	for _, t := range v.Tasks {
		name := t.Name
		if name == "" {
			name = t.Kind
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", shown(name), idLabel(t.JobID), shown(string(t.State)), t.Attempt, t.MaxAttempts,
			waitingLabel(t), resultSize(t), orDash(shown(t.Cancelled)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case v.Shown() == 0 && v.Offset > 0:
		fmt.Fprintf(w, "no tasks from --offset %d: there are %s\n", v.Offset, total)
	case v.Offset > 0 || v.Shown() < v.Total || v.AtLeast:
		fmt.Fprintf(w, "tasks %d to %d of %s shown (--offset, --limit)\n", v.Offset+1, v.Offset+v.Shown(), total)
	}
	return nil
}

// dotTitle names the digraph --dot prints: the workflow or job, and
// which of its tasks the page holds when not all.
func dotTitle(v queue.WorkflowView) string {
	title := "job " + v.Job.String()
	if v.Workflow != "" {
		title = "workflow " + v.Workflow
	}
	switch {
	case v.Shown() == 0 && v.Offset > 0:
		title += fmt.Sprintf(", no tasks from --offset %d: there are %s", v.Offset, countLabel(v))
	case v.Offset > 0 || v.Shown() < v.Total || v.AtLeast:
		title += fmt.Sprintf(", tasks %d to %d of %s (--offset, --limit)", v.Offset+1, v.Offset+v.Shown(), countLabel(v))
	}
	return title
}

// countLabel is how many tasks a view counts, "at least" when its walk
// stopped.
func countLabel(v queue.WorkflowView) string {
	if v.AtLeast {
		return fmt.Sprintf("at least %d", v.Total)
	}
	return fmt.Sprint(v.Total)
}

// stateLabel names a state of a view's counts: "other" for those that
// are not strings.
func stateLabel(s jobs.State) string {
	if s == "" {
		return "other"
	}
	return shown(string(s))
}

// waitingLabel is what a task waits on, as the table shows it: at most
// waitingShown parents, the others counted.
func waitingLabel(t queue.WorkflowTask) string {
	if len(t.WaitingOn) == 0 {
		return "-"
	}
	listed, more := queue.Listed(t.WaitingOn, waitingShown)
	ids := make([]string, len(listed))
	for i, p := range listed {
		ids[i] = shown(p.String())
	}
	s := strings.Join(ids, ",")
	if more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	if t.RunAnyway {
		s += " (runs anyway)"
	}
	return s
}

// resultSize is a task's result as the table shows it: its size.
func resultSize(t queue.WorkflowTask) string {
	switch {
	case !t.HasResult:
		return "-"
	case t.ResultBytes < 1024:
		return fmt.Sprintf("%d B", t.ResultBytes)
	}
	return fmt.Sprintf("%.1f KB", float64(t.ResultBytes)/1024)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// jsonListed is how many of a task's parents --json lists; afterCount
// and waitingOnCount count them all.
const jsonListed = 100

// workflowJSON is the document workflow --json prints. Ids are tokens (a
// job's token names it on every command; idText is the id for people);
// strings are as stored.
type workflowJSON struct {
	Workflow string             `json:"workflow,omitempty"`
	Job      string             `json:"job,omitempty"`
	Tasks    []workflowTaskJSON `json:"tasks"`
	// Offset is how many tasks come before these; Total counts them all
	// (at least, with TotalAtLeast: the walk of a graph stopped).
	Offset  int         `json:"offset"`
	Total   int         `json:"total"`
	AtLeast bool        `json:"totalAtLeast,omitempty"`
	States  []stateJSON `json:"states"`
	// LeftOut is how many tasks are not on this page.
	LeftOut int `json:"leftOut"`
	// Gate: tasks hold the job of the workflow's id, its gate.
	Gate bool `json:"gate,omitempty"`
}

type stateJSON struct {
	State string `json:"state"` // "": not a string
	N     int    `json:"n"`
}

type workflowTaskJSON struct {
	ID             string   `json:"id"`
	IDText         string   `json:"idText"`
	Name           string   `json:"name,omitempty"`
	Kind           string   `json:"kind"`
	State          string   `json:"state"`
	Attempt        int      `json:"attempt"`
	MaxAttempts    int      `json:"maxAttempts"`
	After          []string `json:"after,omitempty"`     // tokens, the first jsonListed
	AfterCount     int      `json:"afterCount"`          // all of them
	WaitingOn      []string `json:"waitingOn,omitempty"` // tokens, the first jsonListed
	WaitingOnCount int      `json:"waitingOnCount"`      // all of them
	RunAnyway      bool     `json:"runAnyway,omitempty"`
	Cancelled      string   `json:"cancelled,omitempty"`
	ResultBytes    *int     `json:"resultBytes,omitempty"`
}

func printWorkflowJSON(w io.Writer, v queue.WorkflowView) error {
	out := workflowJSON{Workflow: v.Workflow, Job: v.Job.Token(), Tasks: []workflowTaskJSON{}, Offset: v.Offset, Total: v.Total, AtLeast: v.AtLeast,
		States: []stateJSON{}, LeftOut: v.Total - v.Shown(), Gate: v.Gate}
	for _, s := range v.States {
		out.States = append(out.States, stateJSON{string(s.State), s.N})
	}
	for _, t := range v.Tasks {
		after, _ := queue.Listed(t.After, jsonListed)
		waiting, _ := queue.Listed(t.WaitingOn, jsonListed)
		tj := workflowTaskJSON{ID: t.JobID.Token(), IDText: t.ID, Name: t.Name, Kind: t.Kind, State: string(t.State), Attempt: t.Attempt,
			MaxAttempts: t.MaxAttempts, After: tokens(after), AfterCount: len(t.After), WaitingOn: tokens(waiting), WaitingOnCount: len(t.WaitingOn),
			RunAnyway: t.RunAnyway, Cancelled: t.Cancelled}
		if t.HasResult {
			n := t.ResultBytes
			tj.ResultBytes = &n
		}
		out.Tasks = append(out.Tasks, tj)
	}
	return printIndentedJSON(w, out)
}

// tokens are the tokens of ids.
func tokens(ids []queue.JobID) []string {
	var out []string
	for _, id := range ids {
		out = append(out, id.Token())
	}
	return out
}
