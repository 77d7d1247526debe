package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// PartitionsBench is the partitions run, at a real backlog (b.o.PartitionJobs
// no-op jobs): a burn-down of jobs spread over Customers customers
// (partitionCustomers, or half the jobs when fewer)
// without a limit and under a partition limit that does not bind, and a
// hot customer whose jobs fill the head of the queue under 1 per customer,
// timed until every other customer's jobs ran.
type PartitionsBench struct {
	Customers int       `json:"customers"`
	Free      *BurnDown `json:"free"`
	// NotBinding is the burn-down under partitionLoose per customer.
	NotBinding *BurnDown `json:"notBinding"`
	PerLoose   int       `json:"perLoose"`
	// Hot: Jobs jobs of which all but Others are one customer's, at the
	// head of the queue; Others run, one per customer at a time, in
	// OthersSeconds, while the hot customer runs HotRan of its own.
	Hot *HotPartition `json:"hot"`
}

// HotPartition is the hot customer's part of the partitions run.
type HotPartition struct {
	Jobs           int     `json:"jobs"`
	Others         int     `json:"others"`
	OthersSeconds  float64 `json:"othersSeconds"`
	OthersPerSec   float64 `json:"othersPerSec"`
	HotRan         int64   `json:"hotRan"`
	CommandsPerJob float64 `json:"commandsPerJob"` // per job run, hot or not
}

// The partitions run's shape.
const (
	partitionCustomers = 1000
	partitionLoose     = 5
	partitionKind      = "noop"
)

// partitions makes the partitions run.
func (b *bencher) partitions(ctx context.Context) (*PartitionsBench, error) {
	n := b.o.PartitionJobs
	customers := max(2, min(partitionCustomers, n/2))
	r := &PartitionsBench{Customers: customers, PerLoose: partitionLoose}
	spread := func(ctx context.Context, q *queue.Client) error {
		return b.enqueueCustomers(ctx, q, n, func(i int) int { return i % customers })
	}
	var err error
	if r.Free, err = b.burnDownWith(ctx, "part-none", n, b.o.Procs, b.o.Concurrency, defaultClaimBatch, nil, spread); err != nil {
		return nil, err
	}
	loose := func(ctx context.Context, q *queue.Client) error {
		if err := q.SetPartitionLimit(ctx, queue.KindLimit(partitionKind), "customerId", partitionLoose, "bench"); err != nil {
			return err
		}
		time.Sleep(2*queue.LimitRefresh + 100*time.Millisecond) // set long before the backlog, as in practice
		return spread(ctx, q)
	}
	if r.NotBinding, err = b.burnDownWith(ctx, "part-loose", n, b.o.Procs, b.o.Concurrency, defaultClaimBatch, nil, loose); err != nil {
		return nil, err
	}
	if r.Hot, err = b.hotPartition(ctx, n, customers); err != nil {
		return nil, err
	}
	return r, nil
}

// enqueueCustomers enqueues n no-op jobs, job i of customer customer(i).
func (b *bencher) enqueueCustomers(ctx context.Context, q *queue.Client, n int, customer func(int) int) error {
	for i := 0; i < n; i += 500 {
		ins := make([]queue.Insert, min(500, n-i))
		for k := range ins {
			ins[k] = queue.Insert{Kind: partitionKind, Args: bson.M{"customerId": customer(i + k)}}
		}
		if _, err := q.EnqueueMany(ctx, ins); err != nil {
			return err
		}
	}
	return nil
}

// hotPartition enqueues n jobs, the first n - customers + 1 of customer 0
// and then one of each other customer, under 1 per customer, and times
// the workers until every other customer's job ran.
func (b *bencher) hotPartition(ctx context.Context, n, customers int) (*HotPartition, error) {
	db, q, err := b.freshDB(ctx, "part-hot")
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Drop(context.Background()) }()
	if err := q.SetPartitionLimit(ctx, queue.KindLimit(partitionKind), "customerId", 1, "bench"); err != nil {
		return nil, err
	}
	others := customers - 1
	hot := n - others
	if err := b.enqueueCustomers(ctx, q, n, func(i int) int { return max(0, i-hot+1) }); err != nil {
		return nil, err
	}
	ps, err := b.startWorkers(db.Name(), b.o.Procs, b.o.Concurrency, defaultClaimBatch)
	if err != nil {
		return nil, err
	}
	coll := store.Of(q).Collection()
	othersDone := bson.D{{Key: "state", Value: jobs.StateSucceeded}, {Key: "args.customerId", Value: bson.D{{Key: "$ne", Value: 0}}}}
	start := time.Now()
	for {
		done, err := coll.CountDocuments(ctx, othersDone)
		if err != nil {
			stopAll(ps)
			return nil, err
		}
		if done >= int64(others) {
			break
		}
		if time.Since(start) > 10*time.Minute {
			stopAll(ps)
			return nil, fmt.Errorf("%d of the %d other customers' jobs ran after 10 min", done, others)
		}
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(start)
	us, err := stopAll(ps)
	if err != nil {
		return nil, err
	}
	hotRan, err := coll.CountDocuments(ctx, bson.D{{Key: "state", Value: jobs.StateSucceeded}, {Key: "args.customerId", Value: 0}})
	if err != nil {
		return nil, err
	}
	var cmds int64
	for _, u := range us {
		cmds += u.Commands
	}
	return &HotPartition{Jobs: n, Others: others, OthersSeconds: elapsed.Seconds(), OthersPerSec: float64(others) / elapsed.Seconds(),
		HotRan: hotRan, CommandsPerJob: float64(cmds) / float64(int64(others)+hotRan)}, nil
}

func (r *PartitionsBench) write(w io.Writer) {
	fmt.Fprintf(w, "partitions: %d no-op jobs over %d customers: %.1f jobs/s without a limit, %.1f jobs/s (%.1f%%) under %d per customer, %+.3f commands/job\n",
		r.Free.Jobs, r.Customers, r.Free.JobsPerSec, r.NotBinding.JobsPerSec, 100*r.NotBinding.JobsPerSec/r.Free.JobsPerSec,
		r.PerLoose, r.NotBinding.CommandsPerJob-r.Free.CommandsPerJob)
	h := r.Hot
	fmt.Fprintf(w, "partitions: a hot customer's %d jobs ahead of %d others' under 1 per customer: the others ran in %.1fs (%.1f jobs/s) while the hot one ran %d; %.2f commands/job\n",
		h.Jobs-h.Others, h.Others, h.OthersSeconds, h.OthersPerSec, h.HotRan, h.CommandsPerJob)
}
