package worker

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// claimTook is a batch claim that stamped n jobs in d.
type claimTook struct {
	n int
	d time.Duration
}

// targetAfter is the hold target of w after the claims, as the
// dispatcher sets it.
func targetAfter(w *Worker, claims ...claimTook) int {
	var took claimLatency
	var cost claimCost
	for _, c := range claims {
		took.observe(c.d)
		cost.observe(c.n, c.d)
	}
	return w.holdTarget(cost.estimate(took.slowest()))
}

// A worker claims ahead what hides the part of a claim that does not grow
// with its jobs: on a server where a claim of 100 jobs takes five times a
// claim of 20 (devdb stamps them one by one) it holds no more than its
// slots, where the old rule held the prefetch limit and took claims of 100;
// where claims bound the pace but have a round trip to hide, it claims
// ahead (the rule before held its slots alone, and claims of 20 on a
// server that answers 100 in 165 ms ran less than a third as many jobs a second as claims of 100).
func TestHoldTargetFollowsTheFixedPartOfClaims(t *testing.T) {
	w := &Worker{cfg: Config{Concurrency: 20, Prefetch: 100}}
	w.handler.observe(10 * time.Microsecond) // no-op jobs
	perJob := []claimTook{{20, 120 * time.Millisecond}, {100, 600 * time.Millisecond}, {60, 360 * time.Millisecond}}
	require.Equal(t, 20, targetAfter(w, perJob...), "claims bound the pace: nothing ahead")
	noisy := []claimTook{{20, 125 * time.Millisecond}, {100, 600 * time.Millisecond}, {60, 358 * time.Millisecond}}
	require.LessOrEqual(t, targetAfter(w, noisy...), 40, "claims 5 ms off: a few ahead, not the prefetch limit")
	require.LessOrEqual(t, targetAfter(w, append(perJob, claimTook{60, 380 * time.Millisecond})...), 40,
		"one claim 20 ms slower (counted as every claim's fixed part, it sent the worker to 80)")

	fixed := []claimTook{{20, 300 * time.Millisecond}, {100, 300 * time.Millisecond}}
	require.Equal(t, 120, targetAfter(w, fixed...), "a slow round trip: claim ahead up to the prefetch limit")

	// devdb in 2026: a claim's 100 ms round trip, and 0.65 ms a job.
	both := []claimTook{{20, 113 * time.Millisecond}, {100, 165 * time.Millisecond}}
	require.Equal(t, 120, targetAfter(w, both...), "claims bound the pace, and big ones hide their round trip: up to the prefetch limit")

	w.handler = handlerTime{}
	w.handler.observe(100 * time.Millisecond) // a slot runs a job per 5 ms
	mixed := []claimTook{{10, 50*time.Millisecond + 10*time.Millisecond}, {40, 50*time.Millisecond + 40*time.Millisecond}}
	require.Equal(t, 20+25, targetAfter(w, mixed...), "50 ms fixed over 5 ms − 1 ms a job, twice")

	sameSize := []claimTook{{20, 200 * time.Millisecond}, {20, 100 * time.Millisecond}}
	require.Equal(t, 20+40, targetAfter(w, sameSize...), "sizes too close to fit: the slowest counts as fixed, twice the largest claim ahead at most")
	w.handler = handlerTime{}
	w.handler.observe(time.Second) // a slot runs a job per 50 ms
	require.Equal(t, 20+8, targetAfter(w, sameSize...), "2 × 200 ms ÷ 50 ms")
	require.Equal(t, 20, targetAfter(w), "no claim yet")
}

// fitClaims recovers the parts of claim times that follow them exactly,
// never makes either part negative, and leaves sizes too close to tell
// apart unfit.
func TestFitClaims(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name  string
		ns    []int
		ds    []time.Duration
		want  claimFit
		known bool
	}{
		{"fixed and per job", []int{10, 20, 40, 0}, []time.Duration{30 * ms, 50 * ms, 90 * ms, 0}, claimFit{fixed: 10 * ms, perJob: 2 * ms, typical: 10 * ms}, true},
		{"all per job", []int{20, 100}, []time.Duration{120 * ms, 600 * ms}, claimFit{fixed: 0, perJob: 6 * ms}, true},
		{"bigger claims faster", []int{10, 40}, []time.Duration{90 * ms, 30 * ms}, claimFit{fixed: 90 * ms, perJob: 0, typical: 60 * ms}, true},
		{"a negative fixed part is per job", []int{10, 20}, []time.Duration{10 * ms, 40 * ms}, claimFit{fixed: 20 * ms / 3, perJob: 5 * ms / 3}, true},
		{"the slowest claim's fixed part", []int{10, 10, 20}, []time.Duration{30 * ms, 50 * ms, 60 * ms}, claimFit{fixed: 30 * ms, perJob: 2 * ms, typical: 20 * ms}, true},
		{"sizes too close", []int{15, 20, 29}, []time.Duration{ms, 2 * ms, 3 * ms}, claimFit{}, false},
		{"no claim", []int{0, 0}, []time.Duration{0, 0}, claimFit{}, false},
	}
	for _, c := range cases {
		got, ok := fitClaims(c.ns, c.ds)
		require.Equal(t, c.known, ok, c.name)
		require.InDelta(t, c.want.fixed, got.fixed, float64(time.Microsecond), c.name)
		require.InDelta(t, c.want.perJob, got.perJob, float64(time.Microsecond), c.name)
		require.InDelta(t, c.want.typical, got.typical, float64(time.Microsecond), c.name)
	}
}

