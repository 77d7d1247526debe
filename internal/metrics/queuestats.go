package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// DefaultQueueStatsInterval is how often the leader counts the jobs.
const DefaultQueueStatsInterval = 15 * time.Second

// staleAfter is how many intervals a leader's counts are exported for
// when it could not refresh them: past that they are dropped rather than
// shown as if current.
const staleAfter = 3

// Leader says whether this process leads now (the maintenance election's
// *leadership.Elector).
type Leader interface {
	Leading() (leadership.Term, bool)
}

// QueueStatsConfig configures QueueStats.
type QueueStatsConfig struct {
	// Queue is the client whose jobs are counted. Required.
	Queue *queue.Client
	// Leader is the election that decides which process counts. Required.
	Leader Leader
	// Changes, when set, receives a value when the leadership changes
	// hands (the elector's Changes), so that a new leader counts at once
	// rather than at its next interval.
	Changes <-chan struct{}
	// Interval is how often the leader counts. Defaults to
	// DefaultQueueStatsInterval.
	Interval time.Duration
	// Logger receives failures to count. Defaults to a no-op logger.
	Logger *zap.Logger
}

// QueueStats exports, from the elected leader only, the jobs per queue and
// state and the age of each queue's oldest waiting job. Every process runs
// one; only the one that leads queries the database and exports the
// gauges, and only while it leads the term in which it counted, so at any
// moment one process at most exports them and a sum across processes is
// the count. Register it with a registry, and Run it.
type QueueStats struct {
	cfg QueueStatsConfig

	jobs   *prometheus.Desc
	oldest *prometheus.Desc
	leader *prometheus.Desc

	mu    sync.Mutex
	term  leadership.Term
	at    time.Time     // when the counts were taken; zero when none are held
	every time.Duration // how often the leader that stored them counts
	stats []queue.QueueStats
}

// NewQueueStats returns the leader's queue gauges.
func NewQueueStats(cfg QueueStatsConfig) (*QueueStats, error) {
	if cfg.Queue == nil || cfg.Leader == nil {
		return nil, errors.New("metrics: QueueStatsConfig needs Queue and Leader")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultQueueStatsInterval
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("metrics: queue stats interval %s must be positive", cfg.Interval)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &QueueStats{
		cfg: cfg,
		jobs: prometheus.NewDesc(Namespace+"_jobs",
			"Jobs in the database by queue and state, counted by the elected leader every interval; exported by the leader only.",
			[]string{"queue", "state"}, nil),
		oldest: prometheus.NewDesc(Namespace+"_oldest_available_job_age_seconds",
			"How long the queue's longest-waiting runnable job has been due (0: none waits); exported by the leader only.",
			[]string{"queue"}, nil),
		leader: prometheus.NewDesc(Namespace+"_leader",
			"1 while this process is the elected leader that runs maintenance and counts the jobs, else 0.",
			nil, nil),
	}, nil
}

// Run counts the jobs every interval while this process leads, until ctx
// ends.
func (s *QueueStats) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.cfg.Changes:
		}
	}
}

// refresh counts the jobs if this process leads, and forgets its counts
// if it does not.
func (s *QueueStats) refresh(ctx context.Context) {
	term, leading := s.cfg.Leader.Leading()
	if !leading {
		s.mu.Lock()
		s.at, s.stats = time.Time{}, nil
		s.mu.Unlock()
		return
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Interval)
	defer cancel()
	// The counts this process stored as the leader of this term (the
	// maintenance's recovery.StatsCounter) serve here too: one count per
	// interval for both. Before its first count of the term, count here.
	if stored, err := s.cfg.Queue.StoredStats(cctx); err == nil && stored.TermToken != "" && stored.TermToken == term.Token {
		s.mu.Lock()
		s.term, s.at, s.stats = term, time.Now().Add(-stored.Age()), stored.Queues
		s.every = stored.Every
		s.mu.Unlock()
		return
	}
	stats, err := s.cfg.Queue.Stats(cctx)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("counting the jobs for metrics failed; retrying at the next interval", zap.Error(err))
		}
		return
	}
	s.mu.Lock()
	s.term, s.at, s.stats, s.every = term, time.Now(), stats, 0
	s.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (s *QueueStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.jobs
	ch <- s.oldest
	ch <- s.leader
}

// Collect implements prometheus.Collector. It exports the counts only while
// this process leads in the term in which it took them, and only while
// they are fresh.
func (s *QueueStats) Collect(ch chan<- prometheus.Metric) {
	term, leading := s.cfg.Leader.Leading()
	ch <- prometheus.MustNewConstMetric(s.leader, prometheus.GaugeValue, b2f(leading))
	s.mu.Lock()
	at, held, stats, every := s.at, s.term, s.stats, s.every
	s.mu.Unlock()
	if !leading || held != term || at.IsZero() || time.Since(at) > staleAfter*max(s.cfg.Interval, every) {
		return
	}
	now := time.Now()
	for _, qs := range stats {
		byState := map[string]int64{}
		for _, st := range []jobs.State{jobs.StateAvailable, jobs.StateRunning, jobs.StateSucceeded, jobs.StateDead, jobs.StateCancelled} {
			byState[string(st)] = 0 // every state, so that a drained one reads 0 rather than vanishing
		}
		for _, states := range qs.Counts {
			for st, n := range states {
				byState[st] += n
			}
		}
		for st, n := range byState {
			ch <- prometheus.MustNewConstMetric(s.jobs, prometheus.GaugeValue, float64(n), qs.Queue, st)
		}
		age := 0.0
		if !qs.OldestAvailable.IsZero() {
			age = max(0, now.Sub(qs.OldestAvailable).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(s.oldest, prometheus.GaugeValue, age, qs.Queue)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
