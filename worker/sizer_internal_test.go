package worker

import (
	"errors"
	"testing"
	"time"
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
