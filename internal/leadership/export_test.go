package leadership

import (
	"sync/atomic"
	"time"
)

// TestClock is a clock a test moves. Pass moves both its readings, as time
// passing does; JumpWall moves only the wall clock's, as a system suspend
// does (the monotonic clock stops while the machine sleeps) or an operator
// setting the clock forward or back.
type TestClock struct{ passed, jumped atomic.Int64 }

// Pass makes d pass on both clocks.
func (c *TestClock) Pass(d time.Duration) { c.passed.Add(int64(d)) }

// JumpWall moves the wall clock by d, the monotonic clock staying put.
func (c *TestClock) JumpWall(d time.Duration) { c.jumped.Add(int64(d)) }

func (c *TestClock) read() reading {
	r := readClock()
	passed := time.Duration(c.passed.Load())
	return reading{mono: r.mono.Add(passed), wall: r.wall.Add(passed + time.Duration(c.jumped.Load()))}
}

// UseClock makes e read c. Call it before Run.
func (e *Elector) UseClock(c *TestClock) { e.clock = c.read }
