package recovery

import (
	"context"
	"time"
)

// SetNow makes the enqueuer read the time from now: tests drive its clock.
func (p *PeriodicEnqueuer) SetNow(now func() time.Time) { p.now = now }

// SetStep makes the enqueuer call step after each of its writes.
func (p *PeriodicEnqueuer) SetStep(step func(ctx context.Context, name string) error) { p.step = step }

// SweepOrphans runs the sweep of held jobs that will never be released for
// each of p's jobs, now, and returns how many it deleted.
func (p *PeriodicEnqueuer) SweepOrphans(ctx context.Context) (int, error) {
	n := 0
	for _, j := range p.jobs {
		k, err := p.sweepOrphans(ctx, j)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Unexported defaults and names the external tests check against.
const (
	DefaultDeadRetention      = defaultDeadRetention
	DefaultPeriodicCollection = defaultPeriodicCollection
)

// PeriodicJobID is the id of the job of tick for the periodic job name.
func PeriodicJobID(name string, tick time.Time) string { return periodicJobID(name, tick) }

// SetStep makes the reaper call step before each step of its passes; an
// error it returns fails that step.
func (r *Reaper) SetStep(step func(name string) error) { r.step = step }
