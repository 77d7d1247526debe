package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// rawLoop is the baseline: procs clients of concurrency goroutines each, in
// this process, each goroutine claiming with one findAndModify and
// finishing with one update, as the seeds' loop did: no framework, no
// leases renewed, no retries.
func (b *bencher) rawLoop(ctx context.Context) (*BurnDown, error) {
	db, q, err := b.freshDB(ctx, "raw")
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Drop(context.Background()) }()
	if err := b.enqueue(ctx, q, b.o.Jobs, "noop", nil); err != nil {
		return nil, err
	}
	mon := newMonitor(q.Collection().Name())
	var colls []*mongo.Collection
	for range b.o.Procs {
		c, err := mongo.Connect(options.Client().ApplyURI(b.uri).SetMonitor(mon.commandMonitor()))
		if err != nil {
			return nil, err
		}
		defer func() { _ = c.Disconnect(context.Background()) }()
		colls = append(colls, c.Database(db.Name()).Collection(q.Collection().Name(),
			options.Collection().SetWriteConcern(writeconcern.Majority())))
	}
	sort := bson.D{{Key: "priority", Value: -1}, {Key: "runAt", Value: 1}, {Key: "_id", Value: 1}}
	errs := make(chan error, b.o.Procs*b.o.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for _, coll := range colls {
		for range b.o.Concurrency {
			wg.Go(func() {
				for {
					t := time.Now()
					token := uuid.NewString()
					var j jobs.Job
					err := coll.FindOneAndUpdate(ctx,
						bson.D{{Key: "state", Value: jobs.StateAvailable}, {Key: "kind", Value: "noop"}, {Key: "runAt", Value: bson.D{{Key: "$lte", Value: t}}}},
						bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: jobs.StateRunning}, {Key: "leaseToken", Value: token}, {Key: "heartbeatAt", Value: t}}},
							{Key: "$inc", Value: bson.D{{Key: "attempt", Value: 1}}}},
						options.FindOneAndUpdate().SetSort(sort)).Decode(&j)
					if errors.Is(err, mongo.ErrNoDocuments) {
						return
					}
					if err == nil {
						_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: j.ID}, {Key: "leaseToken", Value: token}},
							bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: jobs.StateSucceeded}, {Key: "finishedAt", Value: time.Now()}}}})
					}
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	s := mon.snapshot(true)
	r := &BurnDown{Name: "raw", Jobs: b.o.Jobs, Procs: b.o.Procs, Concurrency: b.o.Concurrency, ClaimBatch: 1,
		Seconds: elapsed.Seconds(), JobsPerSec: float64(b.o.Jobs) / elapsed.Seconds()}
	r.addUsage([]usage{{Commands: s.Commands, ByName: s.ByName, ClaimMs: s.ClaimMs}})
	r.PerProcess = nil // one process, shared with the bench itself
	starts, _, err := jobTimes(ctx, q)
	if err != nil {
		return nil, err
	}
	r.StartP50, r.StartP99 = pct(starts, 50), pct(starts, 99)
	return r, nil
}

// steady enqueues jobs one at a time at a fixed rate while the workers run,
// then waits for the last to finish.
func (b *bencher) steady(ctx context.Context) (*Steady, error) {
	db, q, err := b.freshDB(ctx, "steady")
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Drop(context.Background()) }()
	ps, err := b.startWorkers(db.Name(), b.o.Procs, b.o.Concurrency, b.o.SteadyClaimBatch)
	if err != nil {
		return nil, err
	}
	every := time.Duration(float64(time.Second) / b.o.SteadyRate)
	tick := time.NewTicker(every)
	n := 0
	start := time.Now()
	for time.Since(start) < b.o.SteadyFor {
		<-tick.C
		if _, err := q.Enqueue(ctx, "noop", nil, queue.InsertOpts{}); err != nil {
			tick.Stop()
			stopAll(ps)
			return nil, err
		}
		n++
	}
	tick.Stop()
	enqueued := time.Since(start)
	for completed(ps) < int64(n) {
		if time.Since(start) > b.o.SteadyFor+5*time.Minute {
			stopAll(ps)
			return nil, fmt.Errorf("%d of %d jobs completed", completed(ps), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	drained := time.Since(start)
	us, err := stopAll(ps)
	if err != nil {
		return nil, err
	}
	starts, finishes, err := jobTimes(ctx, q)
	if err != nil {
		return nil, err
	}
	var cmds int64
	for _, u := range us {
		cmds += u.Commands
	}
	return &Steady{
		Jobs: n, Procs: b.o.Procs, Concurrency: b.o.Concurrency, ClaimBatch: b.o.SteadyClaimBatch,
		RatePerSec: float64(n) / enqueued.Seconds(), DrainSeconds: (drained - enqueued).Seconds(),
		LagP50: pct(starts, 50), LagP99: pct(starts, 99),
		LatencyP50: pct(finishes, 50), LatencyP99: pct(finishes, 99),
		CommandsPerJob: float64(cmds) / float64(n),
	}, nil
}

// idle runs one worker process on an empty queue and counts its commands
// per second after the warm-up.
func (b *bencher) idle(ctx context.Context) (*Idle, error) {
	db, _, err := b.freshDB(ctx, "idle")
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Drop(context.Background()) }()
	ps, err := b.startWorkers(db.Name(), 1, b.o.Concurrency, 1)
	if err != nil {
		return nil, err
	}
	time.Sleep(b.o.IdleWarmup)
	c0 := ps[0].snapshot().Commands
	t0 := time.Now()
	time.Sleep(b.o.IdleFor)
	c1 := ps[0].snapshot().Commands
	secs := time.Since(t0).Seconds()
	us, err := stopAll(ps)
	if err != nil {
		return nil, err
	}
	return &Idle{Seconds: secs, Commands: c1 - c0, PerSec: float64(c1-c0) / secs, ByName: us[0].ByName}, nil
}
