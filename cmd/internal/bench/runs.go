package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/internal/store"
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
	mon := newMonitor(store.Of(q).Collection().Name())
	var colls []*mongo.Collection
	for range b.o.Procs {
		c, err := mongo.Connect(options.Client().ApplyURI(b.uri).SetMonitor(mon.commandMonitor()))
		if err != nil {
			return nil, err
		}
		defer func() { _ = c.Disconnect(context.Background()) }()
		colls = append(colls, c.Database(db.Name()).Collection(store.Of(q).Collection().Name(),
			options.Collection().SetWriteConcern(writeconcern.Majority())))
	}
	errs := make(chan error, b.o.Procs*b.o.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for _, coll := range colls {
		for range b.o.Concurrency {
			wg.Go(func() {
				if err := rawClaimLoop(ctx, coll, nil); err != nil {
					errs <- err
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

// rawClaimLoop is one goroutine of the raw loop: it claims with one sorted
// findAndModify and finishes with one update, counting each job finished in
// done (when not nil), until a claim finds no job (nil) or a command fails.
func rawClaimLoop(ctx context.Context, coll *mongo.Collection, done *atomic.Int64) error {
	sort := bson.D{{Key: "priority", Value: -1}, {Key: "runAt", Value: 1}, {Key: "_id", Value: 1}}
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
			return nil
		}
		if err == nil {
			_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: j.ID}, {Key: "leaseToken", Value: token}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: jobs.StateSucceeded}, {Key: "finishedAt", Value: time.Now()}}}})
		}
		if err != nil {
			return err
		}
		if done != nil {
			done.Add(1)
		}
	}
}

// steady enqueues jobs one at a time at a fixed rate while workers of
// claimBatch run, then waits for the last to finish.
func (b *bencher) steady(ctx context.Context, name string, claimBatch int) (*Steady, error) {
	db, q, err := b.freshDB(ctx, name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Drop(context.Background()) }()
	ps, err := b.startWorkers(db.Name(), b.o.Procs, b.o.Concurrency, claimBatch)
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
		Jobs: n, Procs: b.o.Procs, Concurrency: b.o.Concurrency, ClaimBatch: claimBatch,
		RatePerSec: float64(n) / enqueued.Seconds(), DrainSeconds: (drained - enqueued).Seconds(),
		LagP50: pct(starts, 50), LagP99: pct(starts, 99),
		LatencyP50: pct(finishes, 50), LatencyP99: pct(finishes, 99),
		CommandsPerJob: float64(cmds) / float64(n),
	}, nil
}

// idle runs procs worker processes on an empty queue and counts their
// commands per second after the warm-up, split into claims (polling),
// leader election, and the rest: maintenance, which the elected leader
// alone runs, so that it should not grow with procs.
func (b *bencher) idle(ctx context.Context, name string, procs int) (*Idle, error) {
	db, _, err := b.freshDB(ctx, name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Drop(context.Background()) }()
	ps, err := b.startWorkers(db.Name(), procs, b.o.Concurrency, 1)
	if err != nil {
		return nil, err
	}
	time.Sleep(b.o.IdleWarmup)
	sum := func() (s snapshot) {
		for _, p := range ps {
			c := p.snapshot()
			s.Commands += c.Commands
			s.Polls += c.Polls
			s.Leader += c.Leader
			s.Pauses += c.Pauses
			s.Registry += c.Registry
		}
		return s
	}
	s0 := sum()
	t0 := time.Now()
	time.Sleep(b.o.IdleFor)
	s1 := sum()
	secs := time.Since(t0).Seconds()
	us, err := stopAll(ps)
	if err != nil {
		return nil, err
	}
	byName := map[string]int64{}
	for _, u := range us {
		for k, v := range u.ByName {
			byName[k] += v
		}
	}
	cmds, polls, leader := s1.Commands-s0.Commands, s1.Polls-s0.Polls, s1.Leader-s0.Leader
	return &Idle{
		Procs: procs, Seconds: secs, Commands: cmds, PerSec: float64(cmds) / secs,
		PollsPerSec: float64(polls) / secs, LeaderPerSec: float64(leader) / secs,
		MaintenancePerSec: float64(cmds-polls-leader) / secs, ByName: byName,
		PauseReadsPerSec: float64(s1.Pauses-s0.Pauses) / secs, RegistryPerSec: float64(s1.Registry-s0.Registry) / secs,
	}, nil
}

