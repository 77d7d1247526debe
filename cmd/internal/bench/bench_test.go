package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
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
	testdb.SkipOnRealMongo(t, "the bench measures a devdb of its own")
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
		Rate: queue.Rate{N: 20, Per: time.Second, Burst: 5}, RateProcs: 2, RateFor: 2 * time.Second,
		WorkflowJobs: 30, WorkflowChain: 10,
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
	require.NotNil(t, res.Limits)
	for _, b := range []*BurnDown{res.Limits.Free, res.Limits.NotBinding, res.Limits.Binding} {
		require.Positive(t, b.JobsPerSec, b.Name)
	}
	require.LessOrEqual(t, res.Limits.Binding.JobsPerSec, res.Limits.Allowed*1.05,
		"a binding limit of %d on %d ms jobs runs no more than it allows", res.Limits.Limit, res.Limits.SleepMs)
	require.NotNil(t, res.Rate)
	require.Positive(t, res.Rate.Starts)
	require.LessOrEqual(t, res.Rate.MostPerPeriod, res.Rate.AllowedWithLag,
		"no period saw more claims than the rate allows (with those of one RateStartLag: see queue/rate.go)")
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
	for _, bad := range [][]string{{"--growth-backlogs", "300,0"}, {"--growth-backlogs", "many"}, {"--growth-window", "0s"}, {"--growth-budget", "-1s"}} {
		stderr.Reset()
		require.Equal(t, 2, Main(append([]string{"--runs", "growth"}, bad...), &bytes.Buffer{}, &stderr), bad)
		require.Contains(t, stderr.String(), "--growth", bad)
	}
}

// TestGrowthMeasuresWhatItRan makes the growth run at tiny sizes on its own
// devdb, with a real worker process, and checks each row against the
// database and the table against the rows: every row ran, its jobs/s is
// its completed jobs over its window, the database holds at least as many
// of the backlog's jobs succeeded as the row says were completed (all of
// them when it says drained), and the table prints those figures. It
// asserts no speed.
func TestGrowthMeasuresWhatItRan(t *testing.T) {
	testdb.SkipOnRealMongo(t, "the bench measures a devdb of its own")
	if testing.Short() {
		t.Skip("starts a devdb and worker processes")
	}
	o := Options{
		GrowthBacklogs: []int{50, 200}, GrowthRetained: 500, GrowthRetainedBacklog: 20,
		GrowthWindow: 3 * time.Second, GrowthBudget: 4 * time.Minute,
		Runs: []string{"growth"},
	}
	t.Setenv("DOCKET_DEVDB_BIN", testdb.DevDBBinary(t))
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Run(ctx, o, &log)
	require.NoError(t, err, log.String())
	g := res.Growth
	require.NotNil(t, g)
	require.Empty(t, g.Skipped, "four minutes hold every point:\n%s", log.String())

	var table bytes.Buffer
	res.writeTable(&table)
	lines := strings.Split(table.String(), "\n")
	want := []struct {
		system            string
		backlog, retained int
	}{{"docket", 50, 0}, {"raw", 50, 0}, {"docket", 200, 0}, {"raw", 200, 0}, {"docket", 20, 500}, {"raw", 20, 500}}
	require.Len(t, g.Rows, len(want))
	for i, w := range want {
		r := g.Rows[i]
		name := fmt.Sprintf("%s at %d beside %d", w.system, w.backlog, w.retained)
		require.Equal(t, w.system, r.System, name)
		require.Equal(t, w.backlog, r.Backlog, name)
		require.Equal(t, w.retained, r.Retained, name)
		require.Positive(t, r.Seconds, name)
		require.LessOrEqual(t, r.Seconds, 5.0, "%s: measured about the window at most (3 s, and the lateness of a loaded machine)", name)
		require.Positive(t, r.Completed, name)
		require.LessOrEqual(t, r.Completed, int64(w.backlog), name)
		require.GreaterOrEqual(t, r.SucceededInDB, r.Completed, "%s: the database holds the jobs the row says were completed", name)
		require.LessOrEqual(t, r.SucceededInDB, int64(w.backlog), "%s: the retained jobs are not counted", name)
		if r.Drained {
			require.Equal(t, int64(w.backlog), r.Completed, name)
			require.Equal(t, int64(w.backlog), r.SucceededInDB, name)
			require.Empty(t, r.Note, name)
		} else {
			require.Contains(t, r.Note, "not drained", name)
		}
		require.InDelta(t, float64(r.Completed)/r.Seconds, r.JobsPerSec, 1e-9, name)
		require.InDelta(t, float64(r.Commands)/float64(r.Completed), r.CommandsPerJob, 1e-9, name)
		require.Positive(t, r.Claims, name)
		require.Positive(t, r.ClaimP50, name)
		require.GreaterOrEqual(t, r.ClaimP99, r.ClaimP50, name)
		if w.system == "raw" {
			require.GreaterOrEqual(t, r.CommandsPerJob, 2.0, "%s: a findAndModify and an update per job", name)
			docket := g.Rows[i-1]
			require.InDelta(t, docket.JobsPerSec/r.JobsPerSec, docket.VsRaw, 1e-9, name)
		} else {
			require.Positive(t, r.LeaderTerms, "%s: its one process was elected", name)
			require.Positive(t, r.ReadySeconds, name)
		}

		// Its line in the table, with the figures measured.
		var row []string
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) > 3 && f[0] == w.system && f[1] == thousands(w.backlog) && f[2] == thousands(w.retained) {
				require.Nil(t, row, "%s: one line", name)
				row = f
			}
		}
		require.NotNil(t, row, "%s: no line in the table:\n%s", name, table.String())
		line := strings.Join(row, " ")
		for _, fig := range []string{fmt.Sprintf("%.2f", r.JobsPerSec), fmt.Sprintf("%.2f", r.CommandsPerJob), strconv.FormatInt(r.Completed, 10),
			strconv.FormatInt(r.SucceededInDB, 10), msStr(r.ClaimP50), msStr(r.ClaimP99), strconv.Itoa(r.Claims)} {
			require.Contains(t, line, fig, "%s: the table's line %q lacks %s", name, line, fig)
		}
	}

	raw, err := json.Marshal(res)
	require.NoError(t, err)
	var back Results
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Equal(t, g.Rows, back.Growth.Rows)
}

