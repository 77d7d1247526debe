package worker

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
)

func TestValidateProcessLimits(t *testing.T) {
	for _, tc := range []struct {
		limits map[string]int
		want   string // "" for valid
	}{
		{nil, ""},
		{map[string]int{"kind:resize": 1, "queue:bulk": 10000}, ""},
		{map[string]int{"kind:resize": 0}, `worker.processLimits["kind:resize"]: 0 must be from 1 to 10000`},
		{map[string]int{"queue:bulk": -3}, `worker.processLimits["queue:bulk"]: -3 must be from 1 to 10000`},
		{map[string]int{"kind:resize": 10001}, `worker.processLimits["kind:resize"]: 10001`},
		{map[string]int{"resize": 2}, "worker.processLimits: "},
		{map[string]int{"queue:": 2}, "worker.processLimits: "},
	} {
		err := Config{ProcessLimits: tc.limits}.WithDefaults().Validate()
		if tc.want == "" {
			require.NoError(t, err, tc.limits)
			continue
		}
		require.ErrorContains(t, err, tc.want, tc.limits)
	}
}

// TestProcessLimitsRoom: a kind or queue at its limit is left out, and
// the room is the least left among the limited ones kept; unlimited ones
// are always kept and bound nothing.
func TestProcessLimitsRoom(t *testing.T) {
	p := newProcessLimits(map[string]int{"kind:x": 2, "kind:y": 5, "queue:a": 3})
	kinds, queues := []string{"x", "y", "z"}, []string{"a", "b"}
	k, q, room := p.room(kinds, queues)
	require.Equal(t, kinds, k)
	require.Equal(t, queues, q)
	require.Equal(t, 2, room, "x's room")

	p.hold(&jobs.Job{Kind: "x", Queue: "a"}, 1)
	k, q, room = p.room(kinds, queues)
	require.Equal(t, kinds, k)
	require.Equal(t, queues, q)
	require.Equal(t, 1, room)

	p.hold(&jobs.Job{Kind: "x", Queue: "b"}, 1)
	k, _, room = p.room(kinds, queues)
	require.Equal(t, []string{"y", "z"}, k, "x at its limit is left out")
	require.Equal(t, 2, room, "a's room, less than y's")
	require.Equal(t, map[string]int{"kind:x": 2, "queue:a": 1}, p.held())

	p.hold(&jobs.Job{Kind: "z", Queue: "a"}, 1)
	p.hold(&jobs.Job{Kind: "z", Queue: "a"}, 1)
	k, q, room = p.room(kinds, queues)
	require.Equal(t, []string{"y", "z"}, k)
	require.Equal(t, []string{"b"}, q, "a at its limit is left out")
	require.Equal(t, 5, room, "y's room")

	k, q, room = p.room([]string{"z"}, []string{"b"})
	require.Equal(t, []string{"z"}, k)
	require.Equal(t, []string{"b"}, q)
	require.Equal(t, math.MaxInt, room, "nothing limited kept: no bound")

	p.hold(&jobs.Job{Kind: "x", Queue: "a"}, -1)
	p.hold(&jobs.Job{Kind: "x", Queue: "b"}, -1)
	p.hold(&jobs.Job{Kind: "z", Queue: "a"}, -1)
	p.hold(&jobs.Job{Kind: "z", Queue: "a"}, -1)
	require.Empty(t, p.held())
	k, q, room = p.room(kinds, queues)
	require.Equal(t, kinds, k)
	require.Equal(t, queues, q)
	require.Equal(t, 2, room)
}

// TestProcessRoomWithoutLimits: no process limit leaves the claim as it
// is, and bounds nothing.
func TestProcessRoomWithoutLimits(t *testing.T) {
	w := &Worker{cfg: Config{Queues: []string{"a"}}, plimits: newProcessLimits(nil)}
	params := store.ClaimParams{Kinds: []string{"x"}, Queues: []string{"a"}}
	room, ok := w.processRoom(&params, []string{"x"})
	require.True(t, ok)
	require.Equal(t, math.MaxInt, room)
	require.Equal(t, []string{"x"}, params.Kinds)
	require.Equal(t, 7, w.fitProcessRoom(7, room))
}

// TestProcessLimitsHoldUnderConcurrentEndsAndClaims plays the dispatcher
// (awaitRoom's slot, processRoom, the gathered slots capped by
// fitProcessRoom, a claim of any open kind and queue, launch's count)
// against jobs that end on their own goroutines at random moments, as
// launch's goroutines do: no limit is ever passed, each fills up, a claim
// never takes more than the room, and everything is uncounted in the end.
// With unlimited kinds and queues beside the limited ones, what is full is
// left out of claims; with all of them limited, the dispatcher also waits
// for ends with nothing to claim.
func TestProcessLimitsHoldUnderConcurrentEndsAndClaims(t *testing.T) {
	t.Run("some limited", func(t *testing.T) {
		concurrentEndsAndClaims(t, []string{"x", "y", "z"}, []string{"a", "b"})
	})
	t.Run("all limited", func(t *testing.T) {
		concurrentEndsAndClaims(t, []string{"x", "y"}, []string{"a"})
	})
}

