package docket

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docketq/docket/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// CollectorOpts configures a Collector. The zero value is usable.
type CollectorOpts struct {
	// QueueStatsInterval is how often the elected process counts the jobs
	// per queue and state for docket_jobs and
	// docket_oldest_available_job_age_seconds. Defaults to 15 s.
	QueueStatsInterval time.Duration
	// MaxQueues is how many queues those gauges export by name, those
	// with the most jobs; the rest are summed under queue="(other)".
	// Defaults to 100.
	MaxQueues int
}

// collector is one NewCollector's metrics, and the counting it runs while
// the client runs.
type collector struct {
	m *metrics.Process
}

// NewCollector returns a Prometheus collector of the client's metrics, the
// ones the worker command serves (docs/METRICS.md): what this client's
// pool did (jobs finished by kind, queue and outcome, handler and claim
// durations, heartbeats, leases lost, jobs running), its own counts (stuck
// handlers, jobs given back unstarted, events dropped), and, from the
// elected process only, the jobs per queue and state. Register it on a
// registry of yours:
//
//	col, err := docket.NewCollector(client, nil)
//	...
//	registry.MustRegister(col)
//
// Label values are bounded (the kinds the client registered, the queues
// it serves; the leader's gauges the MaxQueues largest queues) and any
// that is not printable UTF-8 is exported Go-quoted. Call it before Start:
// after, it fails, as the pool takes its observers when it starts. The Go
// runtime's and the process's collectors are not in it: register them too
// if you want them.
func NewCollector(c *Client, opts *CollectorOpts) (prometheus.Collector, error) {
	if opts == nil {
		opts = &CollectorOpts{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return nil, errors.New("docket: NewCollector after Start: the pool takes its observers when it starts")
	}
	var changes <-chan struct{}
	if len(c.collectors) == 0 {
		// One reader of the election's changes; a second collector counts
		// a new term at its next interval.
		changes = c.elector.Changes()
	}
	m, err := metrics.NewProcess(metrics.ProcessConfig{
		Stats:         c.Stats,
		EventsDropped: c.EventsDropped,
		Queue: metrics.QueueStatsConfig{
			Queue: c.q, Leader: c.elector, Changes: changes,
			Interval: opts.QueueStatsInterval, MaxQueues: opts.MaxQueues, Logger: c.log,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("docket: %w", err)
	}
	c.collectors = append(c.collectors, &collector{m: m})
	return m, nil
}

// startCollectors runs the collectors' queue counting until
// stopCollectors. c.mu is held.
func (c *Client) startCollectors() {
	if len(c.collectors) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stopCollect = cancel
	for _, col := range c.collectors {
		c.collecting.Add(1)
		go func() { defer c.collecting.Done(); col.m.Queue.Run(ctx) }()
	}
}

// stopCollectors stops what startCollectors started, and waits for it.
func (c *Client) stopCollectors() {
	if c.stopCollect != nil {
		c.stopCollect()
		c.collecting.Wait()
	}
}
