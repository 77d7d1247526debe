//go:build linux

package chaos

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The rate limit's share of the run: every worker starts with
// `--rates "kind:noop=5/s burst 3"` (workerFlags), and each wave enqueues
// a burst of noop jobs, far more than the rate lets start at once, while
// workers are SIGKILLed, SIGSTOPped past their leases and cut off from
// devdb. The sampler reads the noop jobs all through the run and keeps, for
// each attempt it sees claimed (a job and its attempt number), the claim's
// stamp (heartbeatAt; a noop attempt ends before its first renewal, and the
// earliest stamp seen of an attempt is its claim's). After the drain:
//   - in no window of one period were more attempts claimed than the rate
//     allows: N + burst, plus the starts of one queue.RateStartLag that a
//     claim may take after its reservation (see queue/rate.go);
//   - the starts the rate's document reserved are at most N per period
//     since the workers started, plus the burst, and at least the attempts
//     seen.
//
// The sampler may miss an attempt (one claimed, killed and re-claimed
// between two reads, or during the outage): the check only undercounts,
// never sees a start that was not made.

var (
	rateKind = handlers.NoopArgs{}.Kind()
	rateOf   = queue.Rate{N: 5, Per: time.Second, Burst: 3}
)

// rateLoad is the rate's state of the run, shared with the sampler.
type rateLoad struct {
	sampled
	// since is when the first worker started: the rate's reservations are
	// bounded from then.
	since time.Time
	// enqueued counts the rate's jobs the run enqueued; claims holds, by
	// job id and attempt, the earliest claim stamp seen.
	enqueued int
	claims   map[string]time.Time
	samples  int
}

// rateFlag is the workers' --rates.
func rateFlag() string { return fmt.Sprintf("kind:%s=%s", rateKind, rateOf) }

// rateWave enqueues n jobs of the rate's kind at once.
func (r *run) rateWave(ctx context.Context, n int) {
	r.rate.mu.Lock()
	first := r.rate.enqueued
	r.rate.mu.Unlock()
	ins := make([]queue.Insert, n)
	for i := range ins { // ids of the run's, so that a retry (retry.go) finds its jobs there
		ins[i] = queue.Insert{Kind: rateKind, Args: handlers.NoopArgs{}, Opts: queue.InsertOpts{ID: fmt.Sprintf("rate-%d", first+i)}}
	}
	if err := r.retry("enqueue "+rateKind+" jobs", func() error {
		_, err := r.q.EnqueueMany(ctx, ins)
		return err
	}); err != nil {
		r.errorf("chaos: enqueue %s jobs: %v", rateKind, err)
		return
	}
	r.rate.mu.Lock()
	r.rate.enqueued += n
	r.rate.mu.Unlock()
}

// sampleRate reads the rate's jobs that were ever claimed, in one query,
// and records the claim stamp of each attempt it has not seen before.
func (r *run) sampleRate(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var docs []jobs.Job
	err := r.findJobs(ctx, &docs,
		bson.M{"kind": rateKind, "heartbeatAt": bson.M{"$exists": true}},
		options.Find().SetProjection(bson.M{"_id": 1, "kind": 1, "attempt": 1, "heartbeatAt": 1, "state": 1}))
	l := &r.rate
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errs = append(l.errs, saleReadErr{at: time.Now(), err: err})
		return
	}
	l.samples++
	for _, d := range docs {
		l.note(d)
	}
}

// note records j's claim stamp unless an earlier one of its attempt is
// known. l.mu is held.
func (l *rateLoad) note(j jobs.Job) {
	if j.HeartbeatAt == nil || j.Attempt < 1 {
		return
	}
	if l.claims == nil {
		l.claims = map[string]time.Time{}
	}
	key := fmt.Sprintf("%s/%d", j.ID, j.Attempt)
	if t, ok := l.claims[key]; !ok || j.HeartbeatAt.Before(t) {
		l.claims[key] = *j.HeartbeatAt
	}
}

// checkRate checks the rate from the database after the drain (see the
// comment at the top of this file); all are every job.
func (r *run) checkRate(all []jobs.Job) {
	ctx := context.Background()
	l := &r.rate
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, j := range all {
		if j.Kind == rateKind && j.State == jobs.StateSucceeded {
			l.note(j)
		}
	}
	for _, e := range l.errs {
		if r.duringOutage(e.at) || transient(e.err) {
			continue
		}
		r.errorf("chaos: rate: a sample failed while devdb was up: %v", e.err)
	}
	if l.samples == 0 {
		r.errorf("chaos: rate: no sample of the %s jobs succeeded during the run", rateKind)
	}
	stamps := make([]time.Time, 0, len(l.claims))
	for _, t := range l.claims {
		stamps = append(stamps, t)
	}
	slices.SortFunc(stamps, func(a, b time.Time) int { return a.Compare(b) })
	most, lo := 0, 0
	for hi := range stamps {
		for stamps[hi].Sub(stamps[lo]) >= rateOf.Per {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	interval := rateOf.Per / time.Duration(rateOf.N)
	allowed := rateOf.N + rateOf.Burst + int(math.Ceil(float64(queue.RateStartLag)/float64(interval)))
	r.res.RateJobs, r.res.RateClaims, r.res.RateMostPerPeriod = l.enqueued, len(stamps), most
	if most > allowed {
		r.errorf("chaos: rate: %d attempts of %s were claimed within %s; the rate %s allows %d (N + burst + the starts of one RateStartLag)",
			most, rateKind, rateOf.Per, rateOf, allowed)
	}
	rs, err := r.q.RateLimits(ctx)
	name := queue.KindLimit(rateKind)
	if err != nil || len(rs) != 1 || rs[0].Name != name || rs[0].Rate != rateOf {
		r.errorf("chaos: rate: the rates after the drain are %+v (%v); want %s at %s", rs, err, name, rateOf)
		return
	}
	r.res.RateStarts = rs[0].Starts
	bound := float64(rateOf.N)*time.Since(l.since).Seconds()/rateOf.Per.Seconds() + float64(rateOf.Burst)
	if float64(rs[0].Starts) > bound {
		r.errorf("chaos: rate: %d starts reserved in %s; the rate %s allows %.0f", rs[0].Starts, time.Since(l.since).Round(time.Second), rateOf, bound)
	}
	if rs[0].Starts < int64(len(stamps)) {
		r.errorf("chaos: rate: %d attempts claimed but only %d starts reserved", len(stamps), rs[0].Starts)
	}
}