// modelIdle is the reference model of a worker claiming ahead: c slots
// running handlers of d each on average (from half to one and a half of
// it, drawn from rng: handlers that all take the same time would finish in
// step, which real ones do not), jobs started in claim order on the slot free
// first; a claim sent as soon as fewer than hold jobs are held (claimed and
// not finished) asks for the rest, and returns fixed + n × perJob later.
// It returns, over the second half of claims rounds, once the start-up has
// passed, the fraction of slot time spent waiting for jobs and the jobs
// started a second.
func modelRun(rng *rand.Rand, c, hold int, d, fixed, perJob time.Duration, rounds int) (idle, pace float64) {
	free := make([]time.Duration, c) // when each slot is free
	var finishes []time.Duration     // of the jobs held
	var now, waited, from time.Duration
	started := 0
	for round := range rounds {
		if round == rounds/2 {
			waited, from, started = 0, now, 0
		}
		slices.Sort(finishes)
		held := func(t time.Duration) int {
			i, _ := slices.BinarySearch(finishes, t+1)
			return len(finishes) - i
		}
		if h := held(now); h >= hold {
			now = finishes[len(finishes)-hold] // the first finish that leaves fewer than hold
		}
		n := hold - held(now)
		finishes = finishes[len(finishes)-held(now):] // drop those finished
		now += fixed + time.Duration(n)*perJob
		for range n {
			s := slices.Index(free, slices.Min(free))
			start := max(free[s], now)
			if free[s] >= from {
				waited += start - free[s]
			}
			started++
			free[s] = start + time.Duration(float64(d)*(0.5+rng.Float64()))
			finishes = append(finishes, free[s])
		}
	}
	span := slices.Max(free) - from
	return float64(waited) / float64(c) / float64(span), float64(started) / span.Seconds()
}

// The jobs claimed ahead are, in the reference model, what keeps the slots
// busy: with the hold target claimFit.ahead gives, the slots wait for
// claims almost never; with half as many ahead, they often do. And where
// claims bound the pace (a job costs a claim about as long as a slot takes
// to run one, or longer), the claims ahead make them reach 90% of the pace
// that slots and claims allow on average (85% at least), where none ahead
// (the rule before) falls well short of it.
func TestClaimAheadAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var halfIdle float64
	cases := 0
	for i := range 200 {
		c := 1 + rng.IntN(32)
		d := time.Duration(1+rng.IntN(200)) * time.Millisecond
		f := claimFit{fixed: time.Duration(1+rng.IntN(500)) * time.Millisecond}
		f.typical = f.fixed // the model's claims take their fit's time exactly
		f.perJob = time.Duration(rng.Float64() * float64(d) / float64(c))
		ahead := f.ahead(c, d, 300)
		if ahead >= 300 {
			continue // capped: the rule does not bound the model here
		}
		name := fmt.Sprintf("case %d: c %d, d %s, %s", i, c, d, f)
		idle, _ := modelRun(rng, c, c+ahead, d, f.fixed, f.perJob, 300)
		require.Less(t, idle, 0.1, name)
		idle, _ = modelRun(rng, c, c+ahead/2, d, f.fixed, f.perJob, 300)
		halfIdle += idle
		cases++
	}
	require.Greater(t, cases, 100)
	require.Greater(t, halfIdle/float64(cases), 0.1, "half as many ahead: the slots wait for claims")
	var ruleShare, noneShare float64
	cases = 0
	for i := range 200 {
		c := 1 + rng.IntN(32)
		d := time.Duration(1+rng.IntN(200)) * time.Millisecond
		f := claimFit{fixed: time.Duration(1+rng.IntN(50)) * time.Millisecond}
		f.typical = f.fixed // the model's claims take their fit's time exactly
		f.perJob = time.Duration((0.9 + 2*rng.Float64()) * float64(d) / float64(c))
		ahead := f.ahead(c, d, 300)
		if ahead >= 300 || ahead == 0 {
			continue // capped, or a fixed part too small to hide
		}
		bound := min(float64(c)/d.Seconds(), 1/f.perJob.Seconds())
		name := fmt.Sprintf("claim-bound case %d: c %d, d %s, %s, %d ahead", i, c, d, f, ahead)
		_, pace := modelRun(rng, c, c+ahead, d, f.fixed, f.perJob, 300)
		require.Greater(t, pace, 0.85*bound, name)
		ruleShare += pace / bound
		_, pace = modelRun(rng, c, c, d, f.fixed, f.perJob, 300)
		noneShare += pace / bound
		cases++
	}
	require.Greater(t, cases, 100)
	require.Greater(t, ruleShare/float64(cases), 0.9, "the claims ahead: 90% of the pace on average")
	require.Less(t, noneShare/float64(cases), 0.8, "none ahead: claims' round trips slow the pace")
	f := claimFit{perJob: time.Millisecond}
	require.Zero(t, f.ahead(20, time.Millisecond, 100), "claims all per job: nothing to hide")
}

func (f claimFit) String() string { return fmt.Sprintf("fixed %s, per job %s", f.fixed, f.perJob) }
