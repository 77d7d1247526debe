package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/docketq/docket/queue"
)

// workflowLine is one line of `enqueue workflow` input: a task.
type workflowLine struct {
	Name        string          `json:"name"`
	Kind        string          `json:"kind"`
	Args        json.RawMessage `json:"args"`
	Queue       string          `json:"queue"`
	Priority    int             `json:"priority"`
	Delay       string          `json:"delay"`
	MaxAttempts int             `json:"maxAttempts"`
	// After names tasks of the same workflow, on any line.
	After          []string `json:"after"`
	AfterRunAnyway bool     `json:"afterRunAnyway"`
}

// maxWorkflowBytes bounds the input of one workflow, read whole: it is
// inserted whole.
const maxWorkflowBytes = 64 << 20

func workflowCommand(fs *flag.FlagSet) func(*env, []string) error {
	id := fs.String("id", "", "the workflow's id (required): running the command again with the same id and input after a failure finishes what the first run started, and never runs a task twice")
	file := fs.String("file", "-", "file of JSON lines, - for stdin; each line a task: {\"name\": N, \"kind\": K, \"args\": {...}, \"queue\", \"priority\", \"delay\", \"maxAttempts\", \"after\": [names of tasks of the workflow], \"afterRunAnyway\"}")
	return func(e *env, rest []string) error {
		if len(rest) > 0 {
			return badInput("unexpected argument %q", rest[0])
		}
		if *id == "" {
			return badInput("--id is required: it makes a rerun safe")
		}
		in, done, err := e.input(*file)
		if err != nil {
			return err
		}
		defer done()
		kinds := enqueued{}
		wf, err := readWorkflow(io.LimitReader(in, maxWorkflowBytes+1), *id, kinds)
		if err != nil {
			return err
		}
		res, err := e.q.InsertWorkflow(e.ctx, wf)
		var ve *queue.ValidationError
		if errors.As(err, &ve) {
			return usageError{err}
		}
		if err != nil {
			return fmt.Errorf("%w; rerun with the same --id and input to finish it (until it is cancelled: %s after this run)", err, queue.DefaultWorkflowGrace)
		}
		if res.Existed {
			fmt.Fprintf(e.stderr, "%s: already published: nothing added\n", shown(res.ID))
		}
		fmt.Fprintln(e.stdout, shown(res.ID))
		e.warnUnserved("enqueue workflow", kinds)
		return nil
	}
}

// readWorkflow reads the tasks of the workflow with id, one per line, and
// counts them in kinds.
func readWorkflow(r io.Reader, id string, kinds enqueued) (*queue.Workflow, error) {
	wf := queue.NewWorkflow(id)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLineBytes)
	n, size := 0, 0
	for sc.Scan() {
		n++
		size += len(sc.Bytes()) + 1
		if size > maxWorkflowBytes {
			return nil, badInput("the workflow is over %d bytes", maxWorkflowBytes)
		}
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var l workflowLine
		if err := decodeLine(line, &l); err != nil {
			return nil, badInput("line %d: %v", n, err)
		}
		if l.Kind == "" {
			return nil, badInput("line %d: \"kind\" is required", n)
		}
		args := "{}"
		if len(l.Args) > 0 {
			args = string(l.Args)
		}
		doc, err := parseArgs(args)
		if err != nil {
			return nil, badInput("line %d: args: %v", n, err)
		}
		opts := queue.TaskOpts{After: l.After, AfterRunAnyway: l.AfterRunAnyway, Queue: l.Queue, Priority: l.Priority, MaxAttempts: l.MaxAttempts}
		if l.Delay != "" {
			d, err := time.ParseDuration(l.Delay)
			if err != nil {
				return nil, badInput("line %d: delay: %v", n, err)
			}
			opts.Delay = d
		}
		wf.Add(l.Name, l.Kind, doc, opts)
		kinds.add(l.Queue, l.Kind)
	}
	if err := sc.Err(); err != nil {
		return nil, badInput("reading the workflow: %v", err)
	}
	return wf, nil
}
