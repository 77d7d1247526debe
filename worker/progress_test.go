package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
)

// progressWrites counts the commands that write a progress value (a
// document under the key progress: not a claim's $unset of it), and those
// of them that are not lease renewals.
type progressWrites struct{ carrying, notRenewal, renewals atomic.Int64 }

func (p *progressWrites) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		renewal := isRenewal(e.CommandName, e.Command)
		if renewal {
			p.renewals.Add(1)
		}
		if bytes.Contains(e.Command, []byte("\x03progress\x00")) {
			p.carrying.Add(1)
			if !renewal {
				p.notRenewal.Add(1)
			}
		}
	}}
}

// progressQueue returns a queue client on b's database whose progress
// writes are counted.
func (b *bundle) progressQueue(t *testing.T) (*queue.Client, *progressWrites) {
	t.Helper()
	var p progressWrites
	return b.queueSeenBy(t, p.monitor()), &p
}

// progressSeen is an Observer that records the progress the worker wrote.
type progressSeen struct {
	worker.NopObserver
	mu   sync.Mutex
	seen []jobs.ProgressReport
}

func (o *progressSeen) Progressed(j *jobs.Job) {
	o.mu.Lock()
	o.seen = append(o.seen, *j.Progress)
	o.mu.Unlock()
}

func (o *progressSeen) last() (jobs.ProgressReport, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.seen) == 0 {
		return jobs.ProgressReport{}, 0
	}
	return o.seen[len(o.seen)-1], len(o.seen)
}

// waitProgress polls until job id's stored progress has message msg.
func (b *bundle) waitProgress(t *testing.T, id, msg string) *jobs.Job {
	t.Helper()
	var j *jobs.Job
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		j, err = b.q.Get(b.ctx, id)
		require.NoError(c, err)
		require.NotNil(c, j.Progress)
		assert.Equal(c, msg, j.Progress.Message)
	}, 20*time.Second, 10*time.Millisecond, "job %s never showed progress %q", id, msg)
	return j
}

// TestProgressRidesOnTheRenewals: a handler's hundred reports reach the
// job document, the last one winning, through the lease renewals alone:
// every command that writes progress is a renewal. The observer hears of
// what was written; the worker counts every report.
func TestProgressRidesOnTheRenewals(t *testing.T) {
	b := setup(t)
	release := make(chan struct{})
	b.handle(t, "k", func(ctx context.Context, _ *jobs.Job) error {
		for i := 1; i <= 100; i++ {
			if err := jobs.Progress(ctx, float64(i)/100, fmt.Sprintf("step %d", i)); err != nil {
				return err
			}
		}
		<-release
		return nil
	}, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{})
	q, writes := b.progressQueue(t)
	seen := &progressSeen{}
	w := b.startOn(t, q, worker.Config{Observer: seen}, nil)

	j := b.waitProgress(t, id, "step 100")
	require.Equal(t, jobs.StateRunning, j.State)
	require.Equal(t, 1.0, j.Progress.Fraction)
	require.False(t, j.Progress.At.IsZero())
	require.Zero(t, writes.notRenewal.Load(), "a command other than a renewal wrote progress")
	require.NotZero(t, writes.carrying.Load())
	require.LessOrEqual(t, writes.carrying.Load(), writes.renewals.Load())
	require.Equal(t, int64(100), w.Stats().ProgressReports)
	require.Eventually(t, func() bool { p, _ := seen.last(); return p.Message == "step 100" }, 5*time.Second, 10*time.Millisecond)
	_, n := seen.last()
	require.Equal(t, writes.carrying.Load(), int64(n), "one observation per value written")

	close(release)
	done := b.waitState(t, id, jobs.StateSucceeded)
	require.Equal(t, "step 100", done.Progress.Message, "a finished job keeps its last progress")
}

// TestStaleWorkerWritesNoProgress: once another holder has the job, the
// worker that lost its lease writes none of the progress its handler goes
// on reporting: the renewal that would carry it matches nothing and
// cancels the handler.
func TestStaleWorkerWritesNoProgress(t *testing.T) {
	b := setup(t)
	taken := make(chan struct{})
	cause := make(chan error, 1)
	b.handle(t, "k", func(ctx context.Context, _ *jobs.Job) error {
		require.NoError(t, jobs.Progress(ctx, 0.1, "mine"))
		<-taken
		require.NoError(t, jobs.Progress(ctx, 0.9, "stale"))
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil
	}, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{})
	b.start(t, worker.Config{})
	b.waitProgress(t, id, "mine")
	// Another holder takes the job, as after a reap and a new claim, and
	// reports its own progress.
	theirs := jobs.ProgressReport{Fraction: 0.2, Message: "theirs", At: time.Now().UTC().Truncate(time.Millisecond)}
	_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": id},
		bson.M{"$set": bson.M{"leaseToken": "someone-else", "owner": "w2", "progress": theirs}})
	require.NoError(t, err)
	close(taken)
	select {
	case c := <-cause:
		require.ErrorIs(t, c, jobs.ErrLeaseLost)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was not cancelled after its lease was lost")
	}
	j, err := b.q.Get(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, &theirs, j.Progress)
}

