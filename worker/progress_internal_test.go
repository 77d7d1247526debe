package worker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
)

// countProgressed counts the Progressed calls it gets.
type countProgressed struct {
	NopObserver
	n atomic.Int64
}

func (o *countProgressed) Progressed(*jobs.Job) { o.n.Add(1) }

// TestNoProgressToldAfterTheAttemptEnded: a renewal carrying a report is
// in flight when the handler returns and the attempt's outcome is told
// (Finished); the renewal's reply, coming after, writes no progress event:
// a subscriber never hears of the job running after its end.
func TestNoProgressToldAfterTheAttemptEnded(t *testing.T) {
	obs := &countProgressed{}
	w := &Worker{obs: obs}
	r := &run{job: &jobs.Job{ID: "j", State: jobs.StateRunning}, lease: store.Lease{JobID: "j", Token: "t"}}
	b := &beat{r: r}

	r.progress.report(jobs.ProgressReport{Fraction: 0.5, Message: "half", At: time.Now()})
	progress, seqs := pendingProgress([]*beat{b})
	w.progressWritten(b, progress[r.lease], seqs[b]) // a renewal while it runs: told
	require.EqualValues(t, 1, obs.n.Load())

	r.progress.report(jobs.ProgressReport{Fraction: 0.9, Message: "nearly", At: time.Now()})
	progress, seqs = pendingProgress([]*beat{b})         // the next renewal is sent...
	_, carried := r.progress.carry(context.Background()) // ...the handler returns, its completion carries the report...
	carried()
	done := *r.job
	done.State = jobs.StateSucceeded
	ended := r.progress.ended(&done) // ...and the attempt ends before the renewal's reply
	w.progressWritten(b, progress[r.lease], seqs[b])
	require.EqualValues(t, 1, obs.n.Load(), "a progress event after the attempt's end")
	require.Equal(t, "nearly", ended.Progress.Message, "the job as its attempt left it")
}

// TestFinishingWriteCarriesTheReportAfterARenewalThatMayLandLate: a
// renewal carrying a report fails with its outcome unknown (its reply
// lost, or given up while the server still works on it); the next renewal
// writes a newer report. The first one may still be applied after it,
// putting the older report back, so the write that finishes the job must
// carry the latest report although a renewal wrote it; before, it carried
// nothing and the finished job could keep the older report.
func TestFinishingWriteCarriesTheReportAfterARenewalThatMayLandLate(t *testing.T) {
	w := &Worker{obs: NopObserver{}}
	r := &run{job: &jobs.Job{ID: "j", State: jobs.StateRunning}, lease: store.Lease{JobID: "j", Token: "t"}}
	b := &beat{r: r}

	r.progress.report(jobs.ProgressReport{Fraction: 0.2, Message: "early", At: time.Now()})
	_, _ = pendingProgress([]*beat{b}) // the renewal carrying it fails, outcome unknown
	r.progress.mayLandLate()

	r.progress.report(jobs.ProgressReport{Fraction: 0.9, Message: "late", At: time.Now()})
	progress, seqs := pendingProgress([]*beat{b})
	w.progressWritten(b, progress[r.lease], seqs[b]) // the next renewal wrote it

	ctx := context.Background()
	carrying, _ := r.progress.carry(ctx)
	require.NotEqual(t, ctx, carrying, "the finishing write carries no report, and the older one may be put back")
}
