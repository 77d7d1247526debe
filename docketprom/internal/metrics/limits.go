package metrics

import (
	"context"
	"sync"

	"github.com/docketq/docket/queue"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// The flow-control gauges, exported with the queue gauges by the elected
// leader only, from what it read at its last count: one series per
// concurrency or rate limit (limit="kind:email"). Limit names come from the
// database: labelValue makes any of them a valid label.
var (
	limitRunningDesc = leaderDesc("_limit_running_jobs",
		"Jobs of a concurrency limit running now (slots taken)")
	limitMaxDesc = leaderDesc("_limit_max_running_jobs",
		"A concurrency limit: the most jobs of it that run at once")
	limitWaitingDesc = leaderDesc("_limit_waiting_jobs",
		"Runnable jobs (available, due) of a concurrency or rate limit")
	partitionMaxDesc = leaderDesc("_limit_partition_max_running_jobs",
		"A partition limit: the most jobs of one value of its args field that run at once")
	partitionsDesc = leaderDesc("_limit_partitions_running",
		"Values of a partition limit's args field with jobs running now")
	partitionsFullDesc = leaderDesc("_limit_partitions_full",
		"Values of a partition limit's args field running as many jobs as it allows")
	rateStartsDesc = leaderDesc("_rate_limit_starts_total",
		"Starts reserved under a rate limit across every process since it was set")
	rateAllowedDesc = leaderDesc("_rate_limit_per_second",
		"A rate limit's steady rate, in starts per second")
	ratePartitionsDesc = leaderDesc("_rate_limit_partitions",
		"Partitions of a partitioned rate limit with state stored")
	ratePartitionsSpentDesc = leaderDesc("_rate_limit_partitions_spent",
		"Partitions of a partitioned rate limit that allow no start now")
	rateBurstUsedDesc = leaderDesc("_rate_limit_burst_used",
		"How much of a rate limit's burst is used (burst: no start is allowed now)")
)

// leaderDesc describes the flow-control gauge Namespace+name, one series
// per limit, that the leader alone exports.
func leaderDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(Namespace+name, help+"; exported by the leader only.", []string{"limit"}, nil)
}

// limitsRead is what the leader last read of the limits.
type limitsRead struct {
	mu      sync.Mutex
	limits  []queue.RunLimit
	rates   []queue.RateLimit
	waiting map[string]int64
}

// readLimits reads the limits, the rates and the jobs waiting on them
// into l; a failure keeps the last read and is logged.
func (l *limitsRead) read(ctx context.Context, q *queue.Client, log *zap.Logger) {
	limits, err := q.RunLimits(ctx)
	var rates []queue.RateLimit
	if err == nil {
		rates, err = q.RateLimits(ctx)
	}
	var waiting map[string]int64
	if err == nil {
		var names []string
		for _, x := range limits {
			names = append(names, x.Name)
		}
		for _, x := range rates {
			names = append(names, x.Name)
		}
		waiting, err = q.WaitingOnLimits(ctx, names)
	}
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("reading the limits for metrics failed; retrying at the next interval", zap.Error(err))
		}
		return
	}
	l.mu.Lock()
	l.limits, l.rates, l.waiting = limits, rates, waiting
	l.mu.Unlock()
}

func (l *limitsRead) forget() {
	l.mu.Lock()
	l.limits, l.rates, l.waiting = nil, nil, nil
	l.mu.Unlock()
}

func describeLimits(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{limitRunningDesc, limitMaxDesc, limitWaitingDesc, partitionMaxDesc, partitionsDesc, partitionsFullDesc, rateStartsDesc, rateAllowedDesc, rateBurstUsedDesc, ratePartitionsDesc, ratePartitionsSpentDesc} {
		ch <- d
	}
}

// collect exports what was read. Names that meet in one label value
// (another app's malformed names) are exported once: the first.
func (l *limitsRead) collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	gauge := func(d *prometheus.Desc, t prometheus.ValueType, v float64, name string) {
		key := d.String() + "\x00" + labelValue(name)
		if seen[key] {
			return
		}
		seen[key] = true
		ch <- prometheus.MustNewConstMetric(d, t, v, labelValue(name))
	}
	for _, x := range l.limits {
		if x.Malformed != "" {
			continue
		}
		gauge(limitRunningDesc, prometheus.GaugeValue, float64(x.Running), x.Name)
		if !x.NoTotal {
			gauge(limitMaxDesc, prometheus.GaugeValue, float64(x.Limit), x.Name)
		}
		gauge(limitWaitingDesc, prometheus.GaugeValue, float64(l.waiting[x.Name]), x.Name)
		if x.PartitionBy != "" {
			gauge(partitionMaxDesc, prometheus.GaugeValue, float64(x.PartitionLimit), x.Name)
			gauge(partitionsDesc, prometheus.GaugeValue, float64(x.Partitions), x.Name)
			gauge(partitionsFullDesc, prometheus.GaugeValue, float64(x.Saturated), x.Name)
		}
	}
	for _, x := range l.rates {
		if x.Malformed != "" {
			continue
		}
		gauge(rateStartsDesc, prometheus.CounterValue, float64(x.Starts), x.Name)
		gauge(rateAllowedDesc, prometheus.GaugeValue, float64(x.Rate.N)/x.Rate.Per.Seconds(), x.Name)
		if x.Rate.By != "" {
			gauge(ratePartitionsDesc, prometheus.GaugeValue, float64(x.Partitions), x.Name)
			gauge(ratePartitionsSpentDesc, prometheus.GaugeValue, float64(x.Spent), x.Name)
		} else {
			gauge(rateBurstUsedDesc, prometheus.GaugeValue, float64(x.Used), x.Name)
		}
		gauge(limitWaitingDesc, prometheus.GaugeValue, float64(l.waiting[x.Name]), x.Name)
	}
}
