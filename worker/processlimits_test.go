package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// handlersAt counts, per worker id and kind, the handlers running now and
// the most that ran at once; and the most y handlers that ran in a worker
// while it ran 2 x handlers (the limit in TestProcessLimitHoldsInEachWorker).
type handlersAt struct {
	mu         sync.Mutex
	now, most  map[string]map[string]int // worker id → kind → handlers
	yBesideTwo map[string]int            // worker id → y handlers
}

func newHandlersAt() *handlersAt {
	return &handlersAt{now: map[string]map[string]int{}, most: map[string]map[string]int{}, yBesideTwo: map[string]int{}}
}

// run counts a handler of j in its owner while it sleeps d.
func (h *handlersAt) run(j *jobs.Job, d time.Duration) {
	h.mu.Lock()
	if h.now[j.Owner] == nil {
		h.now[j.Owner], h.most[j.Owner] = map[string]int{}, map[string]int{}
	}
	now := h.now[j.Owner]
	now[j.Kind]++
	h.most[j.Owner][j.Kind] = max(h.most[j.Owner][j.Kind], now[j.Kind])
	if now["x"] == 2 {
		h.yBesideTwo[j.Owner] = max(h.yBesideTwo[j.Owner], now["y"])
	}
	h.mu.Unlock()
	time.Sleep(d)
	h.mu.Lock()
	now[j.Kind]--
	h.mu.Unlock()
}

