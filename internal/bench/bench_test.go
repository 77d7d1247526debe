package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
)

// TestMain lets the test binary be the bench's worker process: the bench
// re-executes itself as `<binary> worker ...`.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	testdb.Main(m)
}

// TestEveryRunMeasuresWhatItRan runs every run of the bench at small sizes
// on its own devdb, with real worker processes, and checks that what it
// reports adds up: each burn-down ran all its jobs, each job cost at least
// its claim and its completion with single claims, batch claims cost fewer
// commands than single ones, and the idle worker was counted. It asserts
// no speed.
func TestEveryRunMeasuresWhatItRan(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a devdb and a dozen worker processes")
	}
	o := Options{
		Jobs: 40, Procs: 2, Concurrency: 4, ClaimBatch: 4,
		SteadyRate: 20, SteadyFor: time.Second, SteadyClaimBatch: 1,
		SpreadProcs: 2, SpreadConcurrency: 4, SpreadClaimBatch: 4,
		IdleWarmup: time.Second, IdleFor: time.Second, FailoverProcs: 2,
		SleepJobs: 8, Sleep: 10 * time.Millisecond, SleepConcurrency: 1, SleepClaimBatch: 1,
		HeartbeatJobs: 10, HeartbeatSleep: 3 * time.Second, HeartbeatLease: 3 * time.Second, HeartbeatInterval: time.Second,
		Runs: allRuns,
	}
	// The bench starts its own devdb: the binary testdb builds.
	t.Setenv("DOCKET_DEVDB_BIN", testdb.DevDBBinary(t))
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Run(ctx, o, &log)
	require.NoError(t, err, log.String())

	for _, r := range []*BurnDown{res.Single, res.Raw, res.Default, res.Batch, res.Batch4x10, res.Scaling[0], res.Scaling[1], res.Scaling[2]} {
		require.NotNil(t, r)
		require.Positive(t, r.JobsPerSec, r.Name)
	}
	require.Equal(t, 40, res.Single.Jobs)
	require.GreaterOrEqual(t, res.Single.CommandsPerJob, 2.0, "a single claim and a completion per job")
	require.GreaterOrEqual(t, res.Raw.CommandsPerJob, 2.0, "the raw loop's findAndModify and update per job")
	require.Less(t, res.Batch.CommandsPerJob, res.Single.CommandsPerJob, "batch claims send fewer commands")
	for i, procs := range []int{1, 2, 4} {
		require.Equal(t, procs, res.Scaling[i].Procs)
		require.Equal(t, 8, res.Scaling[i].Jobs)
	}
	require.Less(t, res.Default.CommandsPerJob, res.Single.CommandsPerJob, "the default claims a backlog in batches")
	require.Equal(t, 2, res.Batch4x10.Procs)
	require.NotNil(t, res.Steady)
	require.Positive(t, res.Steady.Jobs)
	require.NotNil(t, res.SteadyCompare)
	require.Positive(t, res.SteadyCompare.Jobs)
	require.Equal(t, 1, res.SteadyCompare.ClaimBatch)
	require.NotNil(t, res.Claims)
	require.Positive(t, res.Claims.DefaultVsRaw)
	require.Positive(t, res.Claims.SteadyP50Ratio)
	require.NotNil(t, res.Idle)
	require.Positive(t, res.Idle.Seconds)
	require.Equal(t, 8, res.Idle8.Procs)
	require.Positive(t, res.Idle8.PollsPerSec, "eight idle processes poll")
	require.Equal(t, 4, res.Idle4.Procs)
	require.NotNil(t, res.Heartbeats)
	require.Positive(t, res.Heartbeats.Renewals, "ten 3 s jobs with a 1 s heartbeat are renewed")
	require.NotNil(t, res.Failover)
	require.NotEqual(t, res.Failover.KilledLeader, res.Failover.NewLeader)
	require.GreaterOrEqual(t, res.Failover.ReapedSeconds, res.Failover.ElectedSeconds, "the new leader reaps once elected")

	var table bytes.Buffer
	res.writeTable(&table)
	for _, want := range []string{"single", "raw", "default", "batch4x10", "batch", "scaling4", "steady:", "default burn-down:", "steady default / claim batch 1", "idle:", "idle8:", "idle4:", "heartbeats:", "failover:"} {
		require.True(t, strings.Contains(table.String(), want), "table lacks %q:\n%s", want, table.String())
	}
	_, err = json.Marshal(res)
	require.NoError(t, err)
}

func TestBadSizesAreRefused(t *testing.T) {
	var stderr bytes.Buffer
	require.Equal(t, 2, Main([]string{"--jobs", "0"}, &bytes.Buffer{}, &stderr))
	require.Contains(t, stderr.String(), "must be positive")
	stderr.Reset()
	require.Equal(t, 2, Main([]string{"--runs", "single,nope"}, &bytes.Buffer{}, &stderr))
	require.Contains(t, stderr.String(), "nope")
}
