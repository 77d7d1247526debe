package docket

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/docketq/docket/worker"
	"go.uber.org/zap"
)

// Defaults for Config: a zero field takes its default.
const (
	// DefaultCollection is the jobs collection.
	DefaultCollection = queue.DefaultCollection
	// DefaultWriteConcern is the write concern of every write that changes
	// a job's state.
	DefaultWriteConcern = queue.DefaultWriteConcern
	// DefaultRetryBase is the backoff after a job's first failed attempt.
	DefaultRetryBase = queue.DefaultRetryBase
	// DefaultRetryMax caps the backoff between attempts.
	DefaultRetryMax = queue.DefaultRetryMax
	// DefaultConcurrency is how many jobs a client runs at once.
	DefaultConcurrency = worker.DefaultConcurrency
	// DefaultLease is how long a claim or a heartbeat holds a job.
	DefaultLease = worker.DefaultLease
	// DefaultHeartbeatInterval is how often a running job's lease is
	// renewed.
	DefaultHeartbeatInterval = worker.DefaultHeartbeatInterval
	// DefaultShutdownTimeout is how long Stop waits for running jobs
	// before it cancels them.
	DefaultShutdownTimeout = worker.DefaultShutdownTimeout
	// DefaultStuckGrace is how long a handler may go on after its timeout,
	// a cancel request or a lost lease before the pool gives up on it.
	DefaultStuckGrace = worker.DefaultStuckGrace
	// DefaultPollMin is the first wait after a claim that found nothing.
	DefaultPollMin = worker.DefaultPollMin
	// DefaultPollMax is the longest wait between claims on an idle queue.
	DefaultPollMax = worker.DefaultPollMax
	// DefaultClaimBatch is the most jobs one claim takes.
	DefaultClaimBatch = worker.DefaultClaimBatch
	// DefaultPrefetch is the most jobs a pool holds beyond Concurrency.
	DefaultPrefetch = worker.DefaultPrefetch
	// DefaultReapInterval is how often the reaper runs.
	DefaultReapInterval = recovery.DefaultReapInterval
	// DefaultReapGrace is how long past its expiry a lease is left alone.
	DefaultReapGrace = recovery.DefaultReapGrace
	// DefaultReapBatch is the most jobs one reaper pass re-queues.
	DefaultReapBatch = recovery.DefaultReapBatch
	// DefaultRetentionBudget bounds the time one reaper pass spends
	// deleting finished jobs.
	DefaultRetentionBudget = recovery.DefaultRetentionBudget
	// DefaultSucceededRetention is how long succeeded and cancelled jobs
	// are kept.
	DefaultSucceededRetention = recovery.DefaultSucceededRetention
	// DefaultLeaderTTL is how long a leader that stopped renewing keeps
	// the lease.
	DefaultLeaderTTL = leadership.DefaultTTL
	// MinLeaderTTL is the shortest Config.LeaderTTL NewClient takes.
	MinLeaderTTL = leadership.MinTTL
	// KeepForever, as a retention, keeps jobs forever; so does any
	// negative retention.
	KeepForever = recovery.KeepForever
)

