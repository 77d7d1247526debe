package main

import (
	"os"
	"runtime/debug"
)

// defaultGCPercent is the garbage collector's target (GOGC) devdb runs with
// when GOGC is not set: at Go's default of 100 its collections and the
// preemptions they bring took a seventh of its CPU under a burn-down; at
// 400, a fifth less CPU for some 15–20 MiB more memory at its peak
// (docs/BENCHMARKS.md).
const defaultGCPercent = 400

// setGCPercent sets defaultGCPercent unless GOGC is set, and returns the
// percent in effect.
func setGCPercent() int {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	return p
}
