package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Results are one bench run's measurements.
type Results struct {
	Options Options `json:"options"`
	Server  string  `json:"server"`
	Took    string  `json:"took"`

	Single *BurnDown `json:"single,omitempty"`
	Raw    *BurnDown `json:"raw,omitempty"`
	Batch  *BurnDown `json:"batch,omitempty"`
	Steady *Steady   `json:"steady,omitempty"`
	Idle   *Idle     `json:"idle,omitempty"`
	Idle8  *Idle     `json:"idle8,omitempty"`
	Idle4  *Idle     `json:"idle4,omitempty"`
	// Heartbeats is many long jobs on one process: lease renewal commands
	// per heartbeat interval.
	Heartbeats *Heartbeats `json:"heartbeats,omitempty"`
	// Failover is the time from the elected leader's SIGKILL to the next
	// leader and its first reap pass.
	Failover *Failover   `json:"failover,omitempty"`
	Scaling  []*BurnDown `json:"scaling,omitempty"`
	// Ledger is the ledger against the two-phase transfer.
	Ledger *LedgerBench `json:"ledger,omitempty"`

	// SingleVsRaw and BatchVsRaw are docket's burn-down throughput as a
	// ratio of the raw loop's in the same run (SingleVsRaw only when the
	// single burn-down had the raw loop's backlog: on devdb a claim's cost
	// grows with it).
	SingleVsRaw float64 `json:"singleVsRaw,omitempty"`
	BatchVsRaw  float64 `json:"batchVsRaw,omitempty"`
	// Scaling4vs1 is the sleeping-handler throughput of 4 worker processes
	// as a ratio of 1's.
	Scaling4vs1 float64 `json:"scaling4vs1,omitempty"`

	// Default is the burn-down with the default configuration; Batch4x10
	// many processes claiming batches (issue 14).
	Default   *BurnDown `json:"default,omitempty"`
	Batch4x10 *BurnDown `json:"batch4x10,omitempty"`
	// SteadyCompare is steady state with Options.SteadyClaimBatch, in the
	// same run as Steady, which runs the default configuration.
	SteadyCompare *Steady `json:"steadyCompare,omitempty"`
	// Claims are the figures of the claiming targets (issue 14).
	Claims *ClaimRatios `json:"claims,omitempty"`
	// Growth is docket and the raw loop at growing backlogs (issue 22).
	Growth *Growth `json:"growth,omitempty"`
	// Limits is the cost of concurrency limits, binding or not.
	Limits *LimitsBench `json:"limits,omitempty"`
	// Rate is a rate limit held by several processes.
	Rate *RateBench `json:"rate,omitempty"`
	// Partitions is a partition limit at a real backlog.
	Partitions *PartitionsBench `json:"partitions,omitempty"`
	// Workflows is workflows of several shapes beside plain burn-downs.
	Workflows *WorkflowsBench `json:"workflows,omitempty"`
}

// LimitsBench is the limits run: the same burn-down without a limit and
// under one that does not bind, and sleeping jobs under one that binds.
type LimitsBench struct {
	Free       *BurnDown `json:"free"`
	NotBinding *BurnDown `json:"notBinding"`
	Binding    *BurnDown `json:"binding"`
	Limit      int       `json:"limit"`
	SleepMs    int       `json:"sleepMs"`
	// Allowed is the most jobs/s the binding limit lets run.
	Allowed float64 `json:"allowedJobsPerSec"`
}

// BurnDown is one burn-down: n jobs enqueued, then run until none is left.
type BurnDown struct {
	Name        string  `json:"name"`
	Jobs        int     `json:"jobs"`
	Procs       int     `json:"procs"`
	Concurrency int     `json:"concurrency"`
	ClaimBatch  int     `json:"claimBatch"`
	Seconds     float64 `json:"seconds"`
	JobsPerSec  float64 `json:"jobsPerSec"`
	// Commands counts every command the workers sent after setting up,
	// including empty claims and maintenance.
	Commands       int64            `json:"commands"`
	CommandsPerJob float64          `json:"commandsPerJob"`
	ByName         map[string]int64 `json:"byName"`
	// ClaimP50/P99 are claim round trips in ms (a batch claim's find and
	// update together); StartP50/P99 are enqueue-to-start in ms.
	Claims     int       `json:"claims"`
	ClaimP50   float64   `json:"claimP50ms"`
	ClaimP99   float64   `json:"claimP99ms"`
	StartP50   float64   `json:"startP50ms"`
	StartP99   float64   `json:"startP99ms"`
	PerProcess []Process `json:"perProcess,omitempty"`
	// ClaimCommandsPerJob and CompleteCommandsPerJob split CommandsPerJob:
	// the claims' commands (single, or a batch's find, stamp and read-back)
	// and the completions'; the rest is the leader election's, the
	// paused-queue reads', the registry's and maintenance's.
	ClaimCommandsPerJob    float64 `json:"claimCommandsPerJob"`
	CompleteCommandsPerJob float64 `json:"completeCommandsPerJob"`
	LeaderCommandsPerJob   float64 `json:"leaderCommandsPerJob"`
	PauseCommandsPerJob    float64 `json:"pauseCommandsPerJob"`
	RegistryCommandsPerJob float64 `json:"registryCommandsPerJob"`
}

