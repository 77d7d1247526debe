package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
)

// Heartbeats is many long jobs on one worker process: how many commands
// renew their leases per heartbeat interval.
type Heartbeats struct {
	Jobs        int     `json:"jobs"`
	Concurrency int     `json:"concurrency"`
	SleepSec    float64 `json:"sleepSeconds"`
	// LeaseSec and IntervalSec are the worker's lease and heartbeat
	// interval: shorter than the defaults (30 s, 10 s), so that a 30 s job
	// sees several intervals.
	LeaseSec    float64 `json:"leaseSeconds"`
	IntervalSec float64 `json:"intervalSeconds"`
	Seconds     float64 `json:"seconds"`
	// Intervals is how many heartbeat intervals the jobs held leases for:
	// from the first job's start to the last one's end.
	Intervals float64 `json:"intervals"`
	// Renewals counts the commands that renewed or read back leases;
	// PerInterval is Renewals / Intervals, MaxPerInterval the most seen in
	// any one interval (sampled at each interval's end).
	Renewals       int64            `json:"renewals"`
	PerInterval    float64          `json:"perInterval"`
	MaxPerInterval int64            `json:"maxPerInterval"`
	Commands       int64            `json:"commands"`
	ByName         map[string]int64 `json:"byName"`
}

// heartbeats enqueues o.HeartbeatJobs sleeping jobs, runs them all at once
// on one worker process and counts the commands that renew their leases.
func (b *bencher) heartbeats(ctx context.Context) (*Heartbeats, error) {
	o := b.o
	db, q, err := b.freshDB(ctx, "heartbeats")
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Drop(context.Background()) }()
	if err := b.enqueue(ctx, q, o.HeartbeatJobs, "bench-sleep", SleepArgs{Ms: int(o.HeartbeatSleep / time.Millisecond)}); err != nil {
		return nil, err
	}
	p, err := startWorker(workerOpts{uri: b.uri, db: db.Name(), concurrency: o.HeartbeatJobs, claimBatch: o.ClaimBatch, extra: []string{
		"--lease", o.HeartbeatLease.String(), "--heartbeat-interval", o.HeartbeatInterval.String(),
	}}, b.log)
	if err != nil {
		return nil, err
	}
	ps := []*proc{p}
	if err := p.waitReady(time.Minute); err != nil {
		stopAll(ps)
		return nil, err
	}
	start := time.Now()
	base := p.snapshot().Renewals
	last := base
	var maxPer int64
	tick := time.NewTicker(o.HeartbeatInterval)
	defer tick.Stop()
	for completed(ps) < int64(o.HeartbeatJobs) {
		if time.Since(start) > o.HeartbeatSleep+10*time.Minute {
			stopAll(ps)
			return nil, fmt.Errorf("%d of %d jobs completed", completed(ps), o.HeartbeatJobs)
		}
		select {
		case <-tick.C:
			cur := p.snapshot().Renewals
			maxPer = max(maxPer, cur-last)
			last = cur
		case <-time.After(20 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	renewals := p.snapshot().Renewals - base
	us, err := stopAll(ps)
	if err != nil {
		return nil, err
	}
	// The jobs held leases from about the start to the last completion.
	intervals := elapsed.Seconds() / o.HeartbeatInterval.Seconds()
	return &Heartbeats{
		Jobs: o.HeartbeatJobs, Concurrency: o.HeartbeatJobs, SleepSec: o.HeartbeatSleep.Seconds(),
		LeaseSec: o.HeartbeatLease.Seconds(), IntervalSec: o.HeartbeatInterval.Seconds(),
		Seconds: elapsed.Seconds(), Intervals: intervals,
		Renewals: renewals, PerInterval: float64(renewals) / intervals, MaxPerInterval: maxPer,
		Commands: us[0].Commands, ByName: us[0].ByName,
	}, nil
}

// isRenewal reports whether e, sent to the jobs collection coll, renews
// leases or reads them back: a batched heartbeat's updateMany (fenced on
// state running, setting leaseExpiresAt and no state), or its read back (a
// find projecting leaseExpiresAt).
func isRenewal(coll string, e *event.CommandStartedEvent) bool {
	if c, _ := e.Command.Lookup(e.CommandName).StringValueOK(); c != coll {
		return false
	}
	switch e.CommandName {
	case "update":
		ups, ok := e.Command.Lookup("updates").ArrayOK()
		if !ok {
			return false
		}
		vals, err := ups.Values()
		if err != nil || len(vals) == 0 {
			return false
		}
		doc, ok := vals[0].DocumentOK()
		if !ok {
			return false
		}
		state, _ := doc.Lookup("q", "state").StringValueOK()
		set, ok := doc.Lookup("u", "$set").DocumentOK()
		if !ok {
			return false
		}
		_, setsState := set.LookupErr("state")
		_, setsExpiry := set.LookupErr("leaseExpiresAt")
		return state == "running" && setsState != nil && setsExpiry == nil
	case "find":
		_, err := e.Command.LookupErr("projection", "leaseExpiresAt")
		return err == nil
	}
	return false
}

// write prints the heartbeats run's line of the table.
func (h *Heartbeats) write(w io.Writer) {
	fmt.Fprintf(w, "heartbeats: %d jobs x %.0fs on 1 x %d, lease %.0fs, heartbeat interval %.0fs: %d renewal commands over %.1f intervals = %.2f per interval (max %d in one; target <= 5); took %.1fs, %d commands in all (%s)\n",
		h.Jobs, h.SleepSec, h.Concurrency, h.LeaseSec, h.IntervalSec, h.Renewals, h.Intervals, h.PerInterval, h.MaxPerInterval, h.Seconds, h.Commands, countsStr(h.ByName))
}