// TestProcessLimitHoldsInEachWorker: two workers of concurrency 10 on one
// database, each with ProcessLimits kind:x=2, the second through a slow
// proxy so that it claims ahead (its held jobs wait for slots). Sampled
// throughout, no worker ever holds more than 2 x jobs, waiting or running
// (its own count, and the jobs the database shows it holding), nor runs
// more than 2 x handlers; each reaches 2; every job succeeds once; and the
// y jobs, which no limit bounds, run beside them at full concurrency.
func TestProcessLimitHoldsInEachWorker(t *testing.T) {
	b := newSlowBundle(t, 20*time.Millisecond)
	at := newHandlersAt()
	var runs sync.Map
	count := func(j *jobs.Job) {
		n, _ := runs.LoadOrStore(j.ID, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	require.NoError(t, b.reg.Add("x", jobs.HandlerFunc(func(_ context.Context, j *jobs.Job) error {
		count(j)
		at.run(j, 150*time.Millisecond)
		return nil
	}), jobs.KindOptions{}))
	require.NoError(t, b.reg.Add("y", jobs.HandlerFunc(func(_ context.Context, j *jobs.Job) error {
		count(j)
		at.run(j, 250*time.Millisecond)
		return nil
	}), jobs.KindOptions{}))
	// The x jobs first, so that the claims prefer them: what the limit
	// leaves out is what lets the y jobs in.
	ids := b.enqueue(t, "x", 24, time.Now().Add(-time.Minute))
	// Enough y jobs to outlast the x jobs in both workers however the
	// claims split them (with 80, a loaded machine sometimes let the fast
	// worker drain them all before the slow one ran its x jobs in pairs).
	ids = append(ids, b.enqueue(t, "y", 160, time.Now().Add(-time.Second))...)

	limits := map[string]int{queue.KindLimit("x"): 2}
	var ws []*worker.Worker
	for _, q := range []*queue.Client{b.fast, b.slow} {
		w, err := worker.New(q, b.reg, worker.Config{
			Concurrency: 10, ProcessLimits: limits, Logger: b.log,
			PollMin: 5 * time.Millisecond, PollMax: 50 * time.Millisecond,
		})
		require.NoError(t, err)
		ws = append(ws, w)
	}

	// Samplers: each worker's own count, and the x jobs the database
	// shows each worker holding (claimed, waiting or running, until their
	// outcome is written).
	stop := make(chan struct{})
	var sampling sync.WaitGroup
	var mostHeld, mostInDB, mostWaiting atomic.Int64
	sampling.Add(2)
	go func() {
		defer sampling.Done()
		for {
			for _, w := range ws {
				mostHeld.Store(max(mostHeld.Load(), int64(worker.ProcessHeld(w)["kind:x"])))
				mostWaiting.Store(max(mostWaiting.Load(), int64(w.Waiting())))
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	go func() {
		defer sampling.Done()
		for {
			cur, err := b.db.Collection(b.fast.CollectionName()).Aggregate(b.ctx, bson.A{
				bson.D{{Key: "$match", Value: bson.D{{Key: "kind", Value: "x"}, {Key: "state", Value: jobs.StateRunning}}}},
				bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$owner"}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
			})
			if err == nil {
				var rows []struct {
					N int64 `bson:"n"`
				}
				if cur.All(b.ctx, &rows) == nil {
					for _, r := range rows {
						mostInDB.Store(max(mostInDB.Load(), r.N))
					}
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()

	for _, w := range ws {
		w.Start(context.Background())
		t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	}
	require.Eventually(t, func() bool {
		n, err := b.db.Collection(b.fast.CollectionName()).CountDocuments(b.ctx, bson.D{{Key: "state", Value: bson.D{{Key: "$ne", Value: jobs.StateSucceeded}}}})
		return err == nil && n == 0
	}, 2*time.Minute, 20*time.Millisecond, "every job succeeds")
	close(stop)
	sampling.Wait()

	for _, id := range ids {
		n, ok := runs.Load(id)
		require.True(t, ok, "job %s never ran", id)
		require.Equal(t, int64(1), n.(*atomic.Int64).Load(), "job %s", id)
	}
	at.mu.Lock()
	defer at.mu.Unlock()
	t.Logf("handlers at once per worker and kind: %v; y beside 2 x: %v; x held at most %d (database: %d); most waiting for a slot %d",
		at.most, at.yBesideTwo, mostHeld.Load(), mostInDB.Load(), mostWaiting.Load())
	for _, w := range ws {
		require.Equal(t, 2, at.most[w.ID()]["x"], "x handlers at once in %s: the limit, reached", w.ID())
		// Other kinds run in the slots the limit leaves: all 8 of them
		// in most runs, 5 and 3 under -race on a loaded machine (a y
		// batch ended while the x jobs ran). How many is a schedule;
		// that they run beside the limited kind is the point.
		require.GreaterOrEqual(t, at.yBesideTwo[w.ID()], 2, "y handlers in %s beside 2 x: the other slots", w.ID())
	}
	require.Equal(t, int64(2), mostHeld.Load(), "x jobs a worker held at once, waiting or running")
	require.LessOrEqual(t, mostInDB.Load(), int64(2), "x jobs the database showed a worker holding")
	for _, w := range ws { // a job's goroutine uncounts it just after its write
		require.Eventually(t, func() bool { return len(worker.ProcessHeld(w)) == 0 }, 10*time.Second, 5*time.Millisecond,
			"x jobs left counted: %v", worker.ProcessHeld(w))
	}
}

// claimLog records how many jobs each claim brought.
type claimLog struct {
	worker.NopObserver
	mu  sync.Mutex
	got []int
}

func (c *claimLog) Claimed(_ time.Duration, n int, err error) {
	if err == nil {
		c.mu.Lock()
		c.got = append(c.got, n)
		c.mu.Unlock()
	}
}

func (c *claimLog) claims() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.got...)
}

// TestProcessLimitFullSendsNoClaim: a worker whose only kind (or only
// queue) is at its process limit of 1 sends no claim until its job ends,
// and each claim asks for the room left, one job, however many slots are
// free. With polls an hour apart, it makes one claim per job and one
// that finds none: no claim finds the limit full.
func TestProcessLimitFullSendsNoClaim(t *testing.T) {
	for _, limit := range []string{queue.KindLimit("x"), queue.QueueLimit("a")} {
		t.Run(limit, func(t *testing.T) {
			b := setup(t)
			const n = 5
			var running, most atomic.Int64
			b.handle(t, "x", func(context.Context, *jobs.Job) error {
				most.Store(max(most.Load(), running.Add(1)))
				time.Sleep(20 * time.Millisecond)
				running.Add(-1)
				return nil
			}, jobs.KindOptions{})
			ids := make([]string, n)
			for i := range ids {
				ids[i] = b.enqueue(t, "x", nil, queue.InsertOpts{Queue: "a"})
			}
			obs := &claimLog{}
			w, err := worker.New(b.q, b.reg, worker.Config{
				Logger: b.log, Concurrency: 4, Queues: []string{"a"}, Observer: obs,
				ProcessLimits: map[string]int{limit: 1},
				PollMin:       time.Hour, PollMax: time.Hour,
			})
			require.NoError(t, err)
			w.Start(context.Background())
			t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
			for _, id := range ids {
				b.waitState(t, id, jobs.StateSucceeded)
			}
			require.Eventually(t, func() bool { return len(obs.claims()) == n+1 }, 10*time.Second, 10*time.Millisecond,
				"the claim after the last job ends finds nothing")
			require.Equal(t, []int{1, 1, 1, 1, 1, 0}, obs.claims())
			require.Equal(t, int64(1), most.Load())
			require.Equal(t, 1, b.logs.FilterMessage("process limits: the most jobs of each this process holds at once").Len(),
				"the worker logs its process limits at start")
		})
	}
}
