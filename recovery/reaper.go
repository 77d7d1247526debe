package recovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.uber.org/zap"
)

// Defaults for ReaperConfig.
const (
	// DefaultReapInterval is how often the reaper runs.
	DefaultReapInterval = 15 * time.Second
	// DefaultReapGrace is how long past its expiry a lease is left alone,
	// to allow for clock skew between machines.
	DefaultReapGrace = 5 * time.Second
	// DefaultReapBatch is how many expired jobs one pass re-queues at most.
	DefaultReapBatch = 500
	// DefaultSucceededRetention is how long succeeded and cancelled jobs are
	// kept.
	DefaultSucceededRetention = 24 * time.Hour
	// KeepForever, as a retention, keeps jobs forever; so does any
	// negative retention.
	KeepForever time.Duration = -1 * time.Second
	// defaultDeadRetention keeps dead jobs forever: they wait for a human.
	defaultDeadRetention = KeepForever
	// DefaultRetentionBudget is how long one pass may spend deleting
	// finished jobs past their retention.
	DefaultRetentionBudget = 20 * time.Second
)

// ReaperConfig configures a Reaper. As in every docket setting, a zero
// field means its default; a retention keeps jobs forever when negative.
type ReaperConfig struct {
	// Interval is how often the reaper runs. Defaults to
	// DefaultReapInterval.
	Interval time.Duration
	// Grace is how long past its expiry a lease is left alone. Defaults to
	// DefaultReapGrace.
	Grace time.Duration
	// Batch caps the jobs one pass re-queues. Defaults to 500.
	Batch int
	// SucceededRetention is how long succeeded and cancelled jobs are kept
	// before they are deleted; negative (KeepForever) keeps them forever.
	// Defaults to DefaultSucceededRetention.
	SucceededRetention time.Duration
	// DeadRetention is how long dead jobs are kept; negative
	// (KeepForever) keeps them forever. Defaults to KeepForever:
	// forever, for a human to look at.
	DeadRetention time.Duration
	// RetentionBudget bounds the time one pass spends deleting finished
	// jobs: it deletes batch after batch until none is due or the budget
	// is spent (each state gets at least one batch), and the next pass goes
	// on. Defaults to 20 s.
	RetentionBudget time.Duration
	// Logger receives the reaper's logs. Defaults to a no-op logger.
	Logger *zap.Logger
}

// WithDefaults returns c with every unset field set to its default.
func (c ReaperConfig) WithDefaults() ReaperConfig {
	c.Interval = cmp.Or(c.Interval, DefaultReapInterval)
	c.Grace = cmp.Or(c.Grace, DefaultReapGrace)
	c.Batch = cmp.Or(c.Batch, DefaultReapBatch)
	c.SucceededRetention = cmp.Or(c.SucceededRetention, DefaultSucceededRetention)
	c.DeadRetention = cmp.Or(c.DeadRetention, defaultDeadRetention)
	c.RetentionBudget = cmp.Or(c.RetentionBudget, DefaultRetentionBudget)
	c.Logger = cmp.Or(c.Logger, zap.NewNop())
	return c
}

// Validate reports the first invalid field, naming it and its value.
func (c ReaperConfig) Validate() error {
	switch {
	case c.Interval < 0:
		return fmt.Errorf("reaper.interval: %s must be positive", c.Interval)
	case c.Grace < 0:
		return fmt.Errorf("reaper.grace: %s must not be negative", c.Grace)
	case c.Batch < 1:
		return fmt.Errorf("reaper.batch: %d must be at least 1", c.Batch)
	case c.RetentionBudget < 0:
		return fmt.Errorf("reaper.retentionBudget: %s must not be negative", c.RetentionBudget)
	}
	return nil
}

// Reaper re-queues jobs whose lease expired and deletes finished jobs past
// their retention. A job whose owner still beats in the workers registry
// is spared for one more lease (see queue's Reap).
type Reaper struct {
	cfg ReaperConfig
	q   *queue.Client
	log *zap.Logger
	// step, when set (by tests), is called before each step of a pass; an
	// error it returns fails that step, as a refused write would.
	step func(name string) error
}

// NewReaper returns a Reaper over q.
func NewReaper(q *queue.Client, cfg ReaperConfig) (*Reaper, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Reaper{cfg: cfg, q: q, log: cfg.Logger.Named("reaper")}, nil
}

// Schedule returns the reaper's schedule as a Task gives it: every
// ReaperConfig.Interval.
func (r *Reaper) Schedule() string { return "@every " + r.cfg.Interval.String() }

