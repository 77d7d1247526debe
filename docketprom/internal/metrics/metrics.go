// Package metrics publishes what a docket worker process does, in the
// Prometheus format, and answers Kubernetes' liveness and readiness probes.
//
// Worker counts what this process's pool did (a worker.Observer): every
// process exports its own, and Prometheus sums them across processes.
// QueueStats exports the jobs per queue and state and the age of the oldest
// waiting job, computed from the database by the elected leader only, and
// exported by the leader only, so that their cost does not grow with the
// number of processes and a sum across processes counts each job once.
// Handler serves both, with /healthz and /readyz.
package metrics

import (
	"errors"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/worker"
	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric's name.
const Namespace = "docket"

// Buckets of the histograms, in seconds.
var (
	// HandlerBuckets spans a few milliseconds to ten minutes: handlers range
	// from a no-op to a long export.
	HandlerBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	// ClaimBuckets spans a fast MongoDB (a millisecond) to the claim's own
	// 10 s bound.
	ClaimBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
)

// Worker counts what one process's worker pool does. It implements
// worker.Observer: pass it as worker.Config.Observer.
type Worker struct {
	finished    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	claim       prometheus.Histogram
	claimed     prometheus.Counter
	emptyClaims prometheus.Counter
	claimErrors prometheus.Counter
	leasesLost  *prometheus.CounterVec
	heartbeats  *prometheus.CounterVec
	retries     *prometheus.CounterVec
	running     *prometheus.GaugeVec
	progress    *prometheus.CounterVec
}

var (
	_ worker.Observer         = (*Worker)(nil)
	_ worker.ProgressObserver = (*Worker)(nil)
)

// NewWorker returns the metrics of a worker pool, registered with reg.
func NewWorker(reg prometheus.Registerer) (*Worker, error) {
	w := newWorker()
	for _, c := range w.collectors() {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// newWorker returns the metrics of a worker pool, registered nowhere.
func newWorker() *Worker {
	w := &Worker{
		finished: prometheus.NewCounterVec(prometheus.CounterOpts(opts("jobs_finished_total",
			"Attempts that ended in this process, by kind, queue and outcome: succeeded, retried (failed, available again), dead, cancelled, released (given back at shutdown), lease_lost (taken by another worker or the reaper; nothing written), unrecorded (the outcome could not be written; the reaper re-queues the job).")), []string{"kind", "queue", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "job_duration_seconds",
			Help:    "How long handlers ran, by kind, whatever the outcome.",
			Buckets: HandlerBuckets,
		}, []string{"kind"}),
		claim: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "claim_duration_seconds",
			Help:    "Claim round trips to the database, each taking up to --claim-batch jobs, whatever they returned.",
			Buckets: ClaimBuckets,
		}),
		claimed: prometheus.NewCounter(prometheus.CounterOpts(opts("jobs_claimed_total",
			"Jobs claimed by this process."))),
		emptyClaims: prometheus.NewCounter(prometheus.CounterOpts(opts("claims_empty_total",
			"Claims that found no runnable job."))),
		claimErrors: prometheus.NewCounter(prometheus.CounterOpts(opts("claim_errors_total",
			"Claims that failed (the database away or slow)."))),
		leasesLost: prometheus.NewCounterVec(prometheus.CounterOpts(opts("leases_lost_total",
			"Attempts whose lease a fenced write (a heartbeat or the final write) found taken by another worker or the reaper, by kind and queue.")), []string{"kind", "queue"}),
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts(opts("heartbeats_total",
			"Lease renewals, by result: renewed, lease_lost, failed (the database away; retried at the next heartbeat).")), []string{"result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts(opts("job_retries_total",
			"Attempts started that were not their job's first (after a failure or a lost lease), by kind and queue.")), []string{"kind", "queue"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("jobs_running",
			"Jobs this process holds now, by kind and queue.")), []string{"kind", "queue"}),
		progress: prometheus.NewCounterVec(prometheus.CounterOpts(opts("progress_writes_total",
			"Progress values (jobs.Progress) that this process's lease renewals wrote, by kind; reports made between two renewals coalesce into one (see docket_progress_reports_total).")), []string{"kind"}),
	}
	// The results are known in advance: show them at zero from the start,
	// so that a rate over them is defined before the first event.
	for _, r := range []string{"renewed", "lease_lost", "failed"} {
		w.heartbeats.WithLabelValues(r)
	}
	return w
}

