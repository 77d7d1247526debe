package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/docketq/docket/queue"
)

func init() {
	ctlCommands["workflow"] = subcommand{"a workflow's tasks (workflow ID), or a job's graph through after (a job's id as list prints it), parents before dependents: state, attempt, what each waits on, why cancelled, result size (--json)", ctlWorkflow}
}

// maxWorkflowTasks bounds --limit.
const maxWorkflowTasks = 1000

func ctlWorkflow(fs *flag.FlagSet) func(*env, []string) error {
	limit := fs.Int("limit", 200, fmt.Sprintf("tasks to show, 1 to %d; the view says how many it left out", maxWorkflowTasks))
	asJSON := fs.Bool("json", false, "print the view as one JSON document")
	return func(e *env, rest []string) error {
		if len(rest) != 1 {
			return badInput("give one id: a workflow's, or a job's as list prints it (put flags before it)")
		}
		if *limit < 1 || *limit > maxWorkflowTasks {
			return badInput("--limit: %d must be 1 to %d", *limit, maxWorkflowTasks)
		}
		ids, err := parseJobIDs(rest)
		if err != nil {
			return err
		}
		v, err := e.q.WorkflowTasks(e.ctx, ids[0], *limit)
		if errors.Is(err, queue.ErrNotFound) {
			return usageError{fmt.Errorf("no workflow and no job with id %s", idLabel(ids[0]))}
		}
		if err != nil {
			return err
		}
		if *asJSON {
			return printWorkflowJSON(e.stdout, v)
		}
		return printWorkflow(e.stdout, v)
	}
}

// printWorkflow prints a workflow view as a table, every stored value
// shown (escaped).
func printWorkflow(w io.Writer, v queue.WorkflowView) error {
	if v.Workflow != "" {
		gate, n := "", len(v.Tasks)+v.LeftOut
		if v.Gate {
			gate, n = " and the job of its id (its gate: the tasks wait for it; succeeded, it published them)", n-1
		}
		fmt.Fprintf(w, "workflow %s: %d tasks%s, parents before dependents\n", idLabel(queue.StringJobID(v.Workflow)), n, gate)
	} else {
		fmt.Fprintf(w, "job %s and the jobs connected to it through after (its parents and dependents, theirs, and so on), parents before dependents\n", idLabel(v.Job))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "task\tid\tstate\tattempt\twaiting on\tresult\twhy cancelled")
	for _, t := range v.Tasks {
		name := t.Name
		if name == "" {
			name = t.Kind
		}
		waiting := "-"
		if len(t.WaitingOn) > 0 {
			ids := make([]string, len(t.WaitingOn))
			for i, p := range t.WaitingOn {
				ids[i] = shown(p.String())
			}
			waiting = strings.Join(ids, ",")
			if t.RunAnyway {
				waiting += " (runs anyway)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", shown(name), idLabel(t.JobID), shown(string(t.State)), t.Attempt, t.MaxAttempts,
			waiting, resultSize(t), orDash(shown(t.Cancelled)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if v.LeftOut > 0 {
		more := fmt.Sprint(v.LeftOut)
		if v.AtLeast {
			more = "at least " + more
		}
		fmt.Fprintf(w, "and %s more not shown: raise --limit (up to %d)\n", more, maxWorkflowTasks)
	}
	return nil
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

// workflowJSON is the document workflow --json prints. Ids are tokens (a
// job's token names it on every command; idText is the id for people);
// strings are as stored.
type workflowJSON struct {
	Workflow string             `json:"workflow,omitempty"`
	Job      string             `json:"job,omitempty"`
	Tasks    []workflowTaskJSON `json:"tasks"`
	LeftOut  int                `json:"leftOut"`
	AtLeast  bool               `json:"leftOutAtLeast,omitempty"`
	// Gate: tasks hold the job of the workflow's id, its gate.
	Gate bool `json:"gate,omitempty"`
}

type workflowTaskJSON struct {
	ID          string   `json:"id"`
	IDText      string   `json:"idText"`
	Name        string   `json:"name,omitempty"`
	Kind        string   `json:"kind"`
	State       string   `json:"state"`
	Attempt     int      `json:"attempt"`
	MaxAttempts int      `json:"maxAttempts"`
	After       []string `json:"after,omitempty"`     // tokens
	WaitingOn   []string `json:"waitingOn,omitempty"` // tokens
	RunAnyway   bool     `json:"runAnyway,omitempty"`
	Cancelled   string   `json:"cancelled,omitempty"`
	ResultBytes *int     `json:"resultBytes,omitempty"`
}

func printWorkflowJSON(w io.Writer, v queue.WorkflowView) error {
	out := workflowJSON{Workflow: v.Workflow, Job: v.Job.Token(), Tasks: []workflowTaskJSON{}, LeftOut: v.LeftOut, AtLeast: v.AtLeast, Gate: v.Gate}
	for _, t := range v.Tasks {
		tj := workflowTaskJSON{ID: t.JobID.Token(), IDText: t.ID, Name: t.Name, Kind: t.Kind, State: string(t.State), Attempt: t.Attempt,
			MaxAttempts: t.MaxAttempts, After: tokens(t.After), WaitingOn: tokens(t.WaitingOn), RunAnyway: t.RunAnyway, Cancelled: t.Cancelled}
		if t.HasResult {
			n := t.ResultBytes
			tj.ResultBytes = &n
		}
		out.Tasks = append(out.Tasks, tj)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// tokens are the tokens of ids.
func tokens(ids []queue.JobID) []string {
	var out []string
	for _, id := range ids {
		out = append(out, id.Token())
	}
	return out
}