// TestGrowthSaysWhereItStopped gives the growth run a budget too small for
// any point: it measures nothing, and says so for each point.
func TestGrowthSaysWhereItStopped(t *testing.T) {
	var log bytes.Buffer
	b := &bencher{o: Options{GrowthBacklogs: []int{300, 100_000}, GrowthRetained: 1_000_000, GrowthRetainedBacklog: 300,
		GrowthWindow: time.Minute, GrowthBudget: time.Second}, log: &log}
	g, err := b.growth(context.Background())
	require.NoError(t, err)
	require.Empty(t, g.Rows)
	require.Len(t, g.Skipped, 3)
	for i, p := range []string{"300 skipped", "100,000 skipped", "300 beside 1,000,000 retained skipped"} {
		require.True(t, strings.HasPrefix(g.Skipped[i], p+": the budget ran out"), g.Skipped[i])
	}
	var table bytes.Buffer
	(&Results{Growth: g}).writeTable(&table)
	require.Contains(t, table.String(), "growth: 100,000 skipped: the budget ran out")
}

// TestWorkflowsRun runs the workflows run at a small size: every shape's
// tasks ran, as many as its plain burn-down's jobs, and dependencies cost
// commands where parents have dependents to tell.
func TestWorkflowsRun(t *testing.T) {
	testdb.SkipOnRealMongo(t, "the bench measures a devdb of its own")
	if testing.Short() {
		t.Skip("starts a devdb and worker processes")
	}
	t.Setenv("DOCKET_DEVDB_BIN", testdb.DevDBBinary(t))
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Procs: 2, Concurrency: 4, WorkflowJobs: 30, WorkflowChain: 10, Runs: []string{"workflows"}}, &log)
	require.NoError(t, err, log.String())
	require.NotNil(t, res.Workflows)
	require.Len(t, res.Workflows.Shapes, 4)
	for _, s := range res.Workflows.Shapes {
		require.Equal(t, s.Plain.Jobs, s.Flow.Jobs, s.Shape)
		require.Positive(t, s.Flow.JobsPerSec, s.Shape)
		require.Positive(t, s.InsertCommands, s.Shape)
		if s.Shape != "fan-out" {
			require.Positive(t, s.AddedPerJob, s.Shape)
		}
	}
	var out bytes.Buffer
	res.writeTable(&out)
	require.Contains(t, out.String(), "layered")
}

// TestPartitionsRunMeasuresWhatItRan: the partitions run burns its
// backlog down without a limit and under one that does not bind, and runs
// every other customer's job past a hot customer's under 1 per customer.
func TestPartitionsRunMeasuresWhatItRan(t *testing.T) {
	testdb.SkipOnRealMongo(t, "the bench measures a devdb of its own")
	if testing.Short() {
		t.Skip("starts a devdb and worker processes")
	}
	t.Setenv("DOCKET_DEVDB_BIN", testdb.DevDBBinary(t))
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Procs: 2, Concurrency: 4, PartitionJobs: 60, Runs: []string{"partitions"}}, &log)
	require.NoError(t, err, log.String())
	p := res.Partitions
	require.NotNil(t, p)
	require.Equal(t, 30, p.Customers)
	require.Positive(t, p.Free.JobsPerSec)
	require.Positive(t, p.NotBinding.JobsPerSec)
	require.Equal(t, 29, p.Hot.Others)
	require.Positive(t, p.Hot.HotRan, "the hot customer ran too")
	var out bytes.Buffer
	res.writeTable(&out)
	require.Contains(t, out.String(), "a hot customer's 31 jobs ahead of 29 others'")
}

// The single burn-down is compared with the raw loop only at the same
// backlog: by default it burns down fewer jobs (--single-jobs).
func TestSingleVsRawOnlyAtOneBacklog(t *testing.T) {
	raw := &BurnDown{Name: "raw", Jobs: DefaultJobs, JobsPerSec: 50}
	r := &Results{Raw: raw, Single: &BurnDown{Name: "single", Jobs: DefaultSingleJobs, JobsPerSec: 25}}
	r.derive()
	require.Zero(t, r.SingleVsRaw)
	r = &Results{Raw: raw, Single: &BurnDown{Name: "single", Jobs: DefaultJobs, JobsPerSec: 25}}
	r.derive()
	require.InDelta(t, 0.5, r.SingleVsRaw, 1e-9)
}

// A negative --single-jobs is refused (0 is --jobs).
func TestSingleJobsNotNegative(t *testing.T) {
	var stderr bytes.Buffer
	require.Equal(t, 2, Main([]string{"--single-jobs", "-1"}, &bytes.Buffer{}, &stderr))
}

// TestParseShapes: --workflow-shapes takes the run's shape names, in the
// order given, and refuses any other.
func TestParseShapes(t *testing.T) {
	got, err := parseShapes("chain,fan-in")
	require.NoError(t, err)
	require.Equal(t, []string{"chain", "fan-in"}, got)
	_, err = parseShapes("chain,diamond")
	require.ErrorContains(t, err, `"diamond"`)
	_, err = parseShapes("")
	require.Error(t, err)
}