func concurrentEndsAndClaims(t *testing.T, kinds, queues []string) {
	limits := map[string]int{"kind:x": 2, "kind:y": 3, "queue:a": 4}
	w := &Worker{
		cfg:     Config{Queues: queues, ProcessLimits: limits},
		wake:    make(chan struct{}, 1),
		plimits: newProcessLimits(limits),
	}
	w.claimingCtx, w.stopClaiming = context.WithCancel(context.Background())
	defer w.stopClaiming()

	var (
		ends    sync.WaitGroup
		mu      sync.Mutex // guards most and over
		most    = map[string]int{}
		over    []string
		waits   int // claims not made: nothing left to claim
		left    int // claims made without some kind or queue
		claimed int
	)
	check := func() { // with w.mu held
		mu.Lock()
		defer mu.Unlock()
		for name, n := range w.plimits.held() {
			most[name] = max(most[name], n)
			if n > limits[name] {
				over = append(over, name)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	params := store.ClaimParams{Kinds: kinds, Queues: queues}
	for claimed < 3000 {
		w.held.Add(1) // awaitRoom's slot
		room, ok := w.processRoom(&params, kinds)
		if !ok {
			waits++
			continue
		}
		if len(params.Kinds) < len(kinds) || len(params.Queues) < len(queues) {
			left++
		}
		for _, k := range params.Kinds {
			require.Contains(t, kinds, k)
		}
		want := 1 + rng.IntN(6) // what gatherSlots took
		w.held.Add(int64(want - 1))
		slots := w.fitProcessRoom(want, room)
		require.LessOrEqual(t, slots, room)
		n := 1 + rng.IntN(slots) // a claim may bring fewer
		w.held.Add(-int64(slots - n))
		for range n {
			job := &jobs.Job{Kind: params.Kinds[rng.IntN(len(params.Kinds))], Queue: params.Queues[rng.IntN(len(params.Queues))]}
			w.mu.Lock()
			w.plimits.hold(job, 1)
			check()
			w.mu.Unlock()
			claimed++
			d := time.Duration(rng.IntN(200)) * time.Microsecond
			ends.Add(1)
			go func() {
				defer ends.Done()
				time.Sleep(d)
				w.held.Add(-1)
				w.mu.Lock()
				w.plimits.hold(job, -1)
				w.mu.Unlock()
				w.signalWake()
			}()
		}
	}
	ends.Wait()
	require.Empty(t, over, "limits passed")
	require.Equal(t, map[string]int{"kind:x": 2, "kind:y": 3, "queue:a": 4}, most, "every limit filled")
	require.Positive(t, left, "claims left out what was at its limit")
	if len(kinds) == 2 {
		require.Positive(t, waits, "claims not made for want of room")
	}
	require.Zero(t, w.held.Load(), "slots given back")
	w.mu.Lock()
	require.Empty(t, w.plimits.held(), "jobs uncounted")
	w.mu.Unlock()
}

// TestProcessRoomWaitsForAnEnd: when every kind is at its limit no claim
// is made: processRoom gives back the claim's slot and waits for a job to
// end, or for the worker to stop claiming.
func TestProcessRoomWaitsForAnEnd(t *testing.T) {
	w := &Worker{
		cfg:     Config{Queues: []string{"a"}},
		wake:    make(chan struct{}, 1),
		plimits: newProcessLimits(map[string]int{"kind:x": 1}),
	}
	w.claimingCtx, w.stopClaiming = context.WithCancel(context.Background())
	job := &jobs.Job{Kind: "x", Queue: "a"}
	w.plimits.hold(job, 1)
	params := store.ClaimParams{}
	w.held.Add(1)
	done := make(chan bool)
	go func() {
		_, ok := w.processRoom(&params, []string{"x"})
		done <- ok
	}()
	select {
	case <-done:
		t.Fatal("returned while x is at its limit and no job ended")
	case <-time.After(50 * time.Millisecond):
	}
	w.mu.Lock()
	w.plimits.hold(job, -1)
	w.mu.Unlock()
	w.signalWake()
	require.False(t, <-done, "nothing claimed: the caller goes round again")
	require.Zero(t, w.held.Load(), "the claim's slot given back")
	room, ok := w.processRoom(&params, []string{"x"})
	require.True(t, ok)
	require.Equal(t, 1, room)
	require.Equal(t, []string{"x"}, params.Kinds)

	w.plimits.hold(job, 1)
	go func() {
		_, ok := w.processRoom(&params, []string{"x"})
		done <- ok
	}()
	w.stopClaiming()
	require.False(t, <-done, "a stop ends the wait")
}