// Process is one worker process's resource use.
type Process struct {
	CPUSeconds float64 `json:"cpuSeconds"`
	MaxRSSMB   float64 `json:"maxRssMB"`
	Commands   int64   `json:"commands"`
}

// Steady is the steady-state run.
type Steady struct {
	Jobs           int     `json:"jobs"`
	Procs          int     `json:"procs"`
	Concurrency    int     `json:"concurrency"`
	ClaimBatch     int     `json:"claimBatch"`
	RatePerSec     float64 `json:"ratePerSec"`
	DrainSeconds   float64 `json:"drainSeconds"`
	LagP50         float64 `json:"lagP50ms"` // enqueue to start
	LagP99         float64 `json:"lagP99ms"`
	LatencyP50     float64 `json:"latencyP50ms"` // enqueue to finish
	LatencyP99     float64 `json:"latencyP99ms"`
	CommandsPerJob float64 `json:"commandsPerJob"`
}

// Idle is worker processes on an empty queue.
type Idle struct {
	Procs    int     `json:"procs"`
	Seconds  float64 `json:"seconds"`
	Commands int64   `json:"commands"`
	// PerSec is the commands per second of all the processes together,
	// split into claims (polling), leader election and the rest
	// (maintenance, run by the elected leader alone).
	PerSec            float64 `json:"perSec"`
	PollsPerSec       float64 `json:"pollsPerSec"`
	LeaderPerSec      float64 `json:"leaderPerSec"`
	MaintenancePerSec float64 `json:"maintenancePerSec"`
	// PauseReadsPerSec and RegistryPerSec are the part of
	// MaintenancePerSec that every process sends, not the leader alone:
	// its reads of the queues' paused states (before a claim, at most one
	// a second) and its worker registry beats.
	PauseReadsPerSec float64 `json:"pauseReadsPerSec"`
	RegistryPerSec   float64 `json:"registryPerSec"`
	// ByName counts the processes' commands over their lives, set-up and
	// warm-up included.
	ByName map[string]int64 `json:"byName"`
}

// Failover is the elected leader SIGKILLed among idle worker processes.
type Failover struct {
	Procs            int     `json:"procs"`
	LeaderTTLSeconds float64 `json:"leaderTtlSeconds"`
	KilledLeader     string  `json:"killedLeader"`
	NewLeader        string  `json:"newLeader"`
	// ElectedSeconds is from the SIGKILL until another process held the
	// leadership; ReapedSeconds until its reaper had re-queued a job whose
	// lease had expired (planted right after the SIGKILL).
	ElectedSeconds float64 `json:"electedSeconds"`
	ReapedSeconds  float64 `json:"reapedSeconds"`
}

func (r *BurnDown) addUsage(us []usage) {
	r.ByName = map[string]int64{}
	var claims []float64
	for _, u := range us {
		r.Commands += u.Commands
		for k, v := range u.ByName {
			r.ByName[k] += v
		}
		claims = append(claims, u.ClaimMs...)
		r.PerProcess = append(r.PerProcess, Process{CPUSeconds: u.CPU.Seconds(), MaxRSSMB: u.MaxRSSMB, Commands: u.Commands})
	}
	r.CommandsPerJob = float64(r.Commands) / float64(r.Jobs)
	r.splitCommands(us)
	r.Claims = len(claims)
	r.ClaimP50, r.ClaimP99 = pct(claims, 50), pct(claims, 99)
}

func (r *Results) derive() {
	if r.Raw != nil && r.Raw.JobsPerSec > 0 {
		if r.Single != nil && r.Single.Jobs == r.Raw.Jobs {
			r.SingleVsRaw = r.Single.JobsPerSec / r.Raw.JobsPerSec
		}
		if r.Batch != nil {
			r.BatchVsRaw = r.Batch.JobsPerSec / r.Raw.JobsPerSec
		}
	}
	if len(r.Scaling) == 3 && r.Scaling[0].JobsPerSec > 0 {
		r.Scaling4vs1 = r.Scaling[2].JobsPerSec / r.Scaling[0].JobsPerSec
	}
	r.deriveClaims()
}