// Config configures a Client. The zero value is usable: a zero field means
// its default, named in its comment.
type Config struct {
	// ID names this process in job documents, logs, the workers registry
	// and the leader election; it must be unique across machines.
	// Defaults to host-pid-random.
	ID string

	// Collection is the jobs collection. Defaults to DefaultCollection.
	Collection string
	// WriteConcern is "majority" or a number of nodes ("1"), for every
	// write that changes a job's state. Defaults to DefaultWriteConcern.
	WriteConcern string
	// RetryBase is the backoff after a first failed attempt; it doubles
	// with each further attempt, with jitter. Defaults to DefaultRetryBase.
	RetryBase time.Duration
	// RetryMax caps the backoff. Defaults to DefaultRetryMax.
	RetryMax time.Duration

	// Queues are the queues Start's pool claims from. Defaults to
	// ["default"].
	Queues []string
	// Concurrency is how many jobs run at once. Defaults to
	// DefaultConcurrency.
	Concurrency int
	// Lease is how long a claim or a heartbeat holds a job: a process
	// that dies has its jobs run again about this long after. At least
	// 1 s. Defaults to DefaultLease.
	Lease time.Duration
	// HeartbeatInterval is how often a running job's lease is renewed; at
	// most a third of Lease. Defaults to DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// ShutdownTimeout bounds Stop's wait for running jobs. Defaults to
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// StuckGrace is how long a handler may go on after its kind's
	// timeout, a cancel request or a lost lease before the pool gives up
	// on it and frees its slot. Defaults to DefaultStuckGrace.
	StuckGrace time.Duration
	// PollMin and PollMax bound the wait between claims on an idle queue:
	// it starts at PollMin and doubles up to PollMax. Default to
	// DefaultPollMin and DefaultPollMax.
	PollMin, PollMax time.Duration
	// ClaimBatch is how many jobs one claim takes at most while a backlog
	// lasts (1: one findAndModify per job). Defaults to DefaultClaimBatch.
	ClaimBatch int
	// Prefetch is how many jobs the pool may hold beyond Concurrency,
	// claimed ahead while claims are slow compared with jobs (-1: none).
	// Defaults to DefaultPrefetch.
	Prefetch int
	// WriteTimeout, when positive, bounds each heartbeat and completion
	// round trip. Defaults to none: they are bounded by their leases.
	WriteTimeout time.Duration

	// ReapInterval is how often the reaper re-queues the jobs whose lease
	// expired and deletes finished jobs past their retention. Defaults to
	// DefaultReapInterval.
	ReapInterval time.Duration
	// ReapGrace is how long past its expiry a lease is left alone, for
	// clock skew between machines. Defaults to DefaultReapGrace.
	ReapGrace time.Duration
	// ReapBatch caps the jobs one reaper pass re-queues. Defaults to
	// DefaultReapBatch.
	ReapBatch int
	// RetentionBudget bounds the time one pass spends deleting finished
	// jobs past their retention; the next pass goes on. Defaults to
	// DefaultRetentionBudget.
	RetentionBudget time.Duration
	// SucceededRetention is how long succeeded and cancelled jobs are
	// kept; negative (KeepForever) keeps them forever. Defaults to
	// DefaultSucceededRetention.
	SucceededRetention time.Duration
	// DeadRetention is how long dead jobs are kept; negative
	// (KeepForever) keeps them forever. Defaults to KeepForever: they
	// wait for a human.
	DeadRetention time.Duration

	// LeaderTTL is how long the others wait, each from its own look at
	// the lease, before replacing an elected process that died:
	// maintenance pauses between this and about twice it. Defaults to
	// DefaultLeaderTTL; at least MinLeaderTTL.
	LeaderTTL time.Duration
	// PeriodicJobs are inserted by the elected process on their
	// schedules, each tick once however many processes run. Start refuses
	// a job whose kind has no handler in this client.
	PeriodicJobs []PeriodicJob
	// Capacities bound queues: queue name → the most admitted, unfinished
	// jobs of that queue, from 1, or CapacityClosed to refuse every insert
	// (0 is refused: it would read as "the default"). Start sets each
	// before the pool runs, every start, so processes started with the
	// same configuration agree and the last start wins over
	// QueueSetCapacity and `docketctl capacity`; a queue not named is left
	// as it is.
	Capacities map[string]int
	// Limits are cluster-wide concurrency limits: KindLimit(kind) or
	// QueueLimit(queue) → the most jobs of it running at once across every
	// process, from 1, or LimitNone to run none (0 is refused, as for
	// Capacities). Start sets each, every start, as it sets Capacities.
	Limits map[string]int
	// PartitionLimits are cluster-wide concurrency limits per value of an
	// args field: KindLimit(kind) or QueueLimit(queue) → at most N jobs
	// running at once per value of the field (see PartitionLimit), beside
	// the limit's total in Limits, if any. Start sets each, every start,
	// as it sets Limits.
	PartitionLimits map[string]PartitionLimit
	// Rates are cluster-wide rate limits: KindLimit(kind) or
	// QueueLimit(queue) → at most N starts per period, with a burst (see
	// ParseRate). Start sets each, every start, as it sets Limits; a limit
	// not named is left as it is.
	Rates map[string]Rate
	// ProcessLimits are this process's own concurrency limits:
	// KindLimit(kind) or QueueLimit(queue) → the most jobs of it this
	// process holds at once (claimed, waiting for a slot or running, until
	// its outcome is written), from 1; 0 and negatives are refused. A kind
	// or queue at its limit is left out of this process's claims, at no
	// cost in commands, while other processes claim it as their own limits
	// allow: what bounds a machine's memory, CPU or a local resource, where
	// Limits bound a shared one. Kept in this process, never shared; the
	// workers registry shows them (docketctl workers). Defaults to none.
	ProcessLimits map[string]int
	// Setup, when set, runs in Start after docket's indexes are ensured:
	// the application's own idempotent set-up, such as its collections'
	// indexes. An error from it fails Start, which may be retried.
	Setup func(ctx context.Context) error
	// Logger receives the client's logs. Defaults to a no-op logger.
	Logger *zap.Logger
}

