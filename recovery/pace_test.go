package recovery

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"
)

// A slow pass holds every task back for paceFactor times its duration,
// passes never overlap, and each waiting task gets its turn.
func TestPacerKeepsSlowMaintenanceToItsShare(t *testing.T) {
	p := newPacer()
	defer p.close()
	const pass = 60 * time.Millisecond
	var (
		mu     sync.Mutex
		spans  [][2]time.Time
		inside atomic.Int32
		most   atomic.Int32
	)
	job := func() cron.Job {
		return p.wrap(cron.FuncJob(func() {
			n := inside.Add(1)
			if n > most.Load() {
				most.Store(n)
			}
			start := time.Now()
			time.Sleep(pass)
			inside.Add(-1)
			mu.Lock()
			spans = append(spans, [2]time.Time{start, time.Now()})
			mu.Unlock()
		}))
	}
	var wg sync.WaitGroup
	for range 3 { // three tasks due at once
		wg.Add(1)
		go func() { defer wg.Done(); job().Run() }()
	}
	wg.Wait()
	require.Len(t, spans, 3, "every task had its turn")
	require.EqualValues(t, 1, most.Load(), "passes never overlap")
	for i := 1; i < len(spans); i++ {
		took := spans[i-1][1].Sub(spans[i-1][0])
		gap := spans[i][0].Sub(spans[i-1][1])
		require.GreaterOrEqual(t, gap, paceFactor*took-5*time.Millisecond,
			"pass %d started %s after the one before ended, which took %s", i, gap, took)
	}
}

// A pass waiting for its turn does not run once the scheduler stops, and
// the stop does not wait for its turn.
func TestPacerStopEndsTheWait(t *testing.T) {
	p := newPacer()
	p.wrap(cron.FuncJob(func() { time.Sleep(200 * time.Millisecond) })).Run() // next turn 600 ms on
	ran := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.wrap(cron.FuncJob(func() { ran <- struct{}{} })).Run()
	}()
	time.Sleep(20 * time.Millisecond)
	p.close()
	select {
	case <-done:
	case <-time.After(300 * time.Millisecond):
		t.Fatal("a waiting pass kept the stop waiting")
	}
	require.Empty(t, ran, "a pass waiting for its turn ran after the stop")
}
