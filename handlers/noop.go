package handlers

import (
	"context"

	"github.com/docketq/docket/jobs"
)

// NoopArgs are the args of a noop job: none. The kind exists to measure
// the queue itself and to check that workers are alive.
type NoopArgs struct{}

// Kind implements jobs.Args.
func (NoopArgs) Kind() string { return "noop" }

// Noop does nothing and succeeds.
func Noop(context.Context, *jobs.Job, NoopArgs) error { return nil }