// engine is a Config mapped onto the engine's components, defaults set.
type engine struct {
	queue  queue.Config
	worker worker.Config
	reaper recovery.ReaperConfig
}

// WithDefaults returns c with every zero setting set to its default, as
// NewClient reads it; an empty ID is made as NewClient makes it. Logger
// and Setup are left as they are.
func (c Config) WithDefaults() Config {
	if c.ID == "" {
		c.ID = worker.NewID()
	}
	if len(c.Queues) == 0 {
		c.Queues = []string{jobs.DefaultQueue}
	}
	c.Collection = cmp.Or(c.Collection, DefaultCollection)
	c.WriteConcern = cmp.Or(c.WriteConcern, DefaultWriteConcern)
	c.RetryBase = cmp.Or(c.RetryBase, DefaultRetryBase)
	c.RetryMax = cmp.Or(c.RetryMax, DefaultRetryMax)
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, DefaultHeartbeatInterval)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, DefaultShutdownTimeout)
	c.StuckGrace = cmp.Or(c.StuckGrace, DefaultStuckGrace)
	c.PollMin = cmp.Or(c.PollMin, DefaultPollMin)
	c.PollMax = cmp.Or(c.PollMax, DefaultPollMax)
	c.ClaimBatch = cmp.Or(c.ClaimBatch, DefaultClaimBatch)
	c.Prefetch = cmp.Or(c.Prefetch, DefaultPrefetch)
	c.ReapInterval = cmp.Or(c.ReapInterval, DefaultReapInterval)
	c.ReapGrace = cmp.Or(c.ReapGrace, DefaultReapGrace)
	c.ReapBatch = cmp.Or(c.ReapBatch, DefaultReapBatch)
	c.RetentionBudget = cmp.Or(c.RetentionBudget, DefaultRetentionBudget)
	c.SucceededRetention = cmp.Or(c.SucceededRetention, DefaultSucceededRetention)
	c.DeadRetention = cmp.Or(c.DeadRetention, KeepForever)
	c.LeaderTTL = cmp.Or(c.LeaderTTL, DefaultLeaderTTL)
	return c
}

// Validate reports the first setting of c that NewClient refuses, naming
// its field (Config.Lease) and its value. A zero setting is valid: it
// takes its default.
func (c Config) Validate() error {
	if _, err := c.engine(zap.NewNop()); err != nil {
		return err
	}
	return c.validateParts()
}

// validateParts checks the settings of c that no engine component holds.
func (c Config) validateParts() error {
	if err := validatePeriodicJobs(c.PeriodicJobs); err != nil {
		return fmt.Errorf("Config.PeriodicJobs: %w", err)
	}
	if err := validateBounds(c.Capacities, c.Limits); err != nil {
		return err
	}
	if err := store.ValidateRates("rates", c.Rates); err != nil {
		return err
	}
	return validatePartitionLimits(c.PartitionLimits)
}

