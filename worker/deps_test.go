package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// flow records, from inside the handlers, what a workflow did: each job's
// runs, and any run that started while one of its parents had not
// succeeded, or for a job that runs anyway not finished (read from the
// database as the run starts).
type flow struct {
	mu    sync.Mutex
	runs  map[string]int
	early []string
	fail  map[string]bool // job ids whose handler fails permanently
}

func (b *bundle) flow(t *testing.T) *flow {
	t.Helper()
	f := &flow{runs: map[string]int{}, fail: map[string]bool{}}
	b.handle(t, "step", func(ctx context.Context, j *jobs.Job) error {
		for _, p := range j.After {
			pj, err := b.q.Get(ctx, p)
			if err != nil || !(pj.State == jobs.StateSucceeded || j.RunAnyway && pj.State.Finished()) {
				f.mu.Lock()
				f.early = append(f.early, fmt.Sprintf("%s ran while parent %s was %v (%v)", j.ID, p, pj, err))
				f.mu.Unlock()
			}
		}
		f.mu.Lock()
		f.runs[j.ID]++
		fail := f.fail[j.ID]
		f.mu.Unlock()
		if fail {
			return jobs.Permanent(errors.New("this step fails"))
		}
		return nil
	}, jobs.KindOptions{})
	return f
}

func (f *flow) check(t *testing.T, ran ...string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Empty(t, f.early)
	for _, id := range ran {
		require.Equal(t, 1, f.runs[id], "runs of %s", id)
	}
}

func (b *bundle) step(t *testing.T, id string, after ...string) string {
	t.Helper()
	return b.enqueue(t, "step", nil, queue.InsertOpts{ID: id, After: after})
}

// Real workers run a chain, a fan-out and a fan-in enqueued in one call,
// each job once and none before its parents succeeded; the worker that
// finishes a parent releases its dependents (no leader runs here).
func TestWorkflowShapes(t *testing.T) {
	b := setup(t)
	f := b.flow(t)
	var ins []queue.Insert
	add := func(id string, after ...string) {
		ins = append(ins, queue.Insert{Kind: "step", Opts: queue.InsertOpts{ID: id, After: after}})
	}
	// chain: c0 → c1 → … → c5
	add("c0")
	for i := 1; i <= 5; i++ {
		add(fmt.Sprintf("c%d", i), fmt.Sprintf("c%d", i-1))
	}
	// fan-out then fan-in: root → o0…o9 → sink
	add("root")
	var outs []string
	for i := range 10 {
		outs = append(outs, fmt.Sprintf("o%d", i))
		add(outs[i], "root")
	}
	add("sink", outs...)
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	for range 2 {
		b.start(t, worker.Config{Concurrency: 4})
	}
	for _, in := range ins {
		b.waitState(t, in.Opts.ID, jobs.StateSucceeded)
	}
	var all []string
	for _, in := range ins {
		all = append(all, in.Opts.ID)
	}
	f.check(t, all...)
}

// A handler that enqueues a job to run after itself: its worker learns
// of the dependent (WithRunningJob) and releases it right after finishing,
// with no leader.
func TestWorkflowChildEnqueuedByItsParent(t *testing.T) {
	b := setup(t)
	f := b.flow(t)
	b.handle(t, "spawn", func(ctx context.Context, j *jobs.Job) error {
		_, err := b.q.Enqueue(ctx, "step", nil, queue.InsertOpts{ID: "next-" + j.ID, After: []string{j.ID}})
		return err
	}, jobs.KindOptions{})
	b.start(t, worker.Config{Concurrency: 2})
	b.enqueue(t, "spawn", nil, queue.InsertOpts{ID: "first"})
	b.waitState(t, "first", jobs.StateSucceeded)
	b.waitState(t, "next-first", jobs.StateSucceeded)
	f.check(t, "next-first")
}

// Dependents enqueued while their parents run, by another process: the
// parents' workers do not know of them; the enqueuer's watch of the
// running parent (queue/depswatch.go), or the leader's pass, releases them.
func TestWorkflowLateDependentsReleasedByTheLeader(t *testing.T) {
	b := setup(t)
	f := b.flow(t)
	release := make(chan struct{})
	b.handle(t, "slow", func(ctx context.Context, j *jobs.Job) error {
		<-release
		return nil
	}, jobs.KindOptions{})
	b.start(t, worker.Config{Concurrency: 4})
	b.enqueue(t, "slow", nil, queue.InsertOpts{ID: "p"})
	b.waitState(t, "p", jobs.StateRunning)
	b.step(t, "late", "p")
	close(release)
	b.waitState(t, "p", jobs.StateSucceeded)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := b.q.SettleDependents(b.ctx, time.Minute, 100) // the leader
		require.NoError(c, err)
		j, err := b.q.Get(b.ctx, "late")
		require.NoError(c, err)
		assert.Equal(c, jobs.StateSucceeded, j.State)
	}, 20*time.Second, 50*time.Millisecond)
	f.check(t, "late")
}

