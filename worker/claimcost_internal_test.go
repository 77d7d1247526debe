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
// slots, where the old rule held the prefetch limit and took claims of 100.
func TestHoldTargetFollowsTheFixedPartOfClaims(t *testing.T) {
	w := &Worker{cfg: Config{Concurrency: 20, Prefetch: 100}}
	w.handler.observe(10 * time.Microsecond) // no-op jobs
	perJob := []claimTook{{20, 120 * time.Millisecond}, {100, 600 * time.Millisecond}, {60, 360 * time.Millisecond}}
	require.Equal(t, 20, targetAfter(w, perJob...), "claims bound the pace: nothing ahead")

	fixed := []claimTook{{20, 300 * time.Millisecond}, {100, 300 * time.Millisecond}}
	require.Equal(t, 120, targetAfter(w, fixed...), "a slow round trip: claim ahead up to the prefetch limit")

	w.handler = handlerTime{}
	w.handler.observe(100 * time.Millisecond) // a slot runs a job per 5 ms
	mixed := []claimTook{{10, 50*time.Millisecond + 10*time.Millisecond}, {40, 50*time.Millisecond + 40*time.Millisecond}}
	require.Equal(t, 20+25, targetAfter(w, mixed...), "50 ms fixed over 5 ms − 1 ms a job, twice")

	sameSize := []claimTook{{20, 200 * time.Millisecond}, {20, 100 * time.Millisecond}}
	require.Equal(t, 20+20, targetAfter(w, sameSize...), "sizes too close to fit: the slowest counts as fixed, as many ahead as slots at most")
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
		{"fixed and per job", []int{10, 20, 40, 0}, []time.Duration{30 * ms, 50 * ms, 90 * ms, 0}, claimFit{10 * ms, 2 * ms}, true},
		{"all per job", []int{20, 100}, []time.Duration{120 * ms, 600 * ms}, claimFit{0, 6 * ms}, true},
		{"bigger claims faster", []int{10, 40}, []time.Duration{90 * ms, 30 * ms}, claimFit{90 * ms, 0}, true},
		{"a negative fixed part is per job", []int{10, 20}, []time.Duration{10 * ms, 40 * ms}, claimFit{20 * ms / 3, 5 * ms / 3}, true},
		{"the slowest claim's fixed part", []int{10, 10, 20}, []time.Duration{30 * ms, 50 * ms, 60 * ms}, claimFit{30 * ms, 2 * ms}, true},
		{"sizes too close", []int{15, 20, 29}, []time.Duration{ms, 2 * ms, 3 * ms}, claimFit{}, false},
		{"no claim", []int{0, 0}, []time.Duration{0, 0}, claimFit{}, false},
	}
	for _, c := range cases {
		got, ok := fitClaims(c.ns, c.ds)
		require.Equal(t, c.known, ok, c.name)
		require.InDelta(t, c.want.fixed, got.fixed, float64(time.Microsecond), c.name)
		require.InDelta(t, c.want.perJob, got.perJob, float64(time.Microsecond), c.name)
	}
}

// modelIdle is the reference model of a worker claiming ahead: c slots
// running handlers of d each on average (from half to one and a half of
// it, drawn from rng: handlers that all take the same time would finish in
// step, which real ones do not), jobs started in claim order on the slot free
// first; a claim sent as soon as fewer than hold jobs are held (claimed and
// not finished) asks for the rest, and returns fixed + n × perJob later.
// It returns the fraction of slot time spent waiting for jobs over the
// second half of claims rounds, once the start-up has passed.
func modelIdle(rng *rand.Rand, c, hold int, d, fixed, perJob time.Duration, rounds int) float64 {
	free := make([]time.Duration, c) // when each slot is free
	var finishes []time.Duration     // of the jobs held
	var now, idle, from time.Duration
	for round := range rounds {
		if round == rounds/2 {
			idle, from = 0, now
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
				idle += start - free[s]
			}
			free[s] = start + time.Duration(float64(d)*(0.5+rng.Float64()))
			finishes = append(finishes, free[s])
		}
	}
	return float64(idle) / float64(c) / float64(slices.Max(free)-from)
}

// The jobs claimed ahead are, in the reference model, what keeps the slots
// busy: with the hold target claimFit.ahead gives, the slots wait for
// claims almost never; with half as many ahead, they often do. And when a
// job costs a claim as long as a slot takes to run one, no number ahead
// keeps them busy: claiming ahead buys nothing, and the rule claims none.
func TestClaimAheadAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var halfIdle float64
	cases := 0
	for i := range 200 {
		c := 1 + rng.IntN(32)
		d := time.Duration(1+rng.IntN(200)) * time.Millisecond
		f := claimFit{fixed: time.Duration(1+rng.IntN(500)) * time.Millisecond}
		f.perJob = time.Duration(rng.Float64() * float64(d) / float64(c))
		ahead := f.ahead(c, d, 300)
		if ahead >= 300 {
			continue // capped: the rule does not bound the model here
		}
		name := fmt.Sprintf("case %d: c %d, d %s, %s", i, c, d, f)
		require.Less(t, modelIdle(rng, c, c+ahead, d, f.fixed, f.perJob, 300), 0.1, name)
		halfIdle += modelIdle(rng, c, c+ahead/2, d, f.fixed, f.perJob, 300)
		cases++
	}
	require.Greater(t, cases, 100)
	require.Greater(t, halfIdle/float64(cases), 0.1, "half as many ahead: the slots wait for claims")
	for i := range 50 {
		c := 1 + rng.IntN(32)
		d := time.Duration(1+rng.IntN(200)) * time.Millisecond
		f := claimFit{fixed: time.Duration(1+rng.IntN(50)) * time.Millisecond}
		f.perJob = d*time.Duration(1+rng.IntN(3))/time.Duration(c) + time.Microsecond
		name := fmt.Sprintf("claim-bound case %d: c %d, d %s, %s", i, c, d, f)
		require.Zero(t, f.ahead(c, d, 100), name)
		require.Greater(t, modelIdle(rng, c, c+100, d, f.fixed, f.perJob, 300), 0.0, name)
	}
}

func (f claimFit) String() string { return fmt.Sprintf("fixed %s, per job %s", f.fixed, f.perJob) }
