package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// claimCounts counts, with the driver's command monitor, the claims a
// worker sends: single claims (a findAndModify of an available job) and
// the jobs they returned, and batch claims (a find of available jobs, then
// an update that stamps them running).
type claimCounts struct {
	mu         sync.Mutex
	singles    int // findAndModify claims sent
	singleJobs int // jobs they returned
	batchFinds int // batch claims' candidate reads sent
	batchJobs  int // jobs batch claims stamped
	pending    map[int64]string
}

func (c *claimCounts) get() claimCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return claimCounts{singles: c.singles, singleJobs: c.singleJobs, batchFinds: c.batchFinds, batchJobs: c.batchJobs}
}

// monitoredQueue returns a queue client on b's database whose claims c
// counts.
func (b *bundle) monitoredQueue(t *testing.T) (*queue.Client, *claimCounts) {
	t.Helper()
	c := &claimCounts{pending: map[int64]string{}}
	coll := store.Of(b.q).Collection().Name()
	available := func(doc bson.Raw, field string) bool {
		s, _ := doc.Lookup(field, "state").StringValueOK()
		return s == string(jobs.StateAvailable)
	}
	mon := &event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			if name, _ := e.Command.Lookup(e.CommandName).StringValueOK(); name != coll {
				return
			}
			kind := ""
			switch e.CommandName {
			case "findAndModify":
				if available(e.Command, "query") {
					kind = "single"
				}
			case "find":
				if available(e.Command, "filter") {
					kind = "find"
				}
			case "update":
				if ups, ok := e.Command.Lookup("updates").ArrayOK(); ok {
					if vals, _ := ups.Values(); len(vals) == 1 {
						if doc, ok := vals[0].DocumentOK(); ok {
							if s, _ := doc.Lookup("u", "$set", "state").StringValueOK(); s == string(jobs.StateRunning) && available(doc, "q") {
								kind = "stamp"
							}
						}
					}
				}
			}
			if kind == "" {
				return
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			switch kind {
			case "single":
				c.singles++
			case "find":
				c.batchFinds++
			}
			c.pending[e.RequestID] = kind
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			c.mu.Lock()
			defer c.mu.Unlock()
			kind, ok := c.pending[e.RequestID]
			delete(c.pending, e.RequestID)
			switch {
			case !ok:
			case kind == "single":
				if _, isDoc := e.Reply.Lookup("value").DocumentOK(); isDoc {
					c.singleJobs++
				}
			case kind == "stamp":
				n, _ := e.Reply.Lookup("nModified").AsInt64OK()
				c.batchJobs += int(n)
			}
		},
		Failed: func(_ context.Context, e *event.CommandFailedEvent) {
			c.mu.Lock()
			delete(c.pending, e.RequestID)
			c.mu.Unlock()
		},
	}
	client, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(mon))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	q, err := queue.New(client.Database(store.Of(b.q).Collection().Database().Name()), queue.Config{})
	require.NoError(t, err)
	return q, c
}

// claimWatch is an Observer that counts the claims that came back empty.
type claimWatch struct {
	worker.NopObserver
	empty atomic.Int64
}

func (o *claimWatch) Claimed(_ time.Duration, n int, err error) {
	if n == 0 && err == nil {
		o.empty.Add(1)
	}
}

// TestAdaptiveClaimsTakeBatchesUnderABacklog: with the default claim batch,
// a worker facing a backlog claims it in batches sized to its free slots:
// after two single claims whose jobs had waited, every job comes in a
// batch, and the claims are a fraction of the jobs.
func TestAdaptiveClaimsTakeBatchesUnderABacklog(t *testing.T) {
	b := setup(t)
	b.handle(t, "k", func(context.Context, *jobs.Job) error { return nil }, jobs.KindOptions{})
	const n = 60
	ins := make([]queue.Insert, n)
	for i := range ins {
		// Runnable for a while: a backlog.
		ins[i] = queue.Insert{Kind: "k", Opts: queue.InsertOpts{RunAt: time.Now().Add(-2 * time.Second)}}
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	q, counts := b.monitoredQueue(t)
	b.startOn(t, q, worker.Config{Concurrency: 10}, nil)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		done, err := store.Of(b.q).Collection().CountDocuments(b.ctx, bson.D{{Key: "state", Value: jobs.StateSucceeded}})
		require.NoError(c, err)
		assert.EqualValues(c, n, done)
	}, 60*time.Second, 20*time.Millisecond)
	c := counts.get()
	t.Logf("single claims %d (%d jobs), batch claims %d (%d jobs)", c.singles, c.singleJobs, c.batchFinds, c.batchJobs)
	require.Equal(t, n, c.singleJobs+c.batchJobs)
	require.Equal(t, 2, c.singleJobs, "two single claims found jobs that had waited: a backlog, claimed in batches from then on")
	require.Less(t, c.singleJobs+c.batchFinds, n/4, "claims are a fraction of the jobs")
}

