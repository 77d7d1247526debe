package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// RateBench is the rate run: a rate limit on no-op jobs held by several
// worker processes, counted from the jobs' claim stamps.
type RateBench struct {
	Rate        string  `json:"rate"`
	Procs       int     `json:"procs"`
	Concurrency int     `json:"concurrency"`
	Seconds     float64 `json:"seconds"` // the window counted
	// Starts are the jobs claimed within the window; StartsPerSec them per
	// second, and Held that as a share of the rate (1: exact).
	Starts       int     `json:"starts"`
	StartsPerSec float64 `json:"startsPerSec"`
	Held         float64 `json:"held"`
	// MostPerPeriod is the most starts in any one period of the rate
	// (sliding), against the N + burst reservations it allows, and that
	// plus the starts of one queue.RateStartLag, by which a claim may
	// follow its reservation (see queue/rate.go).
	MostPerPeriod    int     `json:"mostPerPeriod"`
	AllowedPerPeriod int     `json:"allowedPerPeriod"`
	AllowedWithLag   int     `json:"allowedWithLag"`
	CommandsPerJob   float64 `json:"commandsPerJob"`
}

// The rate run's backlog: kept at about rateBacklog available jobs, so
// that claims on devdb cost what they cost at a small backlog for the
// whole window.
const (
	rateBacklog = 100
	rateWarmup  = 5 * time.Second
)

// rate runs b.o.RateProcs worker processes on no-op jobs under the rate
// limit b.o.Rate on their kind for a warm-up and b.o.RateFor, topping the
// backlog up as they go, and counts the jobs claimed in the window after
// the warm-up from their claim stamps (heartbeatAt).
func (b *bencher) rate(ctx context.Context) (*RateBench, error) {
	r := b.o.Rate
	db, q, err := b.freshDB(ctx, "rate")
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Drop(context.Background()) }()
	if err := q.SetRate(ctx, queue.KindLimit("noop"), r, "bench"); err != nil {
		return nil, err
	}
	if err := b.enqueue(ctx, q, rateBacklog, "noop", nil); err != nil {
		return nil, err
	}
	ps, err := b.startWorkers(db.Name(), b.o.RateProcs, b.o.Concurrency, defaultClaimBatch)
	if err != nil {
		return nil, err
	}
	coll := store.Of(q).Collection()
	start := time.Now()
	from, to := start.Add(rateWarmup), start.Add(rateWarmup+b.o.RateFor)
	for time.Now().Before(to.Add(time.Second)) {
		n, err := coll.CountDocuments(ctx, bson.D{{Key: "state", Value: jobs.StateAvailable}})
		if err == nil && n < rateBacklog {
			err = b.enqueue(ctx, q, rateBacklog-int(n), "noop", nil)
		}
		if err != nil {
			stopAll(ps)
			return nil, err
		}
		time.Sleep(200 * time.Millisecond)
	}
	us, err := stopAll(ps)
	if err != nil {
		return nil, err
	}
	starts, err := claimStamps(ctx, q)
	if err != nil {
		return nil, err
	}
	res := &RateBench{Rate: r.String(), Procs: b.o.RateProcs, Concurrency: b.o.Concurrency,
		Seconds: b.o.RateFor.Seconds(), AllowedPerPeriod: r.N + max(r.Burst, 1)}
	T := r.Per / time.Duration(r.N)
	res.AllowedWithLag = res.AllowedPerPeriod + int((queue.RateStartLag+T-1)/T)
	var in []time.Time
	for _, t := range starts {
		if !t.Before(from) && t.Before(to) {
			in = append(in, t)
		}
	}
	res.Starts = len(in)
	res.StartsPerSec = float64(len(in)) / res.Seconds
	res.Held = res.StartsPerSec * r.Per.Seconds() / float64(r.N)
	res.MostPerPeriod = mostWithin(starts, r.Per)
	var cmds int64
	for _, u := range us {
		cmds += u.Commands
	}
	if len(starts) > 0 {
		res.CommandsPerJob = float64(cmds) / float64(len(starts))
	}
	return res, nil
}

// claimStamps returns, in order, when each job that ran was claimed (the
// claim stamps heartbeatAt; no-op jobs end before their first heartbeat).
func claimStamps(ctx context.Context, q *queue.Client) ([]time.Time, error) {
	js, err := finishedJobs(ctx, q)
	if err != nil {
		return nil, err
	}
	var out []time.Time
	for _, j := range js {
		if j.HeartbeatAt != nil {
			out = append(out, *j.HeartbeatAt)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out, nil
}

// mostWithin is the most of ts (sorted) within any window of d.
func mostWithin(ts []time.Time, d time.Duration) int {
	most, lo := 0, 0
	for hi := range ts {
		for ts[hi].Sub(ts[lo]) >= d {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}

func (r *RateBench) write(w io.Writer) {
	fmt.Fprintf(w, "rate: %s on no-op jobs, %d processes x %d: %d starts in %.0fs = %.2f/s, %.1f%% of the rate; at most %d claimed in any period (reserved: N + burst = %d; claimed: %d with one RateStartLag); %.2f cmds/job\n",
		r.Rate, r.Procs, r.Concurrency, r.Starts, r.Seconds, r.StartsPerSec, 100*r.Held, r.MostPerPeriod, r.AllowedPerPeriod, r.AllowedWithLag, r.CommandsPerJob)
}
