package worker

import (
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
	// DefaultClaimBatch is how many jobs one claim takes at most: 1 claims
	// one job per findAndModify (see docs/BENCHMARKS.md for the trade-off).
	DefaultClaimBatch = 1
)

// Config configures a Worker.
type Config struct {
	// ID names the worker in job documents and logs; it must be unique
	// across machines. Defaults to host-pid-random.
	ID string `yaml:"id"`
	// Queues are the queues the worker claims from. Defaults to
	// [jobs.DefaultQueue].
	Queues []string `yaml:"queues"`
	// Concurrency is how many jobs run at once. Defaults to
	// DefaultConcurrency.
	Concurrency int `yaml:"concurrency"`
	// Lease is how long a claim or a heartbeat holds a job. Defaults to
	// DefaultLease.
	Lease time.Duration `yaml:"lease"`
	// HeartbeatInterval is how often a running job's lease is renewed; it
	// must be shorter than Lease. Defaults to DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration `yaml:"heartbeatInterval"`
	// ShutdownTimeout bounds a graceful stop. Defaults to
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration `yaml:"shutdownTimeout"`
	// PollMin is the first wait after an empty claim; the wait doubles, with
	// jitter, up to PollMax. Defaults to DefaultPollMin.
	PollMin time.Duration `yaml:"pollMin"`
	// PollMax caps the wait between claims on an idle queue. Defaults to
	// DefaultPollMax.
	PollMax time.Duration `yaml:"pollMax"`
	// ClaimBatch is how many jobs one claim takes at most, capped by the
	// free slots. Above 1, the worker claims with queue.ClaimBatch and
	// writes the completions of jobs that end together in one updateMany:
	// fewer commands per job, a little latency for each. Defaults to
	// DefaultClaimBatch.
	ClaimBatch int `yaml:"claimBatch"`
	// WriteTimeout, when positive, bounds each heartbeat and completion
	// round trip (and so a majority write-concern wait) below the deadlines
	// the worker gives them: the worker command sets it from
	// mongo.writeTimeout. Zero leaves them at those deadlines. Claims keep
	// their own 10 s bound.
	WriteTimeout time.Duration `yaml:"-"`
	// Logger receives the worker's logs. Defaults to a no-op logger.
	Logger *zap.Logger `yaml:"-"`
	// Observer is told of claims, attempts and heartbeats, for metrics.
	// Defaults to none.
	Observer Observer `yaml:"-"`
}

// WithDefaults returns c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	if c.ID == "" {
		c.ID = NewID()
	}
	if len(c.Queues) == 0 {
		c.Queues = []string{jobs.DefaultQueue}
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.PollMin == 0 {
		c.PollMin = DefaultPollMin
	}
	if c.PollMax == 0 {
		c.PollMax = DefaultPollMax
	}
	if c.ClaimBatch == 0 {
		c.ClaimBatch = DefaultClaimBatch
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
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
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("worker.shutdownTimeout: %s must not be negative", c.ShutdownTimeout)
	case c.PollMin <= 0:
		return fmt.Errorf("worker.pollMin: %s must be positive", c.PollMin)
	case c.PollMax < c.PollMin:
		return fmt.Errorf("worker.pollMax: %s must be at least worker.pollMin (%s)", c.PollMax, c.PollMin)
	case c.ClaimBatch < 1:
		return fmt.Errorf("worker.claimBatch: %d must be at least 1", c.ClaimBatch)
	}
	return nil
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
