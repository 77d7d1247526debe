package docket

import (
	"fmt"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/recovery"
)

// PeriodicJob is a job the elected process inserts on a schedule, each tick
// once however many processes run (Config.PeriodicJobs).
type PeriodicJob struct {
	// Name identifies the periodic job across restarts; its ticks are
	// counted under it, and each tick's job has the id periodic:NAME:TICK.
	// Required, at most 100 bytes.
	Name string
	// Schedule is a cron spec: five fields, or six with seconds first
	// ("*/10 * * * * *"), or a descriptor ("@hourly", "@every 30s").
	Schedule string
	// Args are each tick's job's args; their Kind names the job's kind,
	// which this client must have a handler for. Required. NewClient
	// checks them as an insert does, and with their Validate when they
	// have one.
	Args jobs.Args
	// Queue, Priority and MaxAttempts are each tick's job's options. A zero
	// field takes the args' InsertOpts() (see ArgsWithInsertOpts), then the
	// default.
	Queue       string
	Priority    int
	MaxAttempts int
}

// validatePeriodicJobs checks each job as NewClient can, without handlers.
func validatePeriodicJobs(list []PeriodicJob) error {
	for i, p := range list {
		if p.Args == nil {
			return fmt.Errorf("periodic job %d (%q): args must not be nil", i, p.Name)
		}
		if v, ok := argsAs[jobs.Validator](p.Args); ok {
			if err := v.Validate(); err != nil {
				return fmt.Errorf("periodic job %d (%q): args of kind %q: %w", i, p.Name, p.Args.Kind(), err)
			}
		}
	}
	return recovery.ValidatePeriodicJobs(periodicForEngine(list))
}

// periodicForEngine returns list as the periodic enqueuer takes it, each
// job's options filled as an insert's are.
func periodicForEngine(list []PeriodicJob) []recovery.PeriodicJob {
	out := make([]recovery.PeriodicJob, len(list))
	for i, p := range list {
		var kind string
		if p.Args != nil {
			kind = p.Args.Kind()
		}
		o := InsertOpts{Queue: p.Queue, Priority: p.Priority, MaxAttempts: p.MaxAttempts}
		if p.Args != nil {
			o = InsertOptsFor(p.Args, o)
		}
		out[i] = recovery.PeriodicJob{Name: p.Name, Schedule: p.Schedule, Kind: kind, Args: p.Args,
			Queue: o.Queue, Priority: o.Priority, MaxAttempts: o.MaxAttempts}
	}
	return out
}
