package worker

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClaimSizer walks the adaptive claim sizes through what claims
// return.
func TestClaimSizer(t *testing.T) {
	const waited, fresh = backlogWait, time.Millisecond
	steps := []struct {
		name       string
		asked, got int
		waited     time.Duration
		err        error
		want       claimSize
	}{
		{"a single claim finds a fresh job", 1, 1, fresh, nil, claimOne},
		{"another finds one that had waited", 1, 1, waited, nil, claimOne},
		{"a second in a row that had waited: a backlog", 1, 1, waited, nil, claimFree},
		{"the batch comes back full", 20, 20, waited, nil, claimGathered},
		{"more than half: others took the rest", 20, 12, waited, nil, claimGathered},
		{"less than half: little left", 20, 4, waited, nil, claimFree},
		{"one job from a batch: a trickle", 4, 1, waited, nil, claimOne},
		{"an empty claim", 1, 0, 0, nil, claimOne},
		{"an error", 1, 0, 0, errors.New("down"), claimOne},
	}
	var s claimSizer
	for _, st := range steps {
		s.claimed(st.asked, st.got, st.waited, st.err)
		if got := s.next(20, 20); got != st.want {
			t.Fatalf("%s: size %d, want %d", st.name, got, st.want)
		}
	}
	// After the batch for a trickle, twice singleHitsForBatch quick hits in
	// a row make a batch.
	for i := range 2 * singleHitsForBatch {
		s.claimed(1, 1, fresh, nil)
		if want := map[bool]claimSize{true: claimFree, false: claimOne}[i == 2*singleHitsForBatch-1]; s.next(20, 20) != want {
			t.Fatalf("hit %d: size %d, want %d", i+1, s.next(20, 20), want)
		}
	}
	if s.next(1, 20) != claimOne || s.next(20, 1) != claimOne {
		t.Fatal("a claim batch or concurrency of 1 claims one job")
	}
}

// Jobs are claimed ahead only as far as the slots run them while a claim
// is on its way: none for long jobs or before a handler has returned, up to
// the prefetch limit for fast ones, and none when prefetch is off.
func TestHoldTarget(t *testing.T) {
	w := &Worker{cfg: Config{Concurrency: 4, Prefetch: 100}}
	fixed := func(d time.Duration) claimEstimate { return claimEstimate{fit: claimFit{fixed: d}} }
	require.Equal(t, 4, w.holdTarget(fixed(time.Second)), "no handler has returned yet")
	w.handler.observe(time.Second)
	require.Equal(t, 4, w.holdTarget(fixed(100*time.Millisecond)), "claims fast compared with jobs")
	require.Equal(t, 8, w.holdTarget(fixed(500*time.Millisecond)), "the jobs run during a claim, twice")
	w.handler = handlerTime{}
	w.handler.observe(time.Millisecond)
	require.Equal(t, 104, w.holdTarget(fixed(time.Second)), "up to the prefetch limit")
	explore := claimEstimate{fit: claimFit{fixed: time.Second}, explore: true}
	require.Equal(t, 8, w.holdTarget(explore), "how claims grow not known yet: as many ahead as slots at most")
	explore.largest = 10
	require.Equal(t, 4+20, w.holdTarget(explore), "or twice the largest recent claim, which the next may reach")
	w.cfg.Prefetch = -1
	require.Equal(t, 4, w.holdTarget(fixed(time.Second)), "prefetch off")
}
