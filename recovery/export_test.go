package recovery

import "time"

// SetNow makes the enqueuer read the time from now: tests drive its clock.
func (p *PeriodicEnqueuer) SetNow(now func() time.Time) { p.now = now }
