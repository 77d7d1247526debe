package docket

import (
	"testing"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// The flat Config's defaults are the engine's: each field takes the very
// default its component takes.
func TestConfigDefaultsAreTheEngines(t *testing.T) {
	e, err := Config{}.engine(zap.NewNop())
	require.NoError(t, err)
	require.Equal(t, DefaultCollection, e.queue.Collection)
	require.Equal(t, []string{jobs.DefaultQueue}, e.worker.Queues)
	require.Equal(t, DefaultConcurrency, e.worker.Concurrency)
	require.Equal(t, DefaultLease, e.worker.Lease)
	require.Equal(t, DefaultReapInterval, e.reaper.Interval)
	require.Equal(t, KeepForever, e.reaper.DeadRetention)

	// WithDefaults spells out the very defaults each component takes.
	d := Config{}.WithDefaults()
	q, w, r := queue.Config{}.WithDefaults(), worker.Config{}.WithDefaults(), recovery.ReaperConfig{}.WithDefaults()
	require.Equal(t, []any{q.Collection, q.WriteConcern, q.RetryBase, q.RetryMax}, []any{d.Collection, d.WriteConcern, d.RetryBase, d.RetryMax})
	require.Equal(t, []any{w.Queues, w.Concurrency, w.Lease, w.HeartbeatInterval, w.ShutdownTimeout, w.StuckGrace, w.PollMin, w.PollMax, w.ClaimBatch, w.Prefetch},
		[]any{d.Queues, d.Concurrency, d.Lease, d.HeartbeatInterval, d.ShutdownTimeout, d.StuckGrace, d.PollMin, d.PollMax, d.ClaimBatch, d.Prefetch})
	require.Equal(t, []any{r.Interval, r.Grace, r.Batch, r.RetentionBudget, r.SucceededRetention, r.DeadRetention},
		[]any{d.ReapInterval, d.ReapGrace, d.ReapBatch, d.RetentionBudget, d.SucceededRetention, d.DeadRetention})
	require.Equal(t, time.Duration(DefaultLeaderTTL), d.LeaderTTL)
	require.NotEmpty(t, d.ID)
	require.Equal(t, d, d.WithDefaults(), "a set field keeps its value")
}

// Validate refuses what NewClient refuses, naming Config's field; zero
// fields take their defaults.
func TestConfigValidate(t *testing.T) {
	require.NoError(t, Config{}.Validate())
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{LeaderTTL: time.Second}, "Config.LeaderTTL: 1s must be at least 3s"},
		{Config{Lease: 500 * time.Millisecond}, "Config.Lease: 500ms must be at least 1s"},
		{Config{Capacities: map[string]int{"q": 0}}, `Config.Capacities["q"]: 0 is not a capacity`},
		{Config{Limits: map[string]int{"kinds:x": 1}}, "Config.Limits: "},
		{Config{PartitionLimits: map[string]PartitionLimit{"kind:x": {N: 0, By: "c"}}}, `Config.PartitionLimits["kind:x"]`},
		{Config{Rates: map[string]Rate{"kind:x": {N: 0, Per: time.Second}}}, "rates.kind:x"},
		{Config{PeriodicJobs: []PeriodicJob{{Name: "n", Schedule: "@hourly"}}}, `Config.PeriodicJobs: periodic job 0 ("n"): args must not be nil`},
	} {
		require.ErrorContains(t, tc.cfg.Validate(), tc.want)
	}
}

// Every field of the flat Config reaches its engine setting, and a bad one
// is named by its Config name, not the engine's.
func TestConfigMapsOntoTheEngine(t *testing.T) {
	c := Config{
		ID: "w1", Collection: "c", WriteConcern: "1", RetryBase: 2 * time.Second, RetryMax: 3 * time.Second,
		Queues: []string{"a"}, Concurrency: 4, Lease: 9 * time.Second, HeartbeatInterval: 3 * time.Second,
		ShutdownTimeout: 5 * time.Second, StuckGrace: 6 * time.Second, PollMin: 7 * time.Millisecond, PollMax: 8 * time.Millisecond,
		ClaimBatch: 9, Prefetch: -1, WriteTimeout: 2 * time.Second, ProcessLimits: map[string]int{"kind:k": 2},
		ReapInterval: 11 * time.Second, ReapGrace: 12 * time.Second, ReapBatch: 13, RetentionBudget: 14 * time.Second,
		SucceededRetention: time.Hour, DeadRetention: 2 * time.Hour,
	}
	e, err := c.engine(zap.NewNop())
	require.NoError(t, err)
	q, w, r := e.queue, e.worker, e.reaper
	require.Equal(t, []any{"c", "1", 2 * time.Second, 3 * time.Second}, []any{q.Collection, q.WriteConcern, q.RetryBase, q.RetryMax})
	require.Equal(t, []any{"w1", []string{"a"}, 4, 9 * time.Second, 3 * time.Second, 5 * time.Second, 6 * time.Second, 7 * time.Millisecond, 8 * time.Millisecond, 9, -1, 2 * time.Second},
		[]any{w.ID, w.Queues, w.Concurrency, w.Lease, w.HeartbeatInterval, w.ShutdownTimeout, w.StuckGrace, w.PollMin, w.PollMax, w.ClaimBatch, w.Prefetch, w.WriteTimeout})
	require.Equal(t, map[string]int{"kind:k": 2}, w.ProcessLimits)
	require.Equal(t, []any{11 * time.Second, 12 * time.Second, 13, 14 * time.Second, time.Hour, 2 * time.Hour},
		[]any{r.Interval, r.Grace, r.Batch, r.RetentionBudget, r.SucceededRetention, r.DeadRetention})

	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Lease: 3 * time.Second, HeartbeatInterval: 2 * time.Second}, "Config.HeartbeatInterval: 2s must be at most a third of Config.Lease (3s"},
		{Config{WriteConcern: "most"}, `Config.WriteConcern: "most"`},
		{Config{ReapInterval: -time.Second}, "Config.ReapInterval: -1s must be positive"},
		{Config{Queues: []string{""}}, "Config.Queues"},
	} {
		_, err := tc.cfg.engine(zap.NewNop())
		require.ErrorContains(t, err, tc.want)
	}
}