func (r *Results) writeTable(w io.Writer) {
	fmt.Fprintf(w, "server: %s; took %s\n", r.Server, r.Took)
	rows := slices.DeleteFunc([]*BurnDown{r.Single, r.Raw, r.Default, r.Batch, r.Batch4x10}, func(b *BurnDown) bool { return b == nil })
	rows = append(rows, r.Scaling...)
	if l := r.Limits; l != nil {
		rows = append(rows, l.Free, l.NotBinding, l.Binding)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(rows) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "run\tjobs\tprocs x conc\tbatch\tjobs/s\tcmds/job\tclaim p50\tclaim p99\tstart p50\tstart p99\tcpu/proc\trss/proc\t")
	}
	for _, b := range rows {
		cpu, rss := "-", "-"
		if len(b.PerProcess) > 0 {
			var c, m float64
			for _, p := range b.PerProcess {
				c += p.CPUSeconds
				m = max(m, p.MaxRSSMB)
			}
			cpu = fmt.Sprintf("%.2fs", c/float64(len(b.PerProcess)))
			rss = fmt.Sprintf("%.0fMB", m)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d x %d\t%s\t%.1f\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			b.Name, b.Jobs, b.Procs, b.Concurrency, batchStr(b.ClaimBatch), b.JobsPerSec, b.CommandsPerJob,
			msStr(b.ClaimP50), msStr(b.ClaimP99), msStr(b.StartP50), msStr(b.StartP99), cpu, rss)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	if r.SingleVsRaw > 0 {
		fmt.Fprintf(w, "docket/raw throughput: single %.2f", r.SingleVsRaw)
		if r.BatchVsRaw > 0 {
			fmt.Fprintf(w, ", batch %.2f", r.BatchVsRaw)
		}
		fmt.Fprintln(w)
	}
	if r.Scaling4vs1 > 0 {
		fmt.Fprintf(w, "sleeping handler, 4 processes / 1: %.2fx\n", r.Scaling4vs1)
	}
	r.writeClaims(w)
	if l := r.Limits; l != nil && l.Free.JobsPerSec > 0 && l.Allowed > 0 {
		fmt.Fprintf(w, "limits: a limit that does not bind: %.1f%% of the throughput without one, %+.3f commands/job; a binding limit of %d on %d ms jobs: %.1f jobs/s, %.1f%% of the %.0f it allows\n",
			100*l.NotBinding.JobsPerSec/l.Free.JobsPerSec, l.NotBinding.CommandsPerJob-l.Free.CommandsPerJob,
			l.Limit, l.SleepMs, l.Binding.JobsPerSec, 100*l.Binding.JobsPerSec/l.Allowed, l.Allowed)
	}
	if r.Rate != nil {
		r.Rate.write(w)
	}
	if r.Partitions != nil {
		r.Partitions.write(w)
	}
	if r.Workflows != nil {
		r.Workflows.write(w)
	}
	for _, i := range []*Idle{r.Idle, r.Idle4, r.Idle8} {
		if i == nil {
			continue
		}
		name := "idle"
		if i != r.Idle {
			name = fmt.Sprintf("idle%d", i.Procs)
		}
		fmt.Fprintf(w, "%s: %d worker process(es): %.2f commands/s (claims %.2f, leader election %.2f, maintenance %.2f of which pause reads %.2f and registry beats %.2f; %d in %.1fs); over their lives, set-up included: %s\n",
			name, i.Procs, i.PerSec, i.PollsPerSec, i.LeaderPerSec, i.MaintenancePerSec, i.PauseReadsPerSec, i.RegistryPerSec, i.Commands, i.Seconds, countsStr(i.ByName))
	}
	if r.Idle != nil && r.Idle8 != nil && r.Idle.MaintenancePerSec > 0 {
		fmt.Fprintf(w, "idle8 vs idle: %.2fx the commands, %.2fx the maintenance\n",
			r.Idle8.PerSec/r.Idle.PerSec, r.Idle8.MaintenancePerSec/r.Idle.MaintenancePerSec)
	}
	if r.Idle != nil && r.Idle4 != nil && r.Idle.MaintenancePerSec > 0 {
		fmt.Fprintf(w, "idle4 vs idle: %.2fx the commands, %.2fx the maintenance\n",
			r.Idle4.PerSec/r.Idle.PerSec, r.Idle4.MaintenancePerSec/r.Idle.MaintenancePerSec)
	}
	if r.Idle != nil && r.Idle8 != nil {
		target := 8*r.Idle.PollsPerSec + (r.Idle.PerSec - r.Idle.PollsPerSec)
		fmt.Fprintf(w, "idle8 target: <= 8 x one idle process's claims (%.2f) + one process's other commands (%.2f) = %.2f/s; measured %.2f/s (%.2fx the target)\n",
			r.Idle.PollsPerSec, r.Idle.PerSec-r.Idle.PollsPerSec, target, r.Idle8.PerSec, r.Idle8.PerSec/target)
	}
	if r.Heartbeats != nil {
		r.Heartbeats.write(w)
	}
	if r.Ledger != nil {
		r.Ledger.writeTable(w)
	}
	if r.Growth != nil {
		r.Growth.write(w)
	}
	if f := r.Failover; f != nil {
		fmt.Fprintf(w, "failover: %d processes, leader TTL %.0fs: leader SIGKILLed, next leader after %.1fs, its first reap pass after %.1fs\n",
			f.Procs, f.LeaderTTLSeconds, f.ElectedSeconds, f.ReapedSeconds)
	}
}

func msStr(v float64) string {
	return (time.Duration(v * float64(time.Millisecond))).Round(100 * time.Microsecond).String()
}

// countsStr lists counts by name, in name order: "find 5, ping 1".
func countsStr(m map[string]int64) string {
	names := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d", n, m[n])
	}
	return strings.Join(parts, ", ")
}
