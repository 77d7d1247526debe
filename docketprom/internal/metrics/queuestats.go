package metrics

import (
	"context"
	"errors"
	"fmt"
	"sort"
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
	// MaxQueues is how many queues are exported one by one, those with
	// the most jobs; the others are summed under the queue label
	// OtherQueues. Defaults to DefaultMaxQueues.
	MaxQueues int
}

// QueueStats exports, from the elected leader only, the jobs per queue and
// state and the age of each queue's oldest waiting job. Every process runs
// one; only the one that leads queries the database and exports the
// gauges, and only while it leads the term in which it counted, so at any
// moment one process at most exports them and a sum across processes is
// the count. Register it with a registry, and Run it.
type QueueStats struct {
	cfg QueueStatsConfig

	jobs     *prometheus.Desc
	oldest   *prometheus.Desc
	unserved *prometheus.Desc
	leader   *prometheus.Desc

	mu    sync.Mutex
	term  leadership.Term
	at    time.Time     // when the counts were taken; zero when none are held
	every time.Duration // how often the leader that stored them counts
	stats []queue.QueueStats
	// served is what the live workers served at the count; nil when the
	// registry could not be read.
	served *queue.Served
	// limits are the flow-control gauges' values (limits.go).
	limits limitsRead
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
	if cfg.MaxQueues == 0 {
		cfg.MaxQueues = DefaultMaxQueues
	}
	if cfg.MaxQueues < 0 {
		return nil, fmt.Errorf("metrics: MaxQueues %d must not be negative", cfg.MaxQueues)
	}
	return &QueueStats{
		cfg: cfg,
		jobs: prometheus.NewDesc(Namespace+"_jobs",
			"Jobs in the database by queue and state, counted by the elected leader every interval; exported by the leader only.",
			[]string{"queue", "state"}, nil),
		oldest: prometheus.NewDesc(Namespace+"_oldest_available_job_age_seconds",
			"How long the queue's longest-waiting runnable job has been due (0: none waits); exported by the leader only.",
			[]string{"queue"}, nil),
		unserved: prometheus.NewDesc(Namespace+"_jobs_unserved",
			"Available jobs (due or not) whose kind no live worker serves on their queue: they wait until one that does starts (a misspelt kind, or its workers stopped); exported by the leader only.",
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
		s.limits.forget()
		return
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Interval)
	defer cancel()
	s.limits.read(cctx, s.cfg.Queue, s.cfg.Logger)
	served := s.readServed(cctx)
	// The counts this process stored as the leader of this term (the
	// maintenance's recovery.StatsCounter) serve here too: one count per
	// interval for both. Before its first count of the term, count here.
	if stored, err := s.cfg.Queue.StoredStats(cctx); err == nil && stored.TermToken != "" && stored.TermToken == term.Token {
		s.mu.Lock()
		s.term, s.at, s.stats = term, time.Now().Add(-stored.Age()), stored.Queues
		s.every, s.served = stored.Every, served
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
	s.term, s.at, s.stats, s.every, s.served = term, time.Now(), stats, 0, served
	s.mu.Unlock()
}

// readServed reads what the live workers serve; nil, logged, when the
// registry cannot be read.
func (s *QueueStats) readServed(ctx context.Context) *queue.Served {
	served, err := s.cfg.Queue.Served(ctx)
	if err != nil {
		if !errors.Is(err, context.Canceled) { // not the process stopping
			s.cfg.Logger.Warn("reading the worker registry for metrics failed; retrying at the next interval", zap.Error(err))
		}
		return nil
	}
	return &served
}

// Describe implements prometheus.Collector.
func (s *QueueStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.jobs
	ch <- s.oldest
	ch <- s.unserved
	ch <- s.leader
	describeLimits(ch)
}

// Collect implements prometheus.Collector. It exports the counts only while
// this process leads in the term in which it took them, and only while
// they are fresh.
func (s *QueueStats) Collect(ch chan<- prometheus.Metric) {
	term, leading := s.cfg.Leader.Leading()
	ch <- prometheus.MustNewConstMetric(s.leader, prometheus.GaugeValue, b2f(leading))
	s.mu.Lock()
	at, held, stats, every, served := s.at, s.term, s.stats, s.every, s.served
	s.mu.Unlock()
	if !leading || held != term || at.IsZero() || time.Since(at) > staleAfter*max(s.cfg.Interval, every) {
		return
	}
	s.limits.collect(ch)
	now := time.Now()
	for _, g := range bounded(stats, served, s.cfg.MaxQueues) {
		for st, n := range g.byState {
			ch <- prometheus.MustNewConstMetric(s.jobs, prometheus.GaugeValue, float64(n), g.label, st)
		}
		age := 0.0
		if !g.oldest.IsZero() {
			age = max(0, now.Sub(g.oldest).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(s.oldest, prometheus.GaugeValue, age, g.label)
		if served != nil {
			ch <- prometheus.MustNewConstMetric(s.unserved, prometheus.GaugeValue, float64(g.unserved), g.label)
		}
	}
}

// queueGauges are the values exported for one queue label.
type queueGauges struct {
	label   string
	total   int64
	byState map[string]int64
	oldest  time.Time
	// unserved are the available jobs no live worker serves.
	unserved int64
}

// knownStates are the states exported by name; any other stored state is
// counted under OtherState.
var knownStates = []jobs.State{jobs.StateAvailable, jobs.StateRunning, jobs.StateSucceeded, jobs.StateDead, jobs.StateCancelled}

// bounded turns the counts into at most maxQueues+1 queue labels, each a
// valid label value once: the queues with the most jobs (ties by name),
// and the rest summed under OtherQueues. Queues whose names meet in one
// label value are summed; states other than docket's are summed under
// OtherState. The jobs no live worker serves are counted when served is
// known.
func bounded(stats []queue.QueueStats, served *queue.Served, maxQueues int) []*queueGauges {
	byLabel := map[string]*queueGauges{}
	var all []*queueGauges
	for _, qs := range stats {
		g := byLabel[labelValue(qs.Queue)]
		if g == nil {
			g = &queueGauges{label: labelValue(qs.Queue), byState: map[string]int64{}}
			for _, st := range knownStates {
				g.byState[string(st)] = 0 // every state, so that a drained one reads 0 rather than vanishing
			}
			byLabel[g.label] = g
			all = append(all, g)
		}
		g.add(qs, served)
	}
	if len(all) <= maxQueues {
		return all
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].total != all[j].total {
			return all[i].total > all[j].total
		}
		return all[i].label < all[j].label
	})
	out := all[:maxQueues:maxQueues]
	var other *queueGauges
	for _, g := range out {
		if g.label == OtherQueues {
			other = g
		}
	}
	if other == nil {
		other = &queueGauges{label: OtherQueues, byState: map[string]int64{}}
		for _, st := range knownStates {
			other.byState[string(st)] = 0
		}
		out = append(out, other)
	}
	for _, g := range all[maxQueues:] {
		other.merge(g)
	}
	return out
}

// add counts the jobs of qs.
func (g *queueGauges) add(qs queue.QueueStats, served *queue.Served) {
	if served != nil {
		for _, u := range served.Unserved([]queue.QueueStats{qs}) {
			g.unserved += u.Waiting
		}
	}
	for _, states := range qs.Counts {
		for st, n := range states {
			if !st.Valid() {
				st = OtherState
			}
			g.byState[string(st)] += n
			g.total += n
		}
	}
	g.oldestAt(qs.OldestAvailable)
}

// merge adds the counts of o.
func (g *queueGauges) merge(o *queueGauges) {
	for st, n := range o.byState {
		g.byState[st] += n
	}
	g.total += o.total
	g.unserved += o.unserved
	g.oldestAt(o.oldest)
}

func (g *queueGauges) oldestAt(t time.Time) {
	if !t.IsZero() && (g.oldest.IsZero() || t.Before(g.oldest)) {
		g.oldest = t
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