// failover runs b.o.FailoverProcs idle worker processes with a short leader
// TTL and a reaper every second, SIGKILLs the elected leader, plants a job
// whose lease expired (as a worker that died mid-job leaves it) and times
// how long until another process leads and until its reaper has re-queued
// the planted job.
func (b *bencher) failover(ctx context.Context) (*Failover, error) {
	const ttl = 3 * time.Second
	db, _, err := b.freshDB(ctx, "failover")
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Drop(context.Background()) }()
	var ps []*proc
	defer func() { _, _ = stopAll(ps) }()
	ids := map[string]*proc{}
	for i := range b.o.FailoverProcs {
		id := fmt.Sprintf("bench-failover-%d", i)
		p, err := startWorker(workerOpts{uri: b.uri, db: db.Name(), concurrency: 1, claimBatch: 1, extra: []string{
			"--id", id, "--leader-ttl", ttl.String(), "--reap-interval", "1s", "--reap-grace", "1s",
		}}, b.log)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
		ids[id] = p
	}
	for _, p := range ps {
		if err := p.waitReady(time.Minute); err != nil {
			return nil, err
		}
	}
	leaders := db.Collection(leadership.DefaultCollection)
	owner := func() string {
		var doc struct {
			Owner string `bson:"owner"`
		}
		if err := leaders.FindOne(ctx, bson.D{}).Decode(&doc); err != nil {
			return ""
		}
		return doc.Owner
	}
	deadline := time.Now().Add(time.Minute)
	var old string
	for old = owner(); ids[old] == nil; old = owner() {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no worker process was elected within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}

	victim := ids[old]
	ps = slices.DeleteFunc(ps, func(p *proc) bool { return p == victim })
	killed := time.Now()
	victim.kill()
	expired := killed.Add(-time.Minute)
	planted := bson.D{
		{Key: "_id", Value: "bench-failover-planted"}, {Key: "kind", Value: "noop"},
		{Key: "queue", Value: "bench-failover-unserved"}, {Key: "args", Value: bson.D{}},
		{Key: "state", Value: "running"}, {Key: "priority", Value: 0}, {Key: "runAt", Value: expired},
		{Key: "attempt", Value: 1}, {Key: "maxAttempts", Value: 25}, {Key: "owner", Value: old},
		{Key: "leaseToken", Value: "bench-dead-lease"}, {Key: "leaseExpiresAt", Value: expired},
		{Key: "heartbeatAt", Value: expired}, {Key: "errors", Value: bson.A{}},
		{Key: "createdAt", Value: expired}, {Key: "updatedAt", Value: expired},
	}
	jobsColl := db.Collection(queue.DefaultCollection)
	if _, err := jobsColl.InsertOne(ctx, planted); err != nil {
		return nil, err
	}
	res := &Failover{Procs: b.o.FailoverProcs, LeaderTTLSeconds: ttl.Seconds(), KilledLeader: old}
	for deadline = time.Now().Add(time.Minute); res.ReapedSeconds == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the planted job was not reaped within a minute of the leader's SIGKILL")
		}
		if o := owner(); res.ElectedSeconds == 0 && o != old && ids[o] != nil {
			res.ElectedSeconds, res.NewLeader = time.Since(killed).Seconds(), o
		}
		var j struct {
			State string `bson:"state"`
		}
		if err := jobsColl.FindOne(ctx, bson.D{{Key: "_id", Value: "bench-failover-planted"}}).Decode(&j); err == nil && j.State != "running" {
			res.ReapedSeconds = time.Since(killed).Seconds()
		}
	}
	if res.ElectedSeconds == 0 { // the new leader's reap pass came before our look at its lease
		res.ElectedSeconds, res.NewLeader = res.ReapedSeconds, owner()
	}
	return res, nil
}
