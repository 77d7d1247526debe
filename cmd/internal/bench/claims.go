package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/docketq/docket/worker"
)

// defaultClaimBatch, as a run's claim batch, starts its workers without
// --claim-batch: the default configuration (adaptive claiming, batches of
// at most worker.DefaultClaimBatch).
const defaultClaimBatch = 0

// batchStr shows a run's claim batch: "auto<=N" for the default.
func batchStr(n int) string {
	if n == defaultClaimBatch {
		return fmt.Sprintf("auto<=%d", worker.DefaultClaimBatch)
	}
	return strconv.Itoa(n)
}

// steadyPair runs steady state with the default configuration, then with
// --claim-batch SteadyClaimBatch (1: single claims), so that the two are
// compared in one run.
func (b *bencher) steadyPair(ctx context.Context) (def, compare *Steady, err error) {
	if def, err = b.steady(ctx, "steady", defaultClaimBatch); err != nil {
		return nil, nil, err
	}
	if compare, err = b.steady(ctx, "steady"+strconv.Itoa(b.o.SteadyClaimBatch), b.o.SteadyClaimBatch); err != nil {
		return nil, nil, err
	}
	return def, compare, nil
}

// ClaimRatios are the issue-14 targets' figures, each measured in the run.
type ClaimRatios struct {
	// DefaultVsRaw is the default configuration's burn-down jobs/s over
	// the raw loop's (target: at least 2.5); DefaultCommandsPerJob its
	// commands per job (target: at most 0.3).
	DefaultVsRaw          float64 `json:"defaultVsRaw,omitempty"`
	DefaultCommandsPerJob float64 `json:"defaultCommandsPerJob,omitempty"`
	// Steady*Ratio are steady state's enqueue-to-finish p50 and p99 and
	// commands per job with the default configuration over the same with
	// SteadyClaimBatch (targets: p50 and p99 at most 1.1, commands at
	// most 1).
	SteadyP50Ratio      float64 `json:"steadyP50Ratio,omitempty"`
	SteadyP99Ratio      float64 `json:"steadyP99Ratio,omitempty"`
	SteadyCommandsRatio float64 `json:"steadyCommandsRatio,omitempty"`
	// Batch4x10CommandsPerJob is the batch4x10 run's commands per job
	// (target: at most 0.3).
	Batch4x10CommandsPerJob float64 `json:"batch4x10CommandsPerJob,omitempty"`
}

func (r *Results) deriveClaims() {
	c := &ClaimRatios{}
	if d := r.Default; d != nil {
		c.DefaultCommandsPerJob = d.CommandsPerJob
		if r.Raw != nil && r.Raw.JobsPerSec > 0 {
			c.DefaultVsRaw = d.JobsPerSec / r.Raw.JobsPerSec
		}
	}
	if s, o := r.Steady, r.SteadyCompare; s != nil && o != nil {
		if o.LatencyP50 > 0 {
			c.SteadyP50Ratio = s.LatencyP50 / o.LatencyP50
		}
		if o.LatencyP99 > 0 {
			c.SteadyP99Ratio = s.LatencyP99 / o.LatencyP99
		}
		if o.CommandsPerJob > 0 {
			c.SteadyCommandsRatio = s.CommandsPerJob / o.CommandsPerJob
		}
	}
	if b := r.Batch4x10; b != nil {
		c.Batch4x10CommandsPerJob = b.CommandsPerJob
	}
	if *c != (ClaimRatios{}) {
		r.Claims = c
	}
}

// writeClaims prints the steady-state runs and the issue-14 ratios.
func (r *Results) writeClaims(w io.Writer) {
	for _, s := range []*Steady{r.Steady, r.SteadyCompare} {
		if s == nil {
			continue
		}
		fmt.Fprintf(w, "steady: %d jobs at %.1f/s over %d x %d, claim batch %s: lag p50 %s p99 %s, enqueue-to-finish p50 %s p99 %s, drained %.1fs after the last enqueue, %.2f cmds/job\n",
			s.Jobs, s.RatePerSec, s.Procs, s.Concurrency, batchStr(s.ClaimBatch), msStr(s.LagP50), msStr(s.LagP99), msStr(s.LatencyP50), msStr(s.LatencyP99), s.DrainSeconds, s.CommandsPerJob)
	}
	c := r.Claims
	if c == nil {
		return
	}
	if c.DefaultVsRaw > 0 {
		fmt.Fprintf(w, "default burn-down: %.2fx the raw loop's jobs/s (target >= 2.5), %.2f cmds/job (target <= 0.3; %s)\n",
			c.DefaultVsRaw, c.DefaultCommandsPerJob, commandsSplit(r.Default))
	}
	if c.SteadyP50Ratio > 0 {
		fmt.Fprintf(w, "steady default / claim batch %d: enqueue-to-finish p50 %.2fx, p99 %.2fx (targets <= 1.10), cmds/job %.2fx (target <= 1)\n",
			r.SteadyCompare.ClaimBatch, c.SteadyP50Ratio, c.SteadyP99Ratio, c.SteadyCommandsRatio)
	}
	if b := r.Batch4x10; b != nil {
		fmt.Fprintf(w, "%d x %d, batches of %d: %.2f cmds/job (target <= 0.3; %s)\n", b.Procs, b.Concurrency, b.ClaimBatch, b.CommandsPerJob, commandsSplit(b))
	}
}

// splitCommands sets the claims' and completions' shares of the commands
// per job.
func (r *BurnDown) splitCommands(us []usage) {
	var claims, done, leader, pauses, registry int64
	for _, u := range us {
		claims += u.ClaimCmds
		done += u.DoneCmds
		leader += u.Leader
		pauses += u.Pauses
		registry += u.Registry
	}
	per := func(n int64) float64 { return float64(n) / float64(r.Jobs) }
	r.ClaimCommandsPerJob, r.CompleteCommandsPerJob = per(claims), per(done)
	r.LeaderCommandsPerJob, r.PauseCommandsPerJob, r.RegistryCommandsPerJob = per(leader), per(pauses), per(registry)
}

// commandsSplit shows the share of claims, completions and the rest in a
// burn-down's commands per job.
func commandsSplit(b *BurnDown) string {
	other := b.CommandsPerJob - b.ClaimCommandsPerJob - b.CompleteCommandsPerJob
	return fmt.Sprintf("claims %.2f, completions %.2f, other %.2f: leader election %.2f, paused-queue reads %.2f, registry %.2f, maintenance %.2f",
		b.ClaimCommandsPerJob, b.CompleteCommandsPerJob, other, b.LeaderCommandsPerJob, b.PauseCommandsPerJob, b.RegistryCommandsPerJob,
		other-b.LeaderCommandsPerJob-b.PauseCommandsPerJob-b.RegistryCommandsPerJob)
}