// engine maps c, its defaults set, onto the engine's configurations and
// checks them, naming the first field of c that is wrong. log, naming the
// process, is the queue client's and the reaper's; the pool names it
// itself, from c.Logger.
func (c Config) engine(log *zap.Logger) (engine, error) {
	c = c.WithDefaults()
	e := engine{
		queue: queue.Config{Collection: c.Collection, WriteConcern: c.WriteConcern, RetryBase: c.RetryBase, RetryMax: c.RetryMax, Logger: log},
		worker: worker.Config{
			ID: c.ID, Queues: c.Queues, Concurrency: c.Concurrency, Lease: c.Lease, HeartbeatInterval: c.HeartbeatInterval,
			ShutdownTimeout: c.ShutdownTimeout, StuckGrace: c.StuckGrace, PollMin: c.PollMin, PollMax: c.PollMax,
			ClaimBatch: c.ClaimBatch, Prefetch: c.Prefetch, WriteTimeout: c.WriteTimeout, ProcessLimits: c.ProcessLimits,
			Logger: cmp.Or(c.Logger, zap.NewNop()),
		},
		reaper: recovery.ReaperConfig{
			Interval: c.ReapInterval, Grace: c.ReapGrace, Batch: c.ReapBatch, RetentionBudget: c.RetentionBudget,
			SucceededRetention: c.SucceededRetention, DeadRetention: c.DeadRetention, Logger: log,
		},
	}
	for _, err := range []error{e.queue.Validate(), e.worker.Validate(), e.reaper.Validate()} {
		if err != nil {
			return e, fieldNames.rename(err)
		}
	}
	if c.LeaderTTL < MinLeaderTTL {
		return e, fmt.Errorf("Config.LeaderTTL: %s must be at least %s", c.LeaderTTL, MinLeaderTTL)
	}
	return e, nil
}

// configFields names, in the engine's errors, Config's fields instead of
// the engine settings they map to.
type configFields []string

var fieldNames = configFields{
	"queue.collection", "Config.Collection", "queue.writeConcern", "Config.WriteConcern",
	"queue.retryBase", "Config.RetryBase", "queue.retryMax", "Config.RetryMax",
	"worker.queues", "Config.Queues", "worker.concurrency", "Config.Concurrency",
	"worker.lease", "Config.Lease", "worker.heartbeatInterval", "Config.HeartbeatInterval",
	"worker.shutdownTimeout", "Config.ShutdownTimeout", "worker.pollMin", "Config.PollMin",
	"worker.pollMax", "Config.PollMax", "worker.claimBatch", "Config.ClaimBatch",
	"worker.prefetch", "Config.Prefetch", "worker.stuckGrace", "Config.StuckGrace",
	"worker.processLimits", "Config.ProcessLimits",
	"reaper.interval", "Config.ReapInterval", "reaper.grace", "Config.ReapGrace",
	"reaper.batch", "Config.ReapBatch", "reaper.retentionBudget", "Config.RetentionBudget",
}

func (f configFields) rename(err error) error {
	return errors.New(strings.NewReplacer(f...).Replace(err.Error()))
}

// CapacityClosed, as a queue's capacity (Config.Capacities,
// QueueSetCapacity), closes the queue: every insert into it is refused
// with ErrQueueFull. It is not 0, which throughout Config means "the
// default"; a queue with no capacity is unbounded.
const CapacityClosed = -1

// LimitNone, as a concurrency limit (Config.Limits, LimitSet), lets none
// of the jobs of its kind or queue run, across every process. It is not 0,
// which throughout Config means "the default"; a kind or queue with no
// limit runs as many as the pools have slots for.
const LimitNone = -1