// ReapResult counts what a reaper pass did with the jobs whose lease
// expired: Requeued (back to available), Dead (attempts used up),
// Cancelled (a cancel was requested), Buried (did not decode: dead with
// what is wrong), Skipped (a write failed; the next pass tries again) and
// Spared (an owner still beating in the workers registry). Settled is
// Requeued + Dead + Cancelled + Buried.
type ReapResult = store.ReapResult

// RunOnce makes one pass: it re-queues expired leases until none is left
// (or ctx ends), clears null unique keys, frees stranded slots, deletes a
// batch of idle rate partitions, settles the workflows that stopped
// processes left (settleDependents), then applies retention within the
// retention budget. A step that fails does not stop the pass: the steps
// do not depend on one another, and a step failing at every pass (its
// writes refused in the elections of a replica set, while passes on a
// slow server are long enough to meet one each time) would starve those
// after it, leaving a workflow's tasks blocked for good. The failures are
// returned together.
func (r *Reaper) RunOnce(ctx context.Context) (ReapResult, error) {
	var total ReapResult
	errs := []error{r.runStep(ctx, "reap", func(ctx context.Context) (err error) {
		total, err = r.reapExpired(ctx)
		return err
	})}
	for _, s := range []struct {
		name string
		run  func(context.Context) error
	}{
		// A uniqueKey that another app wrote as null would block the next
		// such job in the unique index (null means no key); a job finished,
		// ended or re-queued by another app's write may still hold its slot
		// of a bounded queue's capacity or a run slot of a concurrency limit.
		{"repair", r.q.RepairForeignWrites},
		// The idle partitions of partitioned rates hold nothing a missing
		// document does not: delete a batch of them.
		{"rate partitions", func(ctx context.Context) error {
			_, err := store.Of(r.q).CleanRatePartitions(ctx, r.cfg.Batch)
			return err
		}},
		// Before retention, which keeps a job until its dependents are told.
		{"dependents", r.settleDependents},
		{"workflows", r.sweepWorkflows},
		{"retention", r.retain},
	} {
		if ctx.Err() != nil {
			break
		}
		errs = append(errs, r.runStep(ctx, s.name, s.run))
	}
	return total, errors.Join(errs...)
}

// runStep runs the step of a pass named name, or fails it with what the
// test hook returns.
func (r *Reaper) runStep(ctx context.Context, name string, step func(context.Context) error) error {
	if r.step != nil {
		if err := r.step(name); err != nil {
			return fmt.Errorf("reaper: %s: %w", name, err)
		}
	}
	return step(ctx)
}

// reapExpired re-queues expired leases until none is left.
func (r *Reaper) reapExpired(ctx context.Context) (ReapResult, error) {
	var total ReapResult
	defer func() {
		if total.Settled()+total.Skipped+total.Spared > 0 {
			r.log.Info("reaped expired leases", zap.Int("requeued", total.Requeued), zap.Int("dead", total.Dead),
				zap.Int("cancelled", total.Cancelled), zap.Int("buried", total.Buried), zap.Int("skipped", total.Skipped),
				zap.Int("spared", total.Spared))
		}
	}()
	for {
		res, err := store.Of(r.q).Reap(ctx, r.cfg.Grace, r.cfg.Batch)
		total = total.Add(res)
		if err != nil {
			return total, err
		}
		// A full batch may mean more: go on, unless this one moved nothing
		// (every job in it skipped), which the next would repeat.
		if res.Settled()+res.Skipped < r.cfg.Batch || res.Settled() == 0 {
			return total, nil
		}
	}
}

// retain deletes the finished jobs past their retention, within the
// retention budget.
func (r *Reaper) retain(ctx context.Context) error {
	budget := time.Now().Add(r.cfg.RetentionBudget)
	for _, rule := range []struct {
		age    time.Duration
		states []jobs.State
	}{
		{r.cfg.SucceededRetention, []jobs.State{jobs.StateSucceeded, jobs.StateCancelled}},
		{r.cfg.DeadRetention, []jobs.State{jobs.StateDead}},
	} {
		if rule.age < 0 { // KeepForever
			continue
		}
		for _, s := range rule.states {
			deleted := 0
			for {
				n, err := store.Of(r.q).Clean(ctx, s, rule.age, r.cfg.Batch)
				deleted += n
				if err != nil {
					return err
				}
				if n < r.cfg.Batch || !time.Now().Before(budget) {
					break
				}
			}
			if deleted > 0 {
				r.log.Info("deleted finished jobs past retention", zap.String("state", string(s)), zap.Int("deleted", deleted))
			}
		}
	}
	return nil
}

// Run is a cron job: one pass, with its error logged.
func (r *Reaper) Run() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := r.RunOnce(ctx); err != nil {
		r.log.Warn("reaper pass failed; it runs again on schedule", zap.Error(err))
	}
}
