package docketprom

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/docketprom/internal/metrics"
	"github.com/docketq/docket/internal/clientengine"
	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/queue"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// electorOf is what the collector needs of a client's leader election.
type electorOf interface {
	metrics.Leader
	Changes() <-chan struct{}
}

// DefaultQueueStatsInterval is Opts.QueueStatsInterval's default.
const DefaultQueueStatsInterval = metrics.DefaultQueueStatsInterval

// Opts configures a collector. The zero value is usable.
type Opts struct {
	// QueueStatsInterval is how often the elected process counts the jobs
	// per queue and state for docket_jobs and
	// docket_oldest_available_job_age_seconds. Defaults to 15 s.
	QueueStatsInterval time.Duration
	// MaxQueues is how many queues those gauges export by name, those
	// with the most jobs; the rest are summed under queue="(other)".
	// Defaults to 100.
	MaxQueues int
	// Logger receives the counting's logs. Defaults to none.
	Logger *zap.Logger
}

// changesTaken records the clients whose election changes a collector
// reads: the channel has one reader, so a second collector of the same
// client counts a new term at its next interval instead.
var changesTaken sync.Map // *docket.Client → struct{}

// NewCollector returns a Prometheus collector of the client's metrics, the
// ones the worker command serves (docs/METRICS.md): what this client's
// pool did (jobs finished by kind, queue and outcome, handler and claim
// durations, heartbeats, leases lost, jobs running), its own counts (stuck
// handlers, jobs given back unstarted, events dropped), and, from the
// elected process only, the jobs per queue and state. Register it on a
// registry of yours:
//
//	col, err := docketprom.NewCollector(client, nil)
//	...
//	registry.MustRegister(col)
//
// Label values are bounded (the kinds the client registered, the queues
// it serves; the leader's gauges the MaxQueues largest queues) and any
// that is not printable UTF-8 is exported Go-quoted. Call it before Start:
// after, it fails, as the pool takes its observers when it starts. The Go
// runtime's and the process's collectors are not in it: register them too
// if you want them.
func NewCollector(c *docket.Client, opts *Opts) (prometheus.Collector, error) {
	if opts == nil {
		opts = &Opts{}
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	// The term the client's elector leads decides which process exports
	// the queue gauges.
	var elector electorOf = clientengine.Part[*leadership.Elector](c)
	var changes <-chan struct{}
	if _, taken := changesTaken.LoadOrStore(c, struct{}{}); !taken {
		changes = elector.Changes()
	}
	m, err := metrics.NewProcess(metrics.ProcessConfig{
		Stats:         c.PoolStats,
		EventsDropped: c.EventsDropped,
		Queue: metrics.QueueStatsConfig{
			Queue: clientengine.Part[*queue.Client](c), Leader: elector, Changes: changes,
			Interval: opts.QueueStatsInterval, MaxQueues: opts.MaxQueues, Logger: log,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("docketprom: %w", err)
	}
	if err := c.AddObserver(m.Worker); err != nil {
		return nil, fmt.Errorf("docketprom: NewCollector: %w", err)
	}
	if err := c.RunWhileStarted(func(ctx context.Context) { m.Queue.Run(ctx) }); err != nil {
		return nil, fmt.Errorf("docketprom: NewCollector: %w", err)
	}
	return m, nil
}
