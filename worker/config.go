package worker

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/docketq/docket/jobs"
	"go.uber.org/zap"
)

// Defaults for Config.
const (
	// DefaultConcurrency is how many jobs a worker runs at once.
	DefaultConcurrency = 10
	// DefaultLease is how long a claim holds a job without a heartbeat.
	DefaultLease = 30 * time.Second
	// DefaultHeartbeatInterval is how often a running job's lease is renewed.
	DefaultHeartbeatInterval = 10 * time.Second
	// DefaultShutdownTimeout is how long a graceful stop waits for running
	// jobs before it cancels them (see Worker.Stop).
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultPollMin is the first wait after a claim finds nothing.
	DefaultPollMin = 50 * time.Millisecond
	// DefaultPollMax caps the wait between claims on an idle queue.
	DefaultPollMax = time.Second
	// DefaultClaimBatch is how many jobs one claim takes at most (see
	// Config.ClaimBatch and docs/BENCHMARKS.md).
	DefaultClaimBatch = 100
	// DefaultPrefetch is how many jobs a worker may hold beyond
	// Concurrency, waiting for a slot (see Config.Prefetch).
	DefaultPrefetch = 100
	// DefaultStuckGrace is how long a handler may go on after its kind's
	// timeout, a cancel request or a lost lease before the worker gives up
	// on it (see Config.StuckGrace).
	DefaultStuckGrace = 10 * time.Second
	// maxClaimTimeout bounds one claim round trip; a short lease bounds it
	// further (see Config.ClaimTimeout).
	maxClaimTimeout = 10 * time.Second
)

// Config configures a Worker.
type Config struct {
	// ID names the worker in job documents and logs; it must be unique
	// across machines. Defaults to host-pid-random.
	ID string
	// Queues are the queues the worker claims from. Defaults to
	// [jobs.DefaultQueue].
	Queues []string
	// Concurrency is how many jobs run at once. Defaults to
	// DefaultConcurrency.
	Concurrency int
	// Lease is how long a claim or a heartbeat holds a job. Defaults to
	// DefaultLease.
	Lease time.Duration
	// HeartbeatInterval is how often a running job's lease is renewed; it
	// must be at most a third of Lease, so that a lease outlives two missed
	// heartbeats and a claim leaves room to start. Defaults to
	// DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// ShutdownTimeout bounds a graceful stop. Defaults to
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// PollMin is the first wait after an empty claim; the wait doubles, with
	// jitter, up to PollMax. Defaults to 50 ms.
	PollMin time.Duration
	// PollMax caps the wait between claims on an idle queue. Defaults to
	// 1 s.
	PollMax time.Duration
	// ClaimBatch is how many jobs one claim takes at most, capped by the
	// free slots and the jobs claimed ahead (see Prefetch); 1 turns
	// batching off. Above 1 the worker claims adaptively: one job with one
	// findAndModify while claims come back short (a trickle, an idle
	// queue); its free slots in one batch after single claims in a row
	// each found their job; and while batches come back full (a backlog)
	// it also waits briefly for slots about to free, so that one claim
	// replaces many jobs, whose completions are then written in one
	// updateMany. Defaults to DefaultClaimBatch.
	ClaimBatch int
	// Prefetch is how many jobs the worker may hold beyond Concurrency,
	// claimed and waiting for a slot, when its claims are slow compared
	// with its jobs: a slow server (an overloaded primary, a big backlog to
	// scan) answers a claim of many jobs about as fast as a claim of few,
	// so the worker claims ahead what its slots will run while the next
	// claim is on its way, up to Prefetch. With fast claims or long jobs
	// that is none, and jobs stay in the database for other workers; so it
	// is where a claim's time is all per job (bigger ones only take
	// longer). A job held waiting has its lease renewed like a running
	// one; it starts in claim order, and a stop gives back those not
	// started, their attempt not counted. Defaults to 100; -1 turns it off.
	Prefetch int
	// WriteTimeout, when positive, bounds each heartbeat and completion
	// round trip (and so a majority write-concern wait) below the deadlines
	// the worker gives them: the worker command sets it from
	// mongo.writeTimeout. Zero leaves them at those deadlines. Claims keep
	// their own bound (see ClaimTimeout).
	WriteTimeout time.Duration
	// StuckGrace is how long a handler may go on after its kind's timeout,
	// a cancel request or a lost lease (each of which cancels its context)
	// before the worker gives up on it: it stops renewing the lease,
	// records the outcome (a failed attempt for a timeout, cancelled for a
	// cancel request, nothing for a lost lease), frees the handler's slot,
	// logs it and counts it in Stats().StuckHandlers. The handler's
	// goroutine is left running; its result, if it ever returns, is
	// discarded. Not applied at shutdown (see Stop). Defaults to
	// DefaultStuckGrace.
	StuckGrace time.Duration
	// ProcessLimits bound what this worker holds at once, whatever the
	// other workers hold: a limit's name, queue.KindLimit(kind) or
	// queue.QueueLimit(queue), → the most of its jobs the worker holds,
	// from 1 to queue.MaxLimit. A job is held from its claim (claimed
	// ahead and waiting for a slot too) until its outcome is written,
	// however it ends, so at most that many of its handlers run at once
	// (but for one the worker gave up on as stuck: StuckGrace). A kind or
	// queue at its limit is left out of the claims until one of its jobs
	// ends, and a claim takes no more jobs than the least room left among
	// the limited kinds and queues it claims. Unlike the cluster-wide
	// limits (queue.Client.SetLimit) they are this process's alone, never
	// read from the database (docket's registry only shows them).
	// Defaults to none.
	ProcessLimits map[string]int
	// Logger receives the worker's logs. Defaults to a no-op logger.
	Logger *zap.Logger
	// Observer is told of claims, attempts and heartbeats, for metrics.
	// Defaults to none.
	Observer Observer
	// Middleware wraps every attempt's handler, Middleware[0] outermost
	// (see jobs.Middleware). A panic in it is recovered as a handler's is.
	// Defaults to none.
	Middleware []jobs.Middleware
}