// TestRetryShowsNoOldProgress: the second attempt of a job does not show
// the progress its first attempt reported, neither while it waits to run
// again nor while it runs.
func TestRetryShowsNoOldProgress(t *testing.T) {
	b := setup(t)
	var attempts atomic.Int32
	second := make(chan *jobs.Job, 1)
	release := make(chan struct{})
	b.handle(t, "k", func(ctx context.Context, j *jobs.Job) error {
		if attempts.Add(1) == 1 {
			require.NoError(t, jobs.Progress(ctx, 0.5, "first attempt"))
			b.waitProgress(t, j.ID, "first attempt")
			return errors.New("fail once")
		}
		got, err := b.q.Get(b.ctx, j.ID)
		require.NoError(t, err)
		second <- got
		<-release
		return nil
	}, jobs.KindOptions{})
	id := b.enqueue(t, "k", nil, queue.InsertOpts{})
	b.start(t, worker.Config{})
	select {
	case j := <-second:
		require.Equal(t, 2, j.Attempt)
		require.Nil(t, j.Progress, "the second attempt shows the first one's progress")
	case <-time.After(20 * time.Second):
		t.Fatal("the job was not retried")
	}
	close(release)
	j := b.waitState(t, id, jobs.StateSucceeded)
	require.Nil(t, j.Progress)
}

// endings is an Observer that records the progress each ended attempt's
// job carries, by job id.
type endings struct {
	worker.NopObserver
	mu  sync.Mutex
	got map[string][]*jobs.ProgressReport
}

func (e *endings) Finished(j *jobs.Job, _ worker.Outcome, _ time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got[j.ID] = append(e.got[j.ID], j.Progress)
}

// TestFinishingWriteCarriesTheLastReport: a report made after the last
// renewal (here, jobs shorter than one renewal interval) is stored by the
// write that finishes the job, succeeded or dead, and carried by its
// ended attempt's event; a failure that retries the job stores none, and
// its next attempt, reporting nothing, ends with none.
func TestFinishingWriteCarriesTheLastReport(t *testing.T) {
	b := setup(t)
	var retried atomic.Int32
	b.handle(t, "done", func(ctx context.Context, _ *jobs.Job) error {
		return jobs.Progress(ctx, 1, "done")
	}, jobs.KindOptions{})
	b.handle(t, "dead", func(ctx context.Context, _ *jobs.Job) error {
		require.NoError(t, jobs.Progress(ctx, 0.3, "at 30%"))
		return jobs.Permanent(errors.New("cannot go on"))
	}, jobs.KindOptions{})
	b.handle(t, "retry", func(ctx context.Context, _ *jobs.Job) error {
		if retried.Add(1) == 1 {
			require.NoError(t, jobs.Progress(ctx, 0.6, "first attempt"))
			return errors.New("once more")
		}
		return nil
	}, jobs.KindOptions{})
	done := b.enqueue(t, "done", nil, queue.InsertOpts{})
	dead := b.enqueue(t, "dead", nil, queue.InsertOpts{})
	retry := b.enqueue(t, "retry", nil, queue.InsertOpts{})
	seen := &endings{got: map[string][]*jobs.ProgressReport{}}
	b.start(t, worker.Config{Lease: time.Minute, HeartbeatInterval: 20 * time.Second, Observer: seen})

	require.Equal(t, "done", b.waitState(t, done, jobs.StateSucceeded).Progress.Message)
	require.Equal(t, "at 30%", b.waitState(t, dead, jobs.StateDead).Progress.Message)
	require.Nil(t, b.waitState(t, retry, jobs.StateSucceeded).Progress)
	require.Eventually(t, func() bool {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		return len(seen.got[done]) == 1 && len(seen.got[dead]) == 1 && len(seen.got[retry]) == 2
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, "done", seen.got[done][0].Message)
	require.Equal(t, "at 30%", seen.got[dead][0].Message)
	require.Equal(t, []*jobs.ProgressReport{nil, nil}, seen.got[retry], "a retried attempt's event carries no progress")
}
