package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// downstream is an HTTP service that allows partN concurrent calls per
// customer: it counts the calls in flight per customer, records the most
// it saw of each and in all, and every call over the allowance. A call
// takes callTime, or less when its caller goes away (a SIGKILLed worker's
// connection closes).
type downstream struct {
	allowed  int
	callTime time.Duration

	mu       sync.Mutex
	inFlight map[string]int    // by customer
	jobs     map[string]string // the job of each call in flight, by job → customer
	most     map[string]int    // by customer
	mostAll  int
	all      int
	over     []string
	served   map[string]int // calls answered 200, by job
	calls    map[string]int // calls begun, by job

	// held keeps every call in flight until release: the test picks its
	// victim among calls that cannot end before it looks, however slowly
	// the machine runs the test beside the workers.
	held    chan struct{}
	release func()
}

func newDownstream(allowed int, callTime time.Duration) *downstream {
	held := make(chan struct{})
	var once sync.Once
	return &downstream{allowed: allowed, callTime: callTime, inFlight: map[string]int{}, jobs: map[string]string{},
		most: map[string]int{}, served: map[string]int{}, calls: map[string]int{},
		held: held, release: func() { once.Do(func() { close(held) }) }}
}

func (d *downstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, job := r.URL.Query().Get("customer"), r.URL.Query().Get("job")
	d.mu.Lock()
	d.inFlight[c]++
	d.all++
	d.jobs[job] = c
	d.calls[job]++
	d.most[c] = max(d.most[c], d.inFlight[c])
	d.mostAll = max(d.mostAll, d.all)
	if d.inFlight[c] > d.allowed {
		d.over = append(d.over, fmt.Sprintf("%d calls for %s at once (job %s attempt %s) at %s",
			d.inFlight[c], c, job, r.URL.Query().Get("attempt"), time.Now().Format(time.StampMilli)))
	}
	d.mu.Unlock()
	done := false
	select {
	case <-d.held:
		select {
		case <-time.After(d.callTime):
			done = true
		case <-r.Context().Done():
		}
	case <-r.Context().Done():
	}
	d.mu.Lock()
	d.inFlight[c]--
	d.all--
	delete(d.jobs, job)
	if done {
		d.served[job]++
	}
	d.mu.Unlock()
	if !done {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
}

// callingJob returns a job that has a call in flight now, and its customer.
func (d *downstream) callingJob(customer string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for j, c := range d.jobs {
		if c == customer {
			return j, true
		}
	}
	return "", false
}

// TestPartitionHoldsAcrossWorkersAndSIGKILL: the call kind is partitioned
// 2 per args.order.customerId (a dotted path) through the queue client,
// with no total, before three worker processes of a concurrency of 4
// start. 40 jobs each call a downstream that allows 2 concurrent calls per
// customer: 16 for c1, 8 for c2, 8 whose customerId is the number 7 as an
// int32, an int64 or a double (one customer, "n7", to the downstream as to
// MongoDB's equality), and 8 with no customerId or a null one (one
// customer, "none"). A worker is SIGKILLed while a call of c1's is in
// flight. The downstream never sees 3 calls of one customer at once, does
// see 2 of c1's (the limit is reached) and more than 2 in all (partitions
// run side by side); every job succeeds, the killed one's run again, each
// answered once at least; no partition slot is left held.
func TestPartitionHoldsAcrossWorkersAndSIGKILL(t *testing.T) {
	t.Parallel()
	const perCustomer = 2
	down := newDownstream(perCustomer, 300*time.Millisecond)
	srv := httptest.NewServer(down)
	t.Cleanup(srv.Close)
	t.Cleanup(down.release)

	db := testdb.NewDB(t)
	q := newQueue(t, db)
	ctx := context.Background()
	must(t, "set the partition limit", func() error {
		return q.SetPartitionLimit(ctx, queue.KindLimit("call"), "order.customerId", perCustomer, "e2e")
	})

	var ins []queue.Insert
	add := func(customer string, n int, id func(i int) any) {
		for i := range n {
			order := bson.D{{Key: "n", Value: i}}
			if v := id(i); v != "missing" {
				order = append(order, bson.E{Key: "customerId", Value: v})
			}
			ins = append(ins, queue.Insert{Kind: "call", Args: bson.D{
				{Key: "url", Value: srv.URL}, {Key: "customer", Value: customer}, {Key: "order", Value: order},
			}})
		}
	}
	add("c1", 16, func(int) any { return "c1" })
	add("c2", 8, func(int) any { return "c2" })
	add("n7", 8, func(i int) any { return []any{int32(7), int64(7), 7.0}[i%3] })
	add("none", 8, func(i int) any { return []any{"missing", nil}[i%2] })
	// Interleaved, so that every worker's first claims meet every customer.
	for i := range ins {
		j := (i * 7) % len(ins)
		ins[i], ins[j] = ins[j], ins[i]
	}
	res := enqueueMany(t, q, ins)

	args := append([]string{"--concurrency", "4"}, fastWorker...)
	ids := map[string]*proc{}
	for i := range 3 {
		p := startWorker(t, db, fmt.Sprintf("worker-%d", i), args...)
		ids[p.workerID()] = p
	}

	// Kill the worker whose job's call of c1's is in flight, once c1's
	// partition has been full: after the kill, the killed job holds one of
	// c1's two slots until the reaper frees it, so c1's remaining jobs may
	// all run one at a time (seen once: c1 never had 2 calls at once). The
	// downstream holds the calls until then.
	var victimJob string
	for deadline := time.Now().Add(time.Minute); victimJob == ""; time.Sleep(2 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "no job of c1's full partition was seen calling")
		down.mu.Lock()
		full := down.most["c1"] >= perCustomer
		down.mu.Unlock()
		if !full {
			continue
		}
		id, ok := down.callingJob("c1")
		if !ok {
			continue
		}
		j, err := q.Get(ctx, id)
		if err != nil || j.State != jobs.StateRunning || ids[j.Owner] == nil {
			continue
		}
		victimJob = id
		ids[j.Owner].signal(syscall.SIGKILL)
		ids[j.Owner].wait(10 * time.Second)
	}
	down.release()

	require.Eventually(t, func() bool {
		n, err := db.Collection("jobs").CountDocuments(ctx, bson.M{"kind": "call", "state": bson.M{"$ne": jobs.StateSucceeded}})
		return err == nil && n == 0
	}, 2*time.Minute, 50*time.Millisecond, "every job succeeds")

	down.mu.Lock()
	defer down.mu.Unlock()
	t.Logf("partition: %d jobs; the downstream saw at most %v calls at once per customer, %d in all; the killed worker's job %s called %d times",
		len(res), down.most, down.mostAll, victimJob, down.calls[victimJob])
	require.Empty(t, down.over, "the downstream allows %d concurrent calls per customer", perCustomer)
	require.Equal(t, perCustomer, down.most["c1"], "c1's partition was full at times")
	require.Greater(t, down.mostAll, perCustomer, "partitions ran side by side")
	require.Len(t, down.most, 4, "calls for c1, c2, n7 and none: %v", down.most)
	require.GreaterOrEqual(t, down.calls[victimJob], 2, "the killed worker's job ran again")
	for _, r := range res {
		require.GreaterOrEqual(t, down.served[r.ID], 1, "job %s was answered", r.ID)
	}
	require.Zero(t, count(t, db.Collection("jobs"), bson.M{"kindPartSlot": bson.M{"$exists": true}}), "no partition slot left held")
	var ls []queue.RunLimit
	must(t, "read the run limits", func() (err error) { ls, err = q.RunLimits(ctx); return err })
	require.Len(t, ls, 1)
	require.Equal(t, "order.customerId", ls[0].PartitionBy)
	require.Zero(t, ls[0].Partitions, "no partition runs a job")
}
