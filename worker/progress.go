package worker

import (
	"context"
	"sync"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
)

// ProgressObserver is an Observer that is also told of the progress the
// worker's lease renewals write (jobs.Progress). The worker calls it when
// its Config.Observer implements it.
type ProgressObserver interface {
	// Progressed follows a renewal that wrote the progress of job, a copy
	// whose Progress is the value written.
	Progressed(job *jobs.Job)
}

// progressBox holds the latest progress a job's handler reported, until a
// renewal of its lease writes it: reports between two renewals coalesce,
// the last one wins.
type progressBox struct {
	mu      sync.Mutex
	latest  jobs.ProgressReport
	seq     uint64               // reports made
	written uint64               // the seq of the last one written
	stored  *jobs.ProgressReport // the last one written
	over    bool                 // the attempt ended (ended was called)
	// late is set once a renewal carrying a report failed with its outcome
	// unknown: the server may still apply it, after a later renewal wrote
	// a newer report, and put the older one back.
	late bool
}

// report records p as the latest report.
func (b *progressBox) report(p jobs.ProgressReport) {
	b.mu.Lock()
	b.latest = p
	b.seq++
	b.mu.Unlock()
}

// pending returns the latest report when it is not yet written, with its
// seq for wrote.
func (b *progressBox) pending() (jobs.ProgressReport, uint64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.latest, b.seq, b.seq > b.written
}

// wrote records that p, the report of seq, was written, and runs tell
// (when not nil) unless the attempt has ended (see progressWritten), under
// b's lock, so that ended waits for it.
func (b *progressBox) wrote(p jobs.ProgressReport, seq uint64, tell func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if seq > b.written {
		b.written, b.stored = seq, &p
	}
	if tell != nil && !b.over {
		tell()
	}
}

// mayLandLate records that a renewal carrying a report failed with its
// outcome unknown (see late).
func (b *progressBox) mayLandLate() {
	b.mu.Lock()
	b.late = true
	b.mu.Unlock()
}

// carry returns ctx for the write that ends the attempt, carrying the
// latest report no renewal wrote, or, when a renewal may have landed late
// (mayLandLate), the latest report at all (store.WithProgress), which that
// write stores if it finishes the job; carried records, once the write
// succeeded, that it was written.
func (b *progressBox) carry(ctx context.Context) (_ context.Context, carried func()) {
	b.mu.Lock()
	p, seq, ok := b.latest, b.seq, b.seq > b.written || b.late && b.seq > 0
	b.mu.Unlock()
	if !ok {
		return ctx, func() {}
	}
	return store.WithProgress(ctx, p), func() { b.wrote(p, seq, nil) }
}

// ended returns j, a copy of the job as its attempt left it, with the
// progress the job keeps: the last one written when the attempt finished
// it, none otherwise (a job given back loses its progress). From then on
// no renewal's progress is told of.
func (b *progressBox) ended(j *jobs.Job) *jobs.Job {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.over = true
	if j.State.Finished() && b.stored != nil {
		p := *b.stored
		j.Progress = &p
	}
	return j
}

// pendingProgress returns the progress of part's jobs not yet written, by
// lease, and each one's seq; nil when none is pending.
func pendingProgress(part []*beat) (map[store.Lease]jobs.ProgressReport, map[*beat]uint64) {
	var progress map[store.Lease]jobs.ProgressReport
	var seqs map[*beat]uint64
	for _, b := range part {
		p, seq, ok := b.r.progress.pending()
		if !ok {
			continue
		}
		if progress == nil {
			progress, seqs = map[store.Lease]jobs.ProgressReport{}, map[*beat]uint64{}
		}
		progress[b.r.lease], seqs[b] = p, seq
	}
	return progress, seqs
}

// progressWritten notes that b's renewal wrote p (of seq) and tells the
// observer, unless the attempt has ended meanwhile: its Finished came
// first, and a subscriber must not hear of the job running after it.
func (w *Worker) progressWritten(b *beat, p jobs.ProgressReport, seq uint64) {
	var tell func()
	if o, ok := w.obs.(ProgressObserver); ok {
		tell = func() {
			j := *b.r.job
			j.Progress = &p
			o.Progressed(&j)
		}
	}
	b.r.progress.wrote(p, seq, tell)
}

// Progressed implements ProgressObserver: it tells those of m that
// implement it.
func (m multiObserver) Progressed(job *jobs.Job) {
	for _, o := range m {
		if p, ok := o.(ProgressObserver); ok {
			p.Progressed(job)
		}
	}
}

// reportProgress returns the function r's handler reports progress to.
func (w *Worker) reportProgress(r *run) func(jobs.ProgressReport) {
	return func(p jobs.ProgressReport) {
		w.progressReports.Add(1)
		r.progress.report(p)
	}
}
