package docket_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/docketprom"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/worker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// observedClient is a client whose "greet" handler succeeds for "ok",
// fails once then succeeds for "flaky", and fails for good for "bad".
func observedClient(t *testing.T) *docket.Client {
	t.Helper()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{
		Logger:    zaptest.NewLogger(t),
		RetryBase: time.Millisecond, RetryMax: time.Millisecond,
	})
	require.NoError(t, err)
	docket.MustAddHandler(c, func(ctx context.Context, job *jobs.Job, a GreetArgs) error {
		switch {
		case a.Name == "bad":
			return jobs.Permanent(errors.New("bad name"))
		case a.Name == "flaky" && job.Attempt == 1:
			return errors.New("flaky, first time")
		}
		return nil
	}, jobs.KindOptions{})
	return c
}

func runGreetings(t *testing.T, c *docket.Client, names ...string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, c.Start(ctx))
	for _, n := range names {
		_, err := c.Insert(ctx, GreetArgs{Name: n}, nil)
		require.NoError(t, err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, c.WaitIdle(wctx, docket.WaitParams{}))
	require.NoError(t, c.Stop(ctx))
}

// Every attempt the pool ends reaches the subscribers of its kind, with
// the job as the attempt left it.
func TestSubscribeReceivesJobEvents(t *testing.T) {
	t.Parallel()
	c := observedClient(t)
	all, cancelAll := c.Subscribe()
	defer cancelAll()
	dead, cancelDead := c.Subscribe(docket.EventJobDead)
	defer cancelDead()

	runGreetings(t, c, "ok", "flaky", "bad")

	got := map[string][]docket.EventKind{}
	for range 4 {
		select {
		case e := <-all:
			got[decodeName(t, e.Job)] = append(got[decodeName(t, e.Job)], e.Kind)
			switch e.Kind {
			case docket.EventJobSucceeded:
				require.Equal(t, jobs.StateSucceeded, e.Job.State)
			case docket.EventJobRetried:
				require.Equal(t, jobs.StateAvailable, e.Job.State)
				require.Equal(t, "flaky, first time", e.Job.Errors[len(e.Job.Errors)-1].Message)
			case docket.EventJobDead:
				require.Equal(t, jobs.StateDead, e.Job.State)
				require.Equal(t, "bad name", e.Job.Errors[len(e.Job.Errors)-1].Message)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("only these events came: %v", got)
		}
	}
	require.Equal(t, map[string][]docket.EventKind{
		"ok":    {docket.EventJobSucceeded},
		"flaky": {docket.EventJobRetried, docket.EventJobSucceeded},
		"bad":   {docket.EventJobDead},
	}, got)
	require.Len(t, all, 0, "one event per attempt")

	e := <-dead
	require.Equal(t, "bad", decodeName(t, e.Job))
	require.Len(t, dead, 0, "only the kinds subscribed to")

	cancelDead()
	_, open := <-dead
	require.False(t, open, "cancel closes the channel")
	cancelDead() // a second cancel does nothing
	require.Zero(t, c.EventsDropped())
}

// A retried or snoozed event's job runs again when its backoff or snooze
// says, as stored, not when the attempt that ended was due.
func TestRetriedAndSnoozedEventsCarryTheNewRunAt(t *testing.T) {
	t.Parallel()
	for kind, end := range map[docket.EventKind]error{
		docket.EventJobRetried: errors.New("not now"),
		docket.EventJobSnoozed: jobs.Snooze(time.Hour),
	} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c, err := docket.NewClient(testdb.NewDB(t), docket.Config{
				Logger:    zaptest.NewLogger(t),
				RetryBase: time.Hour, RetryMax: time.Hour,
			})
			require.NoError(t, err)
			docket.MustAddHandler(c, func(context.Context, *jobs.Job, GreetArgs) error { return end }, jobs.KindOptions{})
			events, cancel := c.Subscribe(kind)
			defer cancel()
			res, err := c.Insert(ctx, GreetArgs{Name: "later"}, nil)
			require.NoError(t, err)
			inserted, err := c.JobGet(ctx, res.JobID())
			require.NoError(t, err)

			require.NoError(t, c.Start(ctx))
			defer c.Stop(ctx)
			var e *docket.Event
			select {
			case e = <-events:
			case <-time.After(30 * time.Second):
				t.Fatalf("no %s event", kind)
			}
			stored, err := c.JobGet(ctx, res.JobID())
			require.NoError(t, err)
			require.Equal(t, jobs.StateAvailable, stored.State)
			require.Greater(t, stored.RunAt.Sub(inserted.RunAt), 30*time.Minute, "the backoff (45m to 1h) or the snooze")
			require.True(t, e.Job.RunAt.Equal(stored.RunAt), "event's runAt %s, stored %s", e.Job.RunAt, stored.RunAt)
		})
	}
}

