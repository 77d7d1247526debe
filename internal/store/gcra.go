package store

import (
	"math/bits"
	"time"
)

// The arithmetic of every rate, plain or partitioned: GCRA, the generic
// cell rate algorithm. A rate of N starts per period with a burst B has an
// emission interval T = period/N (rounded up to the nanosecond, so that
// rounding only slows it). Its state is one instant, tat, the theoretical
// arrival time of the next start: k starts are allowed at t when
// max(tat, t) + k·T - t ≤ B·T, and taking them sets tat to
// max(tat, t) + k·T, rounded up to the millisecond as BSON stores it.
//
// So in any window of length w at most B + ⌊w/T⌋ starts are taken, and
// after a quiet spell of B·T, B may start at once.
//
// A stored tat is measured in the interval it was written under, which is
// stored beside it (tNs): when the rate is changed, a reader converts it
// to the new interval keeping how much of the burst is used (used·T_old →
// used·T_new), so a change applies at once, neither waiting out the old
// rate's debt nor forgiving it.
//
// Rate.Validate bounds period, burst and B·T (MaxRatePeriod,
// MaxRateWindow), so none of this arithmetic can overflow a
// time.Duration; a tat another application wrote, however far off, is
// clamped.

// MaxRatePeriod bounds a rate's period, and MaxRateWindow the time its
// whole burst takes to refill (burst × period / N).
const (
	MaxRatePeriod = 366 * 24 * time.Hour
	MaxRateWindow = 100 * 365 * 24 * time.Hour
)

// gcra is a rate's arithmetic: its emission interval and burst.
type gcra struct {
	t     time.Duration // emission interval, ≥ 1ns
	burst int           // ≥ 1
}

// window is how long the whole burst takes to refill: burst·T.
func (g gcra) window() time.Duration { return time.Duration(g.burst) * g.t }

// ahead is how far tat is past t, clamped to [0, MaxRateWindow].
func ahead(tat, t time.Time) time.Duration {
	if !tat.After(t) {
		return 0
	}
	return min(tat.Sub(t), MaxRateWindow) // Sub saturates, min clamps
}

// avail is how many starts tat allows at t: from 0 to burst.
func (g gcra) avail(tat, t time.Time) int {
	room := g.window() - ahead(tat, t)
	if room < g.t {
		return 0
	}
	return min(int(room/g.t), g.burst)
}

// take returns tat after k starts at t (k at most avail).
func (g gcra) take(tat, t time.Time, k int) time.Time {
	return ceilMs(t.Add(ahead(tat, t) + time.Duration(k)*g.t))
}

// ceilMs rounds t up to the millisecond, as BSON stores it.
func ceilMs(t time.Time) time.Time {
	if r := t.Truncate(time.Millisecond); !r.Equal(t) {
		return r.Add(time.Millisecond)
	}
	return t
}

// giveBack returns tat, written by a take, with n of its starts returned.
func (g gcra) giveBack(tat time.Time, n int) time.Time {
	return ceilMs(tat.Add(-time.Duration(min(n, g.burst)) * g.t))
}

// used is how much of the burst tat has taken at t, and when the next
// start is allowed (zero: now).
func (g gcra) used(tat, t time.Time) (int, time.Time) {
	if a := g.avail(tat, t); a > 0 {
		return g.burst - a, time.Time{}
	}
	return g.burst, g.nextStart(tat, t)
}

// nextStart is when tat allows one start, seen at t: tat - (burst-1)·T,
// or t when that has passed.
func (g gcra) nextStart(tat, t time.Time) time.Time { return g.startsAt(tat, t, 1) }

// startsAt is when tat allows k starts at once (k from 1 to burst), seen
// at t: tat - (burst-k)·T, or t when that has passed.
func (g gcra) startsAt(tat, t time.Time, k int) time.Time {
	kt := time.Duration(k) * g.t
	if ahead(tat, t) == MaxRateWindow { // another application's tat, far off
		return t.Add(MaxRateWindow - g.window() + kt)
	}
	if next := tat.Add(kt - g.window()); next.After(t) {
		return next
	}
	return t
}

// convert returns tat, written under the emission interval from (its
// stored tNs), in g's interval, seen at t: the same part of the burst
// used. from ≤ 0 (not stored: a document of an older docket or another
// application) is taken as g's.
func (g gcra) convert(tat, t time.Time, from time.Duration) time.Time {
	if from <= 0 || from == g.t || !tat.After(t) {
		return tat
	}
	d := uint64(ahead(tat, t))
	hi, lo := bits.Mul64(d, uint64(g.t))
	if hi >= uint64(from) { // the quotient overflows: clamp
		return t.Add(MaxRateWindow)
	}
	q, r := bits.Div64(hi, lo, uint64(from))
	if r > 0 {
		q++ // round up: conversion only slows the rate
	}
	return t.Add(time.Duration(min(q, uint64(MaxRateWindow))))
}
