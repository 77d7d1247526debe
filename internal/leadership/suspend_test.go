package leadership_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/recovery"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

const (
	suspendTTL      = 3 * time.Second
	suspendInterval = 300 * time.Millisecond
)

// pass is a maintenance task that counts its passes.
type pass struct{ runs atomic.Int64 }

func (p *pass) Run()             { p.runs.Add(1) }
func (p *pass) Schedule() string { return "@every 15s" }

// startLeader runs an elector that reads clock until the test ends, and
// waits for it to lead.
func startLeader(t *testing.T, clock *leadership.TestClock) *leadership.Elector {
	t.Helper()
	coll := testdb.NewDB(t).Collection(leadership.DefaultCollection)
	e, err := leadership.New(coll, leadership.Config{ID: "p0", TTL: suspendTTL, Interval: suspendInterval, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	e.UseClock(clock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool { _, ok := e.Leading(); return ok }, 5*time.Second, 5*time.Millisecond, "no leader elected")
	return e
}

// TestSuspendedLeaderStopsLeading: a leader whose machine was suspended for
// longer than the TTL (its wall clock moved on, its monotonic clock did not:
// Go's stops during a suspend on Linux) knows at its next check that it no
// longer leads, so a maintenance pass scheduled then does nothing; the
// election then runs its normal course and a new term begins.
func TestSuspendedLeaderStopsLeading(t *testing.T) {
	t.Parallel()
	clock := &leadership.TestClock{}
	e := startLeader(t, clock)
	before, _ := e.Leading()
	maintenance := &pass{}
	task := recovery.LeaderOnly(e, maintenance)
	task.Run()
	require.EqualValues(t, 1, maintenance.runs.Load(), "the leader runs its pass")

	clock.JumpWall(2 * suspendTTL)
	_, ok := e.Leading()
	require.False(t, ok, "a leader suspended for longer than its TTL still says it leads")
	task.Run()
	require.EqualValues(t, 1, maintenance.runs.Load(), "a leader that was suspended ran a maintenance pass")

	// Nobody took the lease meanwhile: it lapses, and the election takes it
	// again with a new term.
	require.Eventually(t, func() bool { _, ok := e.Leading(); return ok }, 2*suspendTTL+time.Second, 5*time.Millisecond, "the lease was never taken again")
	after, _ := e.Leading()
	require.Greater(t, after.Number, before.Number, "a new term begins after a suspend")
}

// TestSmallClockSkewKeepsTheTerm: a wall clock adjusted by less than the
// tolerance (an NTP step, a slew) is not taken for a suspend.
func TestSmallClockSkewKeepsTheTerm(t *testing.T) {
	t.Parallel()
	clock := &leadership.TestClock{}
	e := startLeader(t, clock)
	before, _ := e.Leading()
	clock.JumpWall(500 * time.Millisecond)
	maintenance := &pass{}
	recovery.LeaderOnly(e, maintenance).Run()
	require.EqualValues(t, 1, maintenance.runs.Load(), "the leader runs its pass")
	// Through several renewals.
	for end := time.Now().Add(4 * suspendInterval); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		term, ok := e.Leading()
		require.True(t, ok, "a small skew of the wall clock ended the term")
		require.Equal(t, before, term)
	}
}
