package worker

import (
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// claimCost tells apart, in what the recent batch claims took, the part a
// claim pays whatever its size (round trips, a server's queueing, reading
// the candidates) from the part it pays per job it stamps. Claiming ahead
// hides only the first: on a server that stamps the jobs of a batch one by
// one (devdb, an overloaded primary) a claim twice as big takes about
// twice as long, and claiming further ahead would only make claims longer
// while holding jobs other processes could run. It is the dispatch
// goroutine's alone.
type claimCost struct {
	sizes [claimLatencySamples]int // jobs a recent batch claim stamped; zero until one fills it
	took  [claimLatencySamples]time.Duration
	next  int
	fit   claimFit // the last fit of claims of sizes far enough apart
	known bool     // fit holds one
}

// claimFit is how long a claim of n jobs takes: fixed + n × perJob.
type claimFit struct {
	fixed, perJob time.Duration
	// typical is the fixed part of a typical claim (the least-squares
	// fit's), where fixed is the slowest claim's.
	typical time.Duration
}

// claimSizeSpread is how many times the largest of the recent batch claims
// must be of the smallest for their times to tell the per-job part from
// the fixed part: closer sizes leave the last such fit in force.
const claimSizeSpread = 2

// observe takes in a batch claim that stamped n jobs (at least two: a
// single claim is another command) and took d.
func (c *claimCost) observe(n int, d time.Duration) {
	if n < 2 {
		return
	}
	c.sizes[c.next], c.took[c.next] = n, d
	c.next = (c.next + 1) % len(c.sizes)
	if f, ok := fitClaims(c.sizes[:], c.took[:]); ok {
		c.fit, c.known = f, true
	}
}

// claimEstimate is what the dispatcher expects of its next claim.
type claimEstimate struct {
	fit claimFit
	// explore: fit is a guess, how claim time grows with size not known
	// yet; largest is the largest recent batch claim (zero for none).
	explore bool
	largest int
}

// estimate is the cost of the next claim: the last fit, or while none is
// known (batch claims all of about one size, or none yet), the slowest
// recent claim counted as fixed, which is what the claims ahead would hide
// if their size did not matter, with explore set: the worker then claims
// ahead at most as many jobs as it has slots, or twice its largest recent
// batch claim, so that the next claim may be twice as big as the last and
// tell how claim time grows with size before it claims further.
func (c *claimCost) estimate(slowest time.Duration) claimEstimate {
	if c.known {
		return claimEstimate{fit: c.fit}
	}
	return claimEstimate{fit: claimFit{fixed: slowest}, explore: true, largest: slices.Max(c.sizes[:])}
}

// fitClaims fits fixed + n × perJob to the claims of sizes ns that took ds
// (a zero size is an empty sample) by least squares, with neither part
// negative, and the fixed part the largest that any claim left over (like
// claimLatency.slowest, the slow claims count). It reports false when the
// sizes are too close to tell the parts apart.
func fitClaims(ns []int, ds []time.Duration) (claimFit, bool) {
	var cnt, sn, sd float64
	lo, hi := 0, 0
	for i, n := range ns {
		if n == 0 {
			continue
		}
		if lo == 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
		cnt++
		sn += float64(n)
		sd += float64(ds[i])
	}
	if lo == 0 || hi < claimSizeSpread*lo {
		return claimFit{}, false
	}
	mn, md := sn/cnt, sd/cnt
	var cov, vn float64
	for i, n := range ns {
		if n == 0 {
			continue
		}
		cov += (float64(n) - mn) * (float64(ds[i]) - md)
		vn += (float64(n) - mn) * (float64(n) - mn)
	}
	perJob := max(cov/vn, 0)
	perJob = min(perJob, md/mn) // a negative fixed part: all of it is per job
	var fixed time.Duration
	for i, n := range ns {
		if n != 0 {
			fixed = max(fixed, ds[i]-time.Duration(float64(n)*perJob))
		}
	}
	typical := max(time.Duration(md-perJob*mn), 0)
	return claimFit{fixed: fixed, perJob: time.Duration(perJob), typical: typical}, true
}

// ahead is how many jobs to hold beyond the slots, concurrency of them
// running handlers that take handler each, so that the slots do not wait
// for claims. A claim of n jobs takes T = fixed + n × perJob, during which
// the slots run T × concurrency ÷ handler jobs: the claim replaces those
// run during the last one, and its slots are held, empty, while it is on
// its way, so the jobs held must cover what the slots run during a claim
// twice. That is T ÷ (handler ÷ concurrency) = fixed ÷ (handler ÷
// concurrency − perJob) jobs, twice (TestClaimAheadAgainstModel checks it
// against a model of the dispatcher).
//
// Where a job costs a claim nearly as long as a slot takes to run one, or
// longer (no-op jobs), claims, not slots, bound the pace: at most one job
// per perJob, which claims reach as their fixed part shrinks beside the
// per-job part. The slots are then counted as running a job per perJob ÷
// claimPaceShare: claims of 2 × fixed × claimPaceShare ÷ ((1 −
// claimPaceShare) × perJob) jobs or more, the fixed part at most a
// nineteenth of each, run within about 5% of that pace. There the fixed
// part is a typical claim's, not the slowest's: multiplied so, one slow
// claim would send every claim to most. A claim whose time is all per job
// (a server that stamps a batch one document at a time, and no round trip
// worth hiding) gets none ahead: bigger ones only take longer, and jobs
// held ahead would wait while other processes could run them. At most
// most.
func (f claimFit) ahead(concurrency int, handler time.Duration, most int) int {
	fixed, perSlot := f.fixed, float64(handler)/float64(concurrency)
	if bound := float64(f.perJob) / claimPaceShare; perSlot < bound {
		fixed, perSlot = f.typical, bound
	}
	if most <= 0 || handler <= 0 || fixed <= 0 {
		return 0
	}
	return int(min(2*float64(fixed)/(perSlot-float64(f.perJob)), float64(most)))
}

// claimPaceShare is the share of the claims' bound on the pace (a job per
// perJob) that claims ahead aim for where claims, not slots, bound it.
const claimPaceShare = 0.9

// logClaim logs, at debug level, the dispatcher's decision for a claim:
// the jobs it meant to hold, the jobs it asked and got, how long it took,
// and the claim cost it now expects.
func (w *Worker) logClaim(cost *claimCost, slowest time.Duration, target, asked, got int, took time.Duration) {
	ce := w.log.Check(zap.DebugLevel, "claimed")
	if ce == nil {
		return
	}
	fit := cost.estimate(slowest).fit
	ce.Write(zap.Int("target", target), zap.Int("asked", asked), zap.Int("got", got),
		zap.Duration("took", took), zap.Duration("fixed", fit.fixed), zap.Duration("per_job", fit.perJob))
}

// handlerTime is a moving average of how long handlers run.
type handlerTime struct {
	mu  sync.Mutex
	avg time.Duration // zero until a handler has returned
}

// handlerTimeWeight is how much of the average the latest handler makes.
const handlerTimeWeight = 0.125

func (h *handlerTime) observe(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d = max(d, time.Microsecond) // a handler that returned at once still took a slot
	if h.avg == 0 {
		h.avg = d
		return
	}
	h.avg += time.Duration(handlerTimeWeight * float64(d-h.avg))
}

func (h *handlerTime) mean() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.avg
}