func (w *Worker) collectors() []prometheus.Collector {
	return []prometheus.Collector{w.finished, w.duration, w.claim, w.claimed, w.emptyClaims, w.claimErrors, w.leasesLost, w.heartbeats, w.retries, w.running, w.progress}
}

// Claimed implements worker.Observer.
func (w *Worker) Claimed(took time.Duration, n int, err error) {
	w.claim.Observe(took.Seconds())
	switch {
	case err != nil:
		w.claimErrors.Inc()
	case n == 0:
		w.emptyClaims.Inc()
	}
	w.claimed.Add(float64(n))
}

// Started implements worker.Observer.
func (w *Worker) Started(job *jobs.Job) {
	kind, q := labelValue(job.Kind), labelValue(job.Queue)
	w.running.WithLabelValues(kind, q).Inc()
	if job.Attempt > 1 {
		w.retries.WithLabelValues(kind, q).Inc()
	}
}

// Finished implements worker.Observer.
func (w *Worker) Finished(job *jobs.Job, outcome worker.Outcome, handler time.Duration) {
	kind, q := labelValue(job.Kind), labelValue(job.Queue)
	w.running.WithLabelValues(kind, q).Dec()
	w.finished.WithLabelValues(kind, q, labelValue(string(outcome))).Inc()
	w.duration.WithLabelValues(kind).Observe(handler.Seconds())
}

// Heartbeat implements worker.Observer.
func (w *Worker) Heartbeat(_ *jobs.Job, err error) {
	switch {
	case err == nil:
		w.heartbeats.WithLabelValues("renewed").Inc()
	case errors.Is(err, jobs.ErrLeaseLost):
		w.heartbeats.WithLabelValues("lease_lost").Inc()
	default:
		w.heartbeats.WithLabelValues("failed").Inc()
	}
}

// LeaseLost implements worker.Observer.
func (w *Worker) LeaseLost(job *jobs.Job) {
	w.leasesLost.WithLabelValues(labelValue(job.Kind), labelValue(job.Queue)).Inc()
}

// Progressed implements worker.ProgressObserver.
func (w *Worker) Progressed(job *jobs.Job) {
	w.progress.WithLabelValues(labelValue(job.Kind)).Inc()
}

// RegisterPoolStats registers the pool's own counts with reg, read from
// stats at each scrape: handlers given up on as stuck (they ignored their
// context past their timeout, a cancel request or a lost lease, plus
// worker.stuckGrace), and jobs given back unstarted, their attempt not
// counted (a claim whose reply was lost, or a lease too short to start).
func RegisterPoolStats(reg prometheus.Registerer, stats func() worker.Stats) error {
	for _, c := range poolStats(stats) {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// poolStats returns the collectors RegisterPoolStats registers.
func poolStats(stats func() worker.Stats) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts(opts("stuck_handlers_total",
			"Handlers this process gave up on: still running worker.stuckGrace after their kind's timeout, a cancel request or a lost lease. Their slots were freed and their outcome recorded.")), func() float64 { return float64(stats().StuckHandlers) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts(opts("jobs_released_unstarted_total",
			"Jobs given back without running their handler, the attempt not counted: stamped by a claim whose reply was lost, or claimed with too little lease left to start.")), func() float64 { return float64(stats().ReleasedUnstarted) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts(opts("progress_reports_total",
			"Progress reports (jobs.Progress) this process's handlers made, written or not: the latest is written by the next lease renewal.")), func() float64 { return float64(stats().ProgressReports) }),
	}
}

// opts names the metric Namespace_name, with its help.
func opts(name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: Namespace, Name: name, Help: help}
}