// trickle enqueues jobs of kind "k" one at a time, each once the last has
// succeeded and the worker has since polled the empty queue, and returns
// their ids.
func (b *bundle) trickle(t *testing.T, watch *claimWatch, jobsN int) []string {
	t.Helper()
	var ids []string
	for range jobsN {
		id := b.enqueue(t, "k", nil, queue.InsertOpts{})
		b.waitState(t, id, jobs.StateSucceeded)
		empty := watch.empty.Load()
		require.Eventually(t, func() bool { return watch.empty.Load() > empty }, 10*time.Second, 5*time.Millisecond)
		ids = append(ids, id)
	}
	return ids
}

// TestAdaptiveClaimsTakeOneJobPerFindAndModifyForATrickle: with the
// default claim batch, jobs that come one at a time are each claimed by
// one findAndModify, never by a batch claim's find and update.
func TestAdaptiveClaimsTakeOneJobPerFindAndModifyForATrickle(t *testing.T) {
	b := setup(t)
	b.handle(t, "k", func(context.Context, *jobs.Job) error { return nil }, jobs.KindOptions{})
	require.Greater(t, worker.DefaultClaimBatch, 1, "the default claims in batches under a backlog")
	q, counts := b.monitoredQueue(t)
	watch := &claimWatch{}
	cfg := worker.Config{Concurrency: 4, Observer: watch, Lease: 2 * time.Second, HeartbeatInterval: 100 * time.Millisecond, Logger: b.log}
	cfg.PollMin, cfg.PollMax = 5*time.Millisecond, 500*time.Millisecond
	w, err := worker.New(q, b.reg, cfg)
	require.NoError(t, err)
	w.Start(context.Background())
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	b.trickle(t, watch, 8)
	c := counts.get()
	require.Equal(t, 8, c.singleJobs, "each job claimed by a findAndModify")
	require.Zero(t, c.batchFinds, "no batch claim for a trickle")
	require.Zero(t, c.batchJobs)
}

// TestAdaptiveClaimsNeverWaitForSlotsWithoutABacklog: a worker with one
// job stuck in its handler (its slot busy) and a trickle of others never
// holds a claim back to wait for that slot: with no backlog it claims at
// once with the slot it has.
func TestAdaptiveClaimsNeverWaitForSlotsWithoutABacklog(t *testing.T) {
	b := setup(t)
	b.handle(t, "k", func(context.Context, *jobs.Job) error { return nil }, jobs.KindOptions{})
	release := make(chan struct{})
	b.handle(t, "busy", func(ctx context.Context, _ *jobs.Job) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}, jobs.KindOptions{})
	busy := b.enqueue(t, "busy", nil, queue.InsertOpts{})
	q, counts := b.monitoredQueue(t)
	watch := &claimWatch{}
	var waits atomic.Int64
	cfg := worker.Config{Concurrency: 4, ClaimBatch: 4, Observer: watch, Lease: 5 * time.Second, HeartbeatInterval: time.Second}
	cfg.Logger = b.log
	cfg.PollMin, cfg.PollMax = 5*time.Millisecond, 500*time.Millisecond
	w, err := worker.New(q, b.reg, cfg)
	require.NoError(t, err)
	worker.SetOnGatherWait(w, func() { waits.Add(1) })
	w.Start(context.Background())
	t.Cleanup(func() { close(release); _ = w.StopAndCancel(context.Background()) })
	b.waitState(t, busy, jobs.StateRunning)

	b.trickle(t, watch, 6)
	require.Zero(t, waits.Load(), "a claim waited for the busy job's slot")
	c := counts.get()
	require.Equal(t, 7, c.singleJobs, "the busy job and each of the trickle by a findAndModify")
	require.Zero(t, c.batchFinds)
}