// claimLatency remembers how long the last claims took, so that the next
// one's deadline follows the server rather than a fixed bound: a server
// slow for minutes (an overloaded primary, an index build, a big scan)
// answers claims in seconds, and a claim given up while the server still
// works on it is wasted twice: its reply, and the sweep that gives back
// what it stamped. A claim that timed out counts as taking its whole
// deadline. It is the dispatch goroutine's alone.
type claimLatency struct {
	recent [claimLatencySamples]time.Duration // zero until a claim fills it
	next   int
}

// claimLatencySamples is how many of the last claims set the deadline,
// claimLatencyFactor how many times the slowest of them it is at least,
// and claimStretchLeases how many leases past ClaimTimeout it may reach.
const (
	claimLatencySamples = 8
	claimLatencyFactor  = 3
	claimStretchLeases  = 2
)

// slowest is the longest of the recent claims.
func (l *claimLatency) slowest() time.Duration { return slices.Max(l.recent[:]) }

func (l *claimLatency) observe(d time.Duration) {
	l.recent[l.next] = d
	l.next = (l.next + 1) % len(l.recent)
}

// deadline is the timeout of the next claim of a worker configured as c:
// ClaimTimeout, or claimLatencyFactor times the slowest recent claim when
// that is longer, up to claimStretchLeases leases more; that most for the
// first claim, when how slow the server is (connections included) is not
// known yet. The worker stamps a lease longer by as much as the deadline
// passes ClaimTimeout, so a fast server changes neither after the first
// claim. A job's first renewal comes a heartbeat interval after its
// claim whatever lease it stamped (Worker.heartbeat), so a stretched lease
// outlives its worker only if the worker dies within that interval.
func (l *claimLatency) deadline(c Config) time.Duration {
	base := c.ClaimTimeout()
	most := base + claimStretchLeases*c.Lease
	slowest := l.slowest()
	if slowest == 0 { // no claim yet
		return most
	}
	return min(max(base, claimLatencyFactor*slowest), most)
}