// capacityValue is the stored capacity of n, a capacity as Config and
// QueueSetCapacity take it, or an error naming what is wrong.
func capacityValue(n int) (int, error) {
	return storedBound(n, CapacityClosed, queue.MaxCapacity, "a capacity", "docket.CapacityClosed",
		"to refuse every insert, or leave the queue out")
}

// limitValue is the stored limit of n, a limit as Config and LimitSet take
// it, or an error naming what is wrong.
func limitValue(n int) (int, error) {
	return storedBound(n, LimitNone, queue.MaxLimit, "a limit", "docket.LimitNone",
		"to let none run, or leave the limit out")
}

// storedBound is the stored value of n, a capacity or a limit (what) from
// 1 to most, or none (the constant noneName, stored as 0); 0 is refused:
// throughout Config it means "the default", and hint says what to write
// instead.
func storedBound(n, none, most int, what, noneName, hint string) (int, error) {
	switch {
	case n == none:
		return 0, nil
	case n == 0:
		return 0, fmt.Errorf("0 is not %s: write %s %s to leave it as it is", what, noneName, hint)
	case n < 1 || n > most:
		return 0, fmt.Errorf("%d must be from 1 to %d, or %s", n, most, noneName)
	}
	return n, nil
}

// KindLimit names the concurrency limit of a kind, for Config.Limits and
// LimitSet: "kind:KIND".
func KindLimit(kind string) string { return queue.KindLimit(kind) }

// QueueLimit names the concurrency limit of a queue, for Config.Limits and
// LimitSet: "queue:QUEUE".
func QueueLimit(q string) string { return queue.QueueLimit(q) }

// Rate is a rate limit: at most N job starts per Per across every
// process, at most Burst of them at once after a quiet spell. Write one
// as ParseRate reads it ("14/s burst 5") or as a struct literal.
type Rate = queue.Rate

// PartitionLimit is a concurrency limit per value of an args field:
// {N: 2, By: "customerId"} runs at most 2 jobs of each customer at once
// across every process (a dotted By reads a nested field; jobs without
// the field, or with null, are one partition). It reads as "2 per
// customerId" (ParsePartitionLimit).
type PartitionLimit = queue.PartitionLimit

// ParsePartitionLimit reads "N per FIELD", such as "2 per customerId".
func ParsePartitionLimit(s string) (PartitionLimit, error) { return queue.ParsePartitionLimit(s) }

// ParseRate reads a rate limit written as "N/PERIOD", the period s, m, h
// or a Go duration, with an optional " burst B": "14/s", "600/m burst
// 20", "5/250ms".
func ParseRate(s string) (Rate, error) { return queue.ParseRate(s) }

// validateBounds checks the capacities and limits of a Config, naming the
// first that is wrong.
func validateBounds(caps, limits map[string]int) error {
	for _, name := range sortedKeys(caps) {
		if err := queue.ValidQueueName(name); err != nil {
			return fmt.Errorf("Config.Capacities: %w", err)
		}
		if _, err := capacityValue(caps[name]); err != nil {
			return fmt.Errorf("Config.Capacities[%q]: %w", name, err)
		}
	}
	for _, name := range sortedKeys(limits) {
		if _, _, err := queue.ParseLimitName(name); err != nil {
			return fmt.Errorf("Config.Limits: %w", err)
		}
		if _, err := limitValue(limits[name]); err != nil {
			return fmt.Errorf("Config.Limits[%q]: %w", name, err)
		}
	}
	return nil
}

// validatePartitionLimits checks Config.PartitionLimits, naming the first
// that is wrong.
func validatePartitionLimits(pls map[string]PartitionLimit) error {
	for _, name := range slices.Sorted(maps.Keys(pls)) {
		if _, _, err := queue.ParseLimitName(name); err != nil {
			return fmt.Errorf("Config.PartitionLimits: %w", err)
		}
		if err := pls[name].Validate(); err != nil {
			return fmt.Errorf("Config.PartitionLimits[%q]: %w", name, err)
		}
	}
	return nil
}

func sortedKeys(m map[string]int) []string { return slices.Sorted(maps.Keys(m)) }
