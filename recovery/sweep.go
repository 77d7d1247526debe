package recovery

import (
	"cmp"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	"go.uber.org/zap"
)

// SweepConfig is what every sweep (a pass that finds stalled handler data
// and enqueues jobs to finish it) is configured with.
type SweepConfig struct {
	// Schedule is a robfig/cron spec ("@every 30s", "*/1 * * * *").
	Schedule string
	// Threshold is how long data may stay stalled before the pass acts.
	Threshold time.Duration
	// Batch caps the documents one query of a pass reads; a pass reads
	// batch after batch until it has seen everything due.
	Batch int
	// Logger receives the pass's logs. Defaults to a no-op logger.
	Logger *zap.Logger
}

// WithDefaults fills the unset fields of c from d.
func (c SweepConfig) WithDefaults(d SweepConfig) SweepConfig {
	c.Schedule = cmp.Or(c.Schedule, d.Schedule)
	c.Threshold = cmp.Or(c.Threshold, d.Threshold)
	c.Batch = cmp.Or(c.Batch, d.Batch)
	c.Logger = cmp.Or(c.Logger, zap.NewNop())
	return c
}

// Validate reports the first invalid field, named under section.
func (c SweepConfig) Validate(section string) error {
	if _, err := cron.ParseStandard(c.Schedule); err != nil {
		return fmt.Errorf("%s.schedule: %q is not a cron schedule: %w", section, c.Schedule, err)
	}
	if c.Threshold <= 0 {
		return fmt.Errorf("%s.threshold: %s must be positive", section, c.Threshold)
	}
	if c.Batch < 1 {
		return fmt.Errorf("%s.batch: %d must be at least 1", section, c.Batch)
	}
	return nil
}
