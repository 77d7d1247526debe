package recovery

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/docketq/docket/queue"
	"go.uber.org/zap"
)

// Defaults for StatsCounterConfig.
const (
	// defaultStatsInterval is how often the leader counts the jobs for the
	// operator's tools, at most.
	defaultStatsInterval = 15 * time.Second
	// defaultStatsShare bounds the share of the time the counting takes:
	// a count that took d is not followed by another for defaultStatsShare
	// times d, so that on a server where a count is a pass over every job
	// the counts cost it at most about a tenth of its time.
	defaultStatsShare = 10
)

// statsTick is how often the counter's schedule looks whether a count is
// due: a new leader counts within it.
const statsTick = "@every 1s"

// StatsCounterConfig configures a StatsCounter.
type StatsCounterConfig struct {
	// Interval is how often the leader counts, at most. Defaults to
	// defaultStatsInterval.
	Interval time.Duration
	// Share spaces counts by Share times the last count's duration when
	// that is longer than Interval. Defaults to 10.
	Share int
	// Logger receives failures to count. Defaults to a no-op logger.
	Logger *zap.Logger
}

// StatsCounter is the leader's maintenance task that counts the jobs per
// queue, kind and state and stores the counts, with when and by whom, for
// docketctl stats and the dashboard: they read one small document instead
// of passing over every job per request. Schedule it under LeaderOnly.
type StatsCounter struct {
	q      *queue.Client
	leader Leader
	id     string
	cfg    StatsCounterConfig

	mu       sync.Mutex
	term     string    // the term token of the last count
	nextAt   time.Time // monotonic: no count before
	lastTook time.Duration
}

// NewStatsCounter returns the task that counts the jobs of q while leader
// says this process (named id) leads.
func NewStatsCounter(q *queue.Client, leader Leader, id string, cfg StatsCounterConfig) (*StatsCounter, error) {
	if q == nil || leader == nil {
		return nil, errors.New("recovery: NewStatsCounter needs a queue and a leader")
	}
	cfg.Interval = cmp.Or(cfg.Interval, defaultStatsInterval)
	cfg.Share = cmp.Or(cfg.Share, defaultStatsShare)
	cfg.Logger = cmp.Or(cfg.Logger, zap.NewNop())
	if cfg.Interval < 0 {
		return nil, errors.New("recovery: stats interval must be positive")
	}
	if cfg.Share < 1 {
		return nil, errors.New("recovery: stats share must be at least 1")
	}
	return &StatsCounter{q: q, leader: leader, id: id, cfg: cfg}, nil
}

// Schedule implements Task: the counter looks every second whether a count
// is due.
func (s *StatsCounter) Schedule() string { return statsTick }

// Run implements Task: it counts and stores when a count is due.
func (s *StatsCounter) Run() {
	term, leading := s.leader.Leading()
	if !leading {
		return
	}
	s.mu.Lock()
	due := term.Token != s.term || !time.Now().Before(s.nextAt)
	s.mu.Unlock()
	if !due {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.budget())
	defer cancel()
	if _, err := s.CountOnce(ctx); err != nil {
		s.cfg.Logger.Warn("counting the jobs for docketctl stats and the dashboard failed; counting again later", zap.Error(err))
	}
}

// budget bounds one count: a few times the last one, and at least a
// minute, so that a count on a slow server ends rather than piling up.
func (s *StatsCounter) budget() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(time.Minute, 3*s.lastTook)
}

// CountOnce counts and stores the counts if this process leads, and
// reports whether they were stored (not when newer counts were stored
// meanwhile, nor when it stopped leading while it counted).
func (s *StatsCounter) CountOnce(ctx context.Context) (bool, error) {
	term, leading := s.leader.Leading()
	if !leading {
		return false, nil
	}
	counts, err := s.q.CountStats(ctx)
	s.mu.Lock()
	s.term = term.Token
	s.lastTook = counts.Took
	s.nextAt = time.Now().Add(max(s.cfg.Interval, time.Duration(s.cfg.Share)*counts.Took-counts.Took))
	every := max(s.cfg.Interval, time.Duration(s.cfg.Share)*counts.Took)
	s.mu.Unlock()
	if err != nil {
		return false, err
	}
	if now, still := s.leader.Leading(); !still || now.Token != term.Token {
		return false, nil // another process leads now: its counts are the ones to show
	}
	counts.By, counts.Term, counts.TermToken, counts.Every = s.id, term.Number, term.Token, every
	return s.q.StoreStats(ctx, counts)
}
