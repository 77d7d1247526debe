package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// WorkflowsBench is the workflows run: workflows of no-op tasks in several
// shapes, each inserted with InsertWorkflow and burnt down by worker
// processes, beside a plain burn-down of as many jobs without
// dependencies, in the same run.
type WorkflowsBench struct {
	Shapes []*WorkflowShape `json:"shapes"`
}

// WorkflowShape is one shape's burn-down and its plain counterpart.
type WorkflowShape struct {
	Shape string `json:"shape"`
	Edges int    `json:"edges"`
	// Flow is the workflow's burn-down (its Seconds from the workers'
	// start, after the insert); Plain as many jobs without dependencies.
	Flow  *BurnDown `json:"flow"`
	Plain *BurnDown `json:"plain"`
	// InsertSeconds and InsertCommands are the workflow's insert (gate,
	// tasks, links, publish, the publish's settle); PlainInsertCommands
	// the plain jobs' enqueue.
	InsertSeconds       float64 `json:"insertSeconds"`
	InsertCommands      int64   `json:"insertCommands"`
	PlainInsertCommands int64   `json:"plainInsertCommands"`
	// AddedPerJob is the commands per job the dependencies add, workers'
	// and inserter's together: (flow's - plain's) / jobs.
	AddedPerJob float64 `json:"addedCommandsPerJob"`
}

// workflowShapeNames are the workflows run's shapes, in the order it
// measures them.
var workflowShapeNames = []string{"fan-out", "fan-in", "chain", "layered"}

// parseShapes reads --workflow-shapes: names of workflowShapeNames,
// separated by commas.
func parseShapes(s string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(s, ",") {
		if !slices.Contains(workflowShapeNames, name) {
			return nil, fmt.Errorf("--workflow-shapes: unknown shape %q (of %s)", name, strings.Join(workflowShapeNames, ","))
		}
		out = append(out, name)
	}
	return out, nil
}

// workflowShapes are the run's shapes at n tasks (chain: chain tasks),
// each a list of tasks with their parents by index.
func workflowShapes(n, chain int) map[string][][]int {
	shapes := map[string][][]int{}
	// fan-out: 1 → n-1
	out := [][]int{nil}
	for range n - 1 {
		out = append(out, []int{0})
	}
	shapes["fan-out"] = out
	// fan-in: n-1 → 1 (the sink waits for every other and the gate)
	in := make([][]int, 0, n)
	var all []int
	for i := range min(n-1, queue.MaxAfter-2) {
		in = append(in, nil)
		all = append(all, i)
	}
	shapes["fan-in"] = append(in, all)
	// chain
	ch := [][]int{nil}
	for i := 1; i < chain; i++ {
		ch = append(ch, []int{i - 1})
	}
	shapes["chain"] = ch
	// layered DAG: 10 layers, each task after two of the layer before.
	const layers = 10
	width := max(n/layers, 1)
	var dag [][]int
	for l := range layers {
		for i := range width {
			if l == 0 {
				dag = append(dag, nil)
				continue
			}
			prev := (l - 1) * width
			p := []int{prev + i}
			if width > 1 {
				p = append(p, prev+(i+1)%width)
			}
			dag = append(dag, p)
		}
	}
	shapes["layered"] = dag
	return shapes
}

// counted returns a queue client on db of a connection that counts its
// commands in n.
func (b *bencher) counted(db string, n *atomic.Int64) (*queue.Client, func(), error) {
	c, err := mongo.Connect(options.Client().ApplyURI(b.uri).SetMonitor(&event.CommandMonitor{
		Started: func(context.Context, *event.CommandStartedEvent) { n.Add(1) },
	}))
	if err != nil {
		return nil, nil, err
	}
	q, err := queue.New(c.Database(db), queue.Config{})
	if err != nil {
		return nil, nil, err
	}
	return q, func() { _ = c.Disconnect(context.Background()) }, nil
}

func (b *bencher) workflows(ctx context.Context) (*WorkflowsBench, error) {
	res := &WorkflowsBench{}
	shapes := workflowShapes(b.o.WorkflowJobs, b.o.WorkflowChain)
	names := b.o.WorkflowShapes
	if names == nil {
		names = workflowShapeNames
	}
	for _, name := range names {
		tasks := shapes[name]
		s := &WorkflowShape{Shape: name}
		for _, p := range tasks {
			s.Edges += len(p)
		}
		var flowCmds, plainCmds atomic.Int64
		var err error
		s.Flow, err = b.burnDownWith(ctx, "wf-"+name, len(tasks), b.o.Procs, b.o.Concurrency, defaultClaimBatch, nil,
			func(ctx context.Context, q *queue.Client) error {
				cq, done, err := b.counted(store.Of(q).Collection().Database().Name(), &flowCmds)
				if err != nil {
					return err
				}
				defer done()
				wf := queue.NewWorkflow(name)
				for i, parents := range tasks {
					after := make([]string, len(parents))
					for k, p := range parents {
						after[k] = fmt.Sprint(p)
					}
					wf.Add(fmt.Sprint(i), "noop", nil, queue.TaskOpts{After: after})
				}
				if err := cq.EnsureIndexes(ctx); err != nil {
					return err
				}
				flowCmds.Store(0)
				t := time.Now()
				_, err = cq.InsertWorkflow(ctx, wf)
				s.InsertSeconds = time.Since(t).Seconds()
				return err
			})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		s.Flow.Name = "wf-" + name
		s.Plain, err = b.burnDownWith(ctx, "plain-"+name, len(tasks), b.o.Procs, b.o.Concurrency, defaultClaimBatch, nil,
			func(ctx context.Context, q *queue.Client) error {
				cq, done, err := b.counted(store.Of(q).Collection().Database().Name(), &plainCmds)
				if err != nil {
					return err
				}
				defer done()
				if err := cq.EnsureIndexes(ctx); err != nil {
					return err
				}
				plainCmds.Store(0)
				return b.enqueue(ctx, cq, len(tasks), "noop", nil)
			})
		if err != nil {
			return nil, fmt.Errorf("%s plain: %w", name, err)
		}
		s.InsertCommands, s.PlainInsertCommands = flowCmds.Load(), plainCmds.Load()
		n := float64(len(tasks))
		s.AddedPerJob = (float64(s.Flow.Commands+s.InsertCommands) - float64(s.Plain.Commands+s.PlainInsertCommands)) / n
		res.Shapes = append(res.Shapes, s)
		fmt.Fprintf(b.log, "bench: workflows %s: %d tasks, %.1f jobs/s (plain %.1f)\n", name, len(tasks), s.Flow.JobsPerSec, s.Plain.JobsPerSec)
	}
	return res, nil
}

func (r *WorkflowsBench) write(w io.Writer) {
	fmt.Fprintln(w, "\nworkflows (no-op tasks; jobs/s from the workers' start, after the insert; commands: workers' + inserter's):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\ttasks\tedges\tinsert s\tinsert cmds\tjobs/s\tplain jobs/s\tcmds/job\tplain cmds/job\tadded cmds/job\t")
	for _, s := range r.Shapes {
		n := float64(s.Flow.Jobs)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%d (plain %d)\t%.1f\t%.1f\t%.2f\t%.2f\t%+.2f\t\n", s.Shape, s.Flow.Jobs, s.Edges, s.InsertSeconds,
			s.InsertCommands, s.PlainInsertCommands, s.Flow.JobsPerSec, s.Plain.JobsPerSec,
			float64(s.Flow.Commands+s.InsertCommands)/n, float64(s.Plain.Commands+s.PlainInsertCommands)/n, s.AddedPerJob)
	}
	_ = tw.Flush()
}