// A subscriber that never reads holds up no job: past its buffer its
// events are dropped and counted.
func TestSubscriberThatDoesNotReadDoesNotBlockTheWorker(t *testing.T) {
	t.Parallel()
	c := observedClient(t)
	ch, cancel := c.SubscribeConfig(docket.SubscribeConfig{Buffer: 2})
	defer cancel()

	names := make([]string, 10)
	for i := range names {
		names[i] = fmt.Sprint("ok", i)
	}
	runGreetings(t, c, names...) // would time out if a send blocked
	require.Len(t, ch, 2)
	require.EqualValues(t, 8, c.EventsDropped())
}

func decodeName(t *testing.T, j *jobs.Job) string {
	a, err := jobs.DecodeArgs[GreetArgs](j.Args)
	require.NoError(t, err)
	return a.Name
}

// Middleware wraps every handler, the first given outermost, and may turn
// a panic into an error of its own; Use after Start is refused.
func TestUseWrapsEveryHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	var mu sync.Mutex
	var trace []string
	record := func(s string) { mu.Lock(); trace = append(trace, s); mu.Unlock() }
	tag := func(name string) docket.Middleware {
		return func(next jobs.Handler) jobs.Handler {
			return jobs.HandlerFunc(func(ctx context.Context, job *jobs.Job) error {
				record(name + " in")
				err := next.Work(ctx, job)
				record(name + " out")
				return err
			})
		}
	}
	recoverPanics := func(next jobs.Handler) jobs.Handler {
		return jobs.HandlerFunc(func(ctx context.Context, job *jobs.Job) (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = jobs.Permanent(fmt.Errorf("recovered by middleware: %v", p))
				}
			}()
			return next.Work(ctx, job)
		})
	}
	docket.MustAddHandler(c, func(ctx context.Context, job *jobs.Job, a GreetArgs) error {
		record("handler " + a.Name)
		if a.Name == "panic" {
			panic("boom")
		}
		return nil
	}, jobs.KindOptions{})
	require.NoError(t, c.Use(tag("outer"), tag("inner")))
	require.NoError(t, c.Use(recoverPanics)) // added after the handler: wraps it all the same
	require.Error(t, c.Use(nil))

	require.NoError(t, c.Start(ctx))
	require.ErrorContains(t, c.Use(tag("late")), "after Start")
	res, err := c.Insert(ctx, GreetArgs{Name: "a"}, nil)
	require.NoError(t, err)
	waitFinished(ctx, c, res.ID)
	require.Equal(t, []string{"outer in", "inner in", "handler a", "inner out", "outer out"}, trace)

	res, err = c.Insert(ctx, GreetArgs{Name: "panic"}, nil)
	require.NoError(t, err)
	j := waitFinished(ctx, c, res.ID)
	require.Equal(t, jobs.StateDead, j.State)
	require.Equal(t, "recovered by middleware: boom", j.Errors[0].Message)
	require.NoError(t, c.Stop(ctx))
}

// An embedder's collector exports what the worker command serves, counted
// from this client's pool.
func TestCollectorCountsTheClientsJobs(t *testing.T) {
	t.Parallel()
	c := observedClient(t)
	col, err := docketprom.NewCollector(c, nil)
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(col))

	runGreetings(t, c, "ok", "ok2", "flaky", "bad")

	finished := func(outcome string) float64 {
		return metricValue(t, reg, "docket_jobs_finished_total", map[string]string{"kind": "greet", "queue": "default", "outcome": outcome})
	}
	require.EqualValues(t, 3, finished("succeeded"))
	require.EqualValues(t, 1, finished("retried"))
	require.EqualValues(t, 1, finished("dead"))
	names := gatheredNames(t, reg)
	for _, n := range []string{"docket_job_duration_seconds", "docket_claim_duration_seconds", "docket_jobs_claimed_total",
		"docket_heartbeats_total", "docket_job_retries_total", "docket_jobs_running", "docket_leader",
		"docket_stuck_handlers_total", "docket_jobs_released_unstarted_total", "docket_events_dropped_total"} {
		require.Contains(t, names, n)
	}
	_, err = docketprom.NewCollector(c, nil)
	require.ErrorContains(t, err, "after Start")
}

func gatheredNames(t *testing.T, reg *prometheus.Registry) []string {
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	return names
}

// metricValue returns the value of the counter of name with labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// RunWhileStarted's work runs from Start until Stop, which ends its
// context and waits for it; AddObserver and RunWhileStarted after Start
// fail.
func TestRunWhileStartedRunsForTheClientsLife(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := observedClient(t)
	started, ended := make(chan struct{}), make(chan struct{})
	require.NoError(t, c.RunWhileStarted(func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // Stop must wait for this
		close(ended)
	}))
	select {
	case <-started:
		t.Fatal("ran before Start")
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, c.Start(ctx))
	<-started
	require.ErrorContains(t, c.RunWhileStarted(func(context.Context) {}), "after Start")
	require.ErrorContains(t, c.AddObserver(worker.NopObserver{}), "after Start")
	require.NoError(t, c.Stop(ctx))
	select {
	case <-ended:
	default:
		t.Fatal("Stop returned before the work did")
	}
}
