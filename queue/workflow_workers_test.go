package queue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// runs records, from inside real workers' handlers, each task's runs and
// any run that started while a parent (the gate included) had not
// succeeded, read from the database as the run starts.
type runs struct {
	mu    sync.Mutex
	count map[string]int
	order []string
	early []string
	hold  map[string]chan struct{} // tasks whose handler waits to be released
	start chan string
}

// workers starts two workers on b's database running kind k as runs records.
func (b bundle) workers(t *testing.T) *runs {
	t.Helper()
	r := &runs{count: map[string]int{}, hold: map[string]chan struct{}{}, start: make(chan string, 100)}
	reg := jobs.NewRegistry()
	require.NoError(t, reg.Add("k", jobs.HandlerFunc(func(ctx context.Context, j *jobs.Job) error {
		for _, p := range j.After {
			pj, err := b.q.Get(ctx, p)
			if err != nil || !(pj.State == jobs.StateSucceeded || j.RunAnyway && pj.State.Finished()) {
				r.mu.Lock()
				r.early = append(r.early, fmt.Sprintf("%s ran while parent %s was %v (%v)", j.ID, p, pj, err))
				r.mu.Unlock()
			}
		}
		r.mu.Lock()
		r.count[j.ID]++
		r.order = append(r.order, j.ID)
		hold := r.hold[j.ID]
		r.mu.Unlock()
		r.start <- j.ID
		if hold != nil {
			<-hold
		}
		return nil
	}), jobs.KindOptions{}))
	for range 2 {
		w, err := worker.New(b.q, reg, worker.Config{
			Concurrency: 4, Lease: 2 * time.Second, HeartbeatInterval: 100 * time.Millisecond,
			PollMin: 5 * time.Millisecond, PollMax: 50 * time.Millisecond, Logger: zaptest.NewLogger(t),
		})
		require.NoError(t, err)
		w.Start(context.Background())
		t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	}
	return r
}

func (b bundle) waitState(t *testing.T, s jobs.State, ids ...string) {
	t.Helper()
	for _, id := range ids {
		require.Eventually(t, func() bool {
			j, err := b.q.Get(b.ctx, id)
			return err == nil && j.State == s
		}, 20*time.Second, 10*time.Millisecond, "job %s never %s", id, s)
	}
}

// sentinel enqueues a plain job and waits until the workers have run it:
// whatever was runnable before it had its chance.
func (b bundle) sentinel(t *testing.T, id string) {
	t.Helper()
	_, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{ID: id, Priority: -1})
	require.NoError(t, err)
	b.waitState(t, jobs.StateSucceeded, id)
}

func (r *runs) check(t *testing.T, ran []string, notRan ...string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(t, r.early)
	for _, id := range ran {
		require.Equal(t, 1, r.count[id], "runs of %s", id)
	}
	for _, id := range notRan {
		require.Zero(t, r.count[id], "runs of %s", id)
	}
}

// Real workers: a builder that dies between inserting the tasks and
// publishing leaves nothing they run; its retry with the same id runs the
// diamond in order, each task once; or the leader's pass cancels it whole.
func TestWorkflowWithWorkersAllOrNothing(t *testing.T) {
	for _, resolve := range []string{"retry", "sweep"} {
		t.Run(resolve, func(t *testing.T) {
			b := setup(t)
			r := b.workers(t)
			_, err := b.q.InsertWorkflow(b.stopAt("tasks", nil), diamond("wf"))
			require.ErrorIs(t, err, errDied)
			b.sentinel(t, "before")
			all := taskIDs("wf", diamondTasks...)
			r.check(t, nil, all...)
			if resolve == "retry" {
				_, err := b.q.InsertWorkflow(b.ctx, diamond("wf"))
				require.NoError(t, err)
				b.waitState(t, jobs.StateSucceeded, all...)
				r.check(t, all)
				return
			}
			require.Equal(t, 1, b.sweep(t))
			b.waitState(t, jobs.StateCancelled, all...)
			b.sentinel(t, "after")
			r.check(t, nil, all...)
		})
	}
}

// Real workers: cancelling a workflow while one task runs cancels the
// tasks not run (the one that runs anyway too); the running one finishes.
func TestWorkflowWithWorkersCancel(t *testing.T) {
	b := setup(t)
	r := b.workers(t)
	release := make(chan struct{})
	r.hold["wf/b1"] = release
	_, err := b.q.InsertWorkflow(b.ctx, diamond("wf"))
	require.NoError(t, err)
	for id := range r.start {
		if id == "wf/b1" {
			break
		}
	}
	res, err := b.q.CancelWorkflow(b.ctx, "wf")
	require.NoError(t, err)
	// b1 runs, held; b2, released with it, may still be running too.
	require.Contains(t, []int{1, 2}, res.Running)
	close(release)
	b.waitState(t, jobs.StateSucceeded, "wf/a", "wf/b1")
	b.waitState(t, jobs.StateCancelled, "wf/c", "wf/d")
	b.sentinel(t, "after")
	r.check(t, []string{"wf/a", "wf/b1"}, "wf/c", "wf/d")
}
