package configs

import "github.com/docketq/docket"

// ClientConfig returns the configuration as a docket.Client takes it:
// the file's nested queue, worker, reaper and leader settings on
// docket.Config's flat fields, with the periodic jobs, capacities,
// limits and process limits. The caller adds the logger and the
// application's set-up.
func (c *Config) ClientConfig() docket.Config {
	d := docket.Config{
		ID:                 c.Worker.ID,
		Collection:         c.Queue.Collection,
		WriteConcern:       c.Queue.WriteConcern,
		RetryBase:          c.Queue.RetryBase,
		RetryMax:           c.Queue.RetryMax,
		Queues:             c.Worker.Queues,
		Concurrency:        c.Worker.Concurrency,
		Lease:              c.Worker.Lease,
		HeartbeatInterval:  c.Worker.HeartbeatInterval,
		ShutdownTimeout:    c.Worker.ShutdownTimeout,
		StuckGrace:         c.Worker.StuckGrace,
		PollMin:            c.Worker.PollMin,
		PollMax:            c.Worker.PollMax,
		ClaimBatch:         c.Worker.ClaimBatch,
		Prefetch:           c.Worker.Prefetch,
		ReapInterval:       c.Reaper.Interval,
		ReapGrace:          c.Reaper.Grace,
		ReapBatch:          c.Reaper.Batch,
		RetentionBudget:    c.Reaper.RetentionBudget,
		SucceededRetention: c.Reaper.SucceededRetention,
		DeadRetention:      c.Reaper.DeadRetention,
		LeaderTTL:          c.Leader.TTL,
		PeriodicJobs:       c.ClientPeriodicJobs(),
		Capacities:         c.Capacities,
		Limits:             c.Limits,
		PartitionLimits:    c.PartitionLimits,
		Rates:              c.Rates,
		ProcessLimits:      c.ProcessLimits,
	}
	if !c.Mongo.WriteTimeoutAuto {
		// Set by the operator: it bounds heartbeats and completions too.
		// Left to its default it bounds only operations without a deadline
		// of their own; the worker's writes follow their leases.
		d.WriteTimeout = c.Mongo.WriteTimeout
	}
	return d
}