// A parent that ends dead cancels its dependents and theirs, with why; a
// dependent that runs anyway runs.
func TestWorkflowDeadParentCancelsDescendants(t *testing.T) {
	b := setup(t)
	f := b.flow(t)
	f.fail["bad"] = true
	// Enqueued before any runs, so that the worker that ends each parent
	// is the one to tell its dependents.
	_, err := b.q.EnqueueMany(b.ctx, []queue.Insert{
		{Kind: "step", Opts: queue.InsertOpts{ID: "bad"}},
		{Kind: "step", Opts: queue.InsertOpts{ID: "child", After: []string{"bad"}}},
		{Kind: "step", Opts: queue.InsertOpts{ID: "grandchild", After: []string{"child"}}},
		{Kind: "step", Opts: queue.InsertOpts{ID: "cleanup", After: []string{"bad"}, AfterRunAnyway: true}},
	})
	require.NoError(t, err)
	b.start(t, worker.Config{Concurrency: 2})
	b.waitState(t, "bad", jobs.StateDead)
	b.waitState(t, "cleanup", jobs.StateSucceeded)
	c := b.waitState(t, "child", jobs.StateCancelled)
	require.Equal(t, "cancelled: parent bad ended dead", c.Errors[len(c.Errors)-1].Message)
	g := b.waitState(t, "grandchild", jobs.StateCancelled)
	require.Equal(t, "cancelled: parent child ended cancelled", g.Errors[len(g.Errors)-1].Message)
	f.check(t, "bad", "cleanup")
	require.Zero(t, f.runs["child"]+f.runs["grandchild"])
}

// A handler's result is stored with its job when it succeeds, and the
// jobs that wait for it read it; a result over the limit ends the job
// dead, saying why.
func TestWorkflowResults(t *testing.T) {
	b := setup(t)
	type sum struct {
		N int `bson:"n"`
	}
	b.handle(t, "count", func(ctx context.Context, j *jobs.Job) error {
		var in sum
		if err := bson.Unmarshal(j.Args, &in); err != nil {
			return err
		}
		return jobs.SetResult(ctx, sum{N: in.N * 10})
	}, jobs.KindOptions{})
	got := make(chan int, 1)
	b.handle(t, "total", func(ctx context.Context, j *jobs.Job) error {
		parents, err := b.q.ParentResults(ctx, j)
		if err != nil {
			return err
		}
		total := 0
		for _, p := range parents {
			var s sum
			if err := p.Decode(&s); err != nil {
				return jobs.Permanent(err)
			}
			total += s.N
		}
		got <- total
		return jobs.SetResult(ctx, sum{N: total})
	}, jobs.KindOptions{})
	b.handle(t, "huge", func(ctx context.Context, j *jobs.Job) error {
		return jobs.SetResult(ctx, bson.M{"blob": make([]byte, jobs.MaxResultBytes)})
	}, jobs.KindOptions{})
	_, err := b.q.EnqueueMany(b.ctx, []queue.Insert{
		{Kind: "count", Args: sum{N: 1}, Opts: queue.InsertOpts{ID: "a"}},
		{Kind: "count", Args: sum{N: 2}, Opts: queue.InsertOpts{ID: "b"}},
		{Kind: "total", Opts: queue.InsertOpts{ID: "total", After: []string{"a", "b"}}},
		{Kind: "huge", Opts: queue.InsertOpts{ID: "huge"}},
	})
	require.NoError(t, err)
	b.start(t, worker.Config{Concurrency: 2, ClaimBatch: 4})
	j := b.waitState(t, "total", jobs.StateSucceeded)
	require.Equal(t, 30, <-got)
	require.Equal(t, int32(30), j.Result.Lookup("n").Int32())
	h := b.waitState(t, "huge", jobs.StateDead)
	require.Contains(t, h.Errors[0].Message, "bytes is over the 65536-byte limit")
	require.Nil(t, h.Result)

	require.ErrorIs(t, jobs.SetResult(b.ctx, sum{}), jobs.ErrNoResultHere)
}