// WithDefaults returns c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	if c.ID == "" {
		c.ID = NewID()
	}
	if len(c.Queues) == 0 {
		c.Queues = []string{jobs.DefaultQueue}
	}
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, DefaultHeartbeatInterval)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, DefaultShutdownTimeout)
	c.PollMin = cmp.Or(c.PollMin, DefaultPollMin)
	c.PollMax = cmp.Or(c.PollMax, DefaultPollMax)
	c.ClaimBatch = cmp.Or(c.ClaimBatch, DefaultClaimBatch)
	c.Prefetch = cmp.Or(c.Prefetch, DefaultPrefetch)
	c.StuckGrace = cmp.Or(c.StuckGrace, DefaultStuckGrace)
	c.Logger = cmp.Or(c.Logger, zap.NewNop())
	return c
}

// Validate reports the first invalid field, naming it and its value.
func (c Config) Validate() error {
	for _, q := range c.Queues {
		if q == "" {
			return fmt.Errorf("worker.queues: %q has an empty queue name", c.Queues)
		}
	}
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("worker.concurrency: %d must be at least 1", c.Concurrency)
	case c.Lease < time.Second:
		return fmt.Errorf("worker.lease: %s must be at least 1s", c.Lease)
	case c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.Lease:
		return fmt.Errorf("worker.heartbeatInterval: %s must be positive and shorter than worker.lease (%s)", c.HeartbeatInterval, c.Lease)
	case 3*c.HeartbeatInterval > c.Lease:
		return fmt.Errorf("worker.heartbeatInterval: %s must be at most a third of worker.lease (%s / 3 = %s), so that a lease outlives two missed heartbeats and a claim leaves at least two heartbeat intervals of lease to start a handler",
			c.HeartbeatInterval, c.Lease, c.Lease/3)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("worker.shutdownTimeout: %s must not be negative", c.ShutdownTimeout)
	case c.PollMin <= 0:
		return fmt.Errorf("worker.pollMin: %s must be positive", c.PollMin)
	case c.PollMax < c.PollMin:
		return fmt.Errorf("worker.pollMax: %s must be at least worker.pollMin (%s)", c.PollMax, c.PollMin)
	case c.ClaimBatch < 1:
		return fmt.Errorf("worker.claimBatch: %d must be at least 1", c.ClaimBatch)
	case c.Prefetch < -1:
		return fmt.Errorf("worker.prefetch: %d must be -1 (off), 0 (the default, %d) or positive", c.Prefetch, DefaultPrefetch)
	case c.StuckGrace < 0:
		return fmt.Errorf("worker.stuckGrace: %s must not be negative", c.StuckGrace)
	}
	return validateProcessLimits(c.ProcessLimits) // processlimits.go
}

// prefetchMax is the most jobs a worker of c holds beyond Concurrency:
// c.Prefetch, none when that is -1 (off). c must have its defaults.
func (c Config) prefetchMax() int { return max(c.Prefetch, 0) }

// StartMargin is the least lease a claimed job must have left for its
// handler to start: two heartbeat intervals, so that the first renewal has
// a whole interval to get through. A job claimed with less (the claim's
// reply was slow, the process stalled) is given back, its attempt not
// counted. c must have its defaults.
func (c Config) StartMargin() time.Duration { return 2 * c.HeartbeatInterval }

// ClaimTimeout bounds one claim (or batch claim) round trip:
// maxClaimTimeout, or Lease minus StartMargin when that is less, so that a
// claim answered in time always leaves its jobs enough lease to start. The
// lease a claim stamps is counted from before the claim is sent. c must
// have its defaults.
func (c Config) ClaimTimeout() time.Duration {
	return min(maxClaimTimeout, c.Lease-c.StartMargin())
}

// NewID returns a worker id unique across machines: the host name, the
// process id and a random suffix.
func NewID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
