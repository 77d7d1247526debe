package metrics

import (
	"errors"

	"github.com/docketq/docket/worker"
	"github.com/prometheus/client_golang/prometheus"
)

// ProcessConfig configures Process.
type ProcessConfig struct {
	// Stats reads the pool's own counts (the client's Stats). Required.
	Stats func() worker.Stats
	// Queue configures the leader's queue gauges. Queue.Queue and
	// Queue.Leader are required.
	Queue QueueStatsConfig
	// EventsDropped, when set, reads how many job events the process
	// dropped because a subscriber fell behind.
	EventsDropped func() uint64
}

// Process is every docket metric of one process as one collector, for a
// registry of the caller's: the pool's (Worker, which must observe the
// pool), its own counts (RegisterPoolStats') and the leader's queue gauges
// (Queue, which must Run). The worker command and an embedding
// application's docket.NewCollector export the same set.
type Process struct {
	Worker *Worker
	Queue  *QueueStats
	all    []prometheus.Collector
}

var _ prometheus.Collector = (*Process)(nil)

// NewProcess returns the metrics of one process.
func NewProcess(cfg ProcessConfig) (*Process, error) {
	if cfg.Stats == nil {
		return nil, errors.New("metrics: ProcessConfig needs Stats")
	}
	qs, err := NewQueueStats(cfg.Queue)
	if err != nil {
		return nil, err
	}
	p := &Process{Worker: newWorker(), Queue: qs}
	p.all = append(p.Worker.collectors(), poolStats(cfg.Stats)...)
	if cfg.EventsDropped != nil {
		p.all = append(p.all, prometheus.NewCounterFunc(prometheus.CounterOpts(opts("events_dropped_total",
			"Job events dropped because a subscriber's buffer was full (docket.SubscribeConfig.Buffer).")), func() float64 { return float64(cfg.EventsDropped()) }))
	}
	p.all = append(p.all, qs)
	return p, nil
}

// Describe implements prometheus.Collector.
func (p *Process) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range p.all {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (p *Process) Collect(ch chan<- prometheus.Metric) {
	for _, c := range p.all {
		c.Collect(ch)
	}
}
