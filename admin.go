package docket

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
)

// The operator's verbs: list, read, retry, cancel, delete and purge jobs;
// pause, resume, bound and list queues; limit how many jobs run; list the
// worker processes. They act on the jobs collection whoever inserted the
// jobs, and a client need not be started to call them. None ever touches
// a running job's lease: its worker holds it.

// JobFilter selects jobs by JobIDs, States, Kinds, Queues and a range of
// creation times (CreatedAfter, CreatedBefore); empty fields select
// everything (see queue.JobFilter). JobRetry and JobDelete refuse an empty
// one.
type JobFilter = queue.JobFilter

// JobSummary is a job as JobList lists it (see queue.JobSummary).
type JobSummary = queue.JobSummary

// JobActionResult is what JobRetry or JobDelete did to one job: Err says
// why the job was left alone, nil when the action was done.
type JobActionResult = queue.ActionResult

// Why JobRetry or JobDelete left a job alone (JobActionResult.Err), and why
// JobGet or JobCancel found nothing to act on.
var (
	// ErrJobNotFound: no job has the id.
	ErrJobNotFound = queue.ErrNotFound
	// ErrJobRunning: the job is running; its worker holds it.
	ErrJobRunning = queue.ErrJobRunning
	// ErrJobNotFinished: JobDelete without Force met an unfinished job.
	ErrJobNotFinished = queue.ErrNotFinished
	// ErrJobFinished: JobCancel met a job that has already finished.
	ErrJobFinished = queue.ErrFinished
	// ErrUniqueKeyHeld: JobRetry met a finished job whose unique key an
	// unfinished job now holds; retrying it would make two.
	ErrUniqueKeyHeld = queue.ErrUniqueKeyHeld
	// ErrHasDependents: JobDelete met a job that others wait for, or
	// JobRetry a succeeded one they waited for (docs/WORKFLOWS.md).
	ErrHasDependents = queue.ErrHasDependents
	// ErrWaitingForParents: JobRetry met a blocked job; it runs when its
	// parents have succeeded.
	ErrWaitingForParents = queue.ErrWaitingForParents
	// ErrWorkflowGate: JobRetry met a workflow's gate; insert the
	// workflow again under a new id.
	ErrWorkflowGate = queue.ErrWorkflowGate
	// ErrUnknownState: JobCancel or JobRetry met a job whose state, written
	// by another application, is none docket knows.
	ErrUnknownState = queue.ErrUnknownState
	// ErrStateChanged: JobRetry found the job's state changed
	// by another process between reading and acting on it; it was left
	// alone, and the action may be asked again.
	ErrStateChanged = queue.ErrStateChanged
)

// DefaultJobListLimit is how many jobs JobList returns when
// JobListParams.Limit is zero.
const DefaultJobListLimit = 100

// MaxJobListLimit is the most jobs one JobList returns.
const MaxJobListLimit = 10_000

// JobListParams say which jobs JobList returns (River's JobListParams).
type JobListParams struct {
	// JobFilter selects the jobs. Defaults to every job.
	JobFilter
	// After is the cursor of the previous page (JobListResult.Next): the
	// list starts after it. Defaults to the start.
	After string
	// Limit is the most jobs returned. Defaults to DefaultJobListLimit; at
	// most MaxJobListLimit.
	Limit int
}

// JobListResult is one page of JobList.
type JobListResult struct {
	// Jobs are in id order.
	Jobs []JobSummary
	// Next is the After of the next page; "" when this one is the last.
	Next string
}

// JobList returns a page of the jobs params select, in id order; nil
// params list every job, DefaultJobListLimit at a time.
func (c *Client) JobList(ctx context.Context, params *JobListParams) (*JobListResult, error) {
	var p JobListParams
	if params != nil {
		p = *params
	}
	switch {
	case p.Limit == 0:
		p.Limit = DefaultJobListLimit
	case p.Limit < 0 || p.Limit > MaxJobListLimit:
		return nil, fmt.Errorf("docket: JobList: limit %d must be from 1 to %d", p.Limit, MaxJobListLimit)
	}
	list, more, err := c.q.List(ctx, p.JobFilter, p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("docket: %w", err)
	}
	res := &JobListResult{Jobs: list}
	if more && len(list) > 0 {
		res.Next = list[len(list)-1].JobID.Token()
	}
	return res, nil
}

// JobGet returns the job with id; the error wraps ErrJobNotFound when
// there is none, or id is the zero JobID. A job another application wrote
// with an _id that is not a string has the stored id's String as its ID,
// a display form only (a string id may be the same text): act on the job
// by JobIDOf(job), which is its stored id.
func (c *Client) JobGet(ctx context.Context, id JobID) (*jobs.Job, error) {
	return fromEngine(c.q.GetJobID(ctx, id))
}

// JobRetryParams say which jobs JobRetry makes available again.
type JobRetryParams struct {
	// JobFilter selects the jobs; it must select something (set JobIDs,
	// States, Kinds, Queues or a creation time).
	JobFilter
}

// JobRetry makes the jobs params select available now, their attempts
// reset, their past errors kept and an earlier success's result cleared
// (Results): dead, cancelled and succeeded jobs run
// again, an available one runs now. It returns what it did to each job: a
// running job is left alone (ErrJobRunning), as is a finished one whose
// unique key an unfinished job now holds (ErrUniqueKeyHeld), or one of a
// full bounded queue (ErrQueueFull).
func (c *Client) JobRetry(ctx context.Context, params *JobRetryParams) ([]JobActionResult, error) {
	if params == nil || isEmptyFilter(params.JobFilter) {
		return nil, errors.New("docket: JobRetry: the filter selects every job; name the jobs (JobIDs) or narrow it (States, Kinds, Queues, a creation time)")
	}
	res, err := c.q.Retry(ctx, params.JobFilter)
	return res, engineErr(err)
}

// JobDeleteParams say which jobs JobDelete removes.
type JobDeleteParams struct {
	// JobFilter selects the jobs; it must select something.
	JobFilter
	// Force deletes the available jobs selected too; without it only
	// finished jobs are deleted, the others left with ErrJobNotFinished. A
	// running job is never deleted.
	Force bool
}

// JobDelete removes the finished jobs params select (and with Force the
// available ones), and returns what it did to each job.
func (c *Client) JobDelete(ctx context.Context, params *JobDeleteParams) ([]JobActionResult, error) {
	if params == nil || isEmptyFilter(params.JobFilter) {
		return nil, errors.New("docket: JobDelete: the filter selects every job; name the jobs (JobIDs) or narrow it (States, Kinds, Queues, a creation time)")
	}
	res, err := c.q.Delete(ctx, params.JobFilter, params.Force)
	return res, engineErr(err)
}

func isEmptyFilter(f JobFilter) bool {
	return len(f.JobIDs) == 0 && len(f.States) == 0 && len(f.Kinds) == 0 &&
		len(f.Queues) == 0 && f.CreatedAfter.IsZero() && f.CreatedBefore.IsZero()
}

// JobCancelResult says what JobCancel did.
type JobCancelResult = queue.CancelOutcome

// The results of JobCancel.
const (
	// JobCancelled: the job was waiting and is now cancelled.
	JobCancelled = queue.Cancelled
	// JobCancelRequested: the job is running; its handler's context is
	// cancelled at its next heartbeat (cause jobs.ErrCancelled) and the job
	// ends cancelled.
	JobCancelRequested = queue.CancelRequested
)

// JobCancel stops the job with id: a waiting job is cancelled at once, a
// running one is asked to stop. The error wraps ErrJobFinished when it has
// already finished, ErrJobNotFound when there is no such job.
func (c *Client) JobCancel(ctx context.Context, id JobID) (JobCancelResult, error) {
	out, err := c.q.CancelJobID(ctx, id)
	return out, engineErr(err)
}

// JobPurgeParams say which finished jobs JobPurge deletes.
type JobPurgeParams struct {
	// State is the finished state of the jobs: succeeded, cancelled or
	// dead. Required.
	State jobs.State
	// OlderThan is how long ago they must have finished. Defaults to 0:
	// every job of State.
	OlderThan time.Duration
}

// JobPurge deletes the jobs that finished in params.State more than
// params.OlderThan ago, and returns how many.
func (c *Client) JobPurge(ctx context.Context, params *JobPurgeParams) (int64, error) {
	if params == nil {
		return 0, errors.New("docket: JobPurge: params must name a finished state")
	}
	n, err := c.q.Purge(ctx, params.State, params.OlderThan)
	return n, engineErr(err)
}

// QueuePauseOpts are the options of QueuePause and QueueResume.
type QueuePauseOpts struct {
	// By records who paused or resumed the queue. Defaults to none.
	By string
}

// QueuePause stops every worker process claiming from the queue name
// within a second; running jobs finish, waiting ones wait. It reports
// whether the queue was running until now.
func (c *Client) QueuePause(ctx context.Context, name string, opts *QueuePauseOpts) (bool, error) {
	return fromEngine(c.q.Pause(ctx, name, by(opts)))
}

// QueueResume lets workers claim from the queue name again. It reports
// whether the queue was paused until now.
func (c *Client) QueueResume(ctx context.Context, name string, opts *QueuePauseOpts) (bool, error) {
	return fromEngine(c.q.Resume(ctx, name, by(opts)))
}

// by is who the options o say acts: their By, none for nil options. The
// Opts types are one shape each for their verbs' docs.
func by[O ~struct{ By string }](o *O) string {
	if o == nil {
		return ""
	}
	return struct{ By string }(*o).By
}

// QueueInfo is one queue as QueueList shows it.
type QueueInfo struct {
	// Name is the queue's name.
	Name string
	// Counts maps kind, then state, to how many of the queue's jobs there
	// are.
	Counts map[string]map[jobs.State]int64
	// OldestAvailable is when the queue's longest-waiting runnable job
	// became due; zero when none waits.
	OldestAvailable time.Time
	// Paused reports whether the queue is paused (QueuePause).
	Paused bool
	// Capacity is the queue's capacity (QueueSetCapacity): 0 when it is
	// unbounded, CapacityClosed when it admits nothing.
	Capacity int
	// Occupied is how many of a bounded queue's jobs are unfinished, the
	// count its capacity is measured against.
	Occupied int
}

// QueueList returns every queue that has jobs, is paused or is bounded, in
// name order.
func (c *Client) QueueList(ctx context.Context) ([]QueueInfo, error) {
	stats, err := c.q.Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("docket: %w", err)
	}
	states, err := c.q.QueueStates(ctx)
	if err != nil {
		return nil, fmt.Errorf("docket: %w", err)
	}
	caps, err := c.q.QueueCapacities(ctx)
	if err != nil {
		return nil, fmt.Errorf("docket: %w", err)
	}
	by := map[string]*QueueInfo{}
	info := func(name string) *QueueInfo {
		if by[name] == nil {
			by[name] = &QueueInfo{Name: name, Counts: map[string]map[jobs.State]int64{}}
		}
		return by[name]
	}
	for _, s := range stats {
		i := info(s.Queue)
		i.Counts, i.OldestAvailable = s.Counts, s.OldestAvailable
	}
	for _, s := range states {
		info(s.Queue).Paused = s.Paused
	}
	for _, cp := range caps {
		if cp.Malformed != "" {
			continue
		}
		i := info(cp.Queue)
		i.Capacity, i.Occupied = cp.Capacity, cp.Occupied
		if cp.Capacity == 0 {
			i.Capacity = CapacityClosed
		}
	}
	out := make([]QueueInfo, 0, len(by))
	for _, i := range by {
		out = append(out, *i)
	}
	slices.SortFunc(out, func(a, b QueueInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// CapacityOpts are the options of QueueSetCapacity and QueueClearCapacity.
type CapacityOpts struct {
	// By records who set the capacity. Defaults to none.
	By string
}

// QueueSetCapacity bounds the queue name to n admitted, unfinished jobs:
// from 1 to 100,000, or CapacityClosed to refuse every insert
// (0 is refused, as in Config.Capacities). Past it an insert fails with
// ErrQueueFull. It applies at once to this client and within a second to
// every other; lowering it removes no job.
func (c *Client) QueueSetCapacity(ctx context.Context, name string, n int, opts *CapacityOpts) error {
	stored, err := capacityValue(n)
	if err != nil {
		return fmt.Errorf("docket: QueueSetCapacity %s: %w", name, err)
	}
	return engineErr(c.q.SetCapacity(ctx, name, stored, by(opts)))
}

// QueueClearCapacity makes the queue name unbounded again, and reports
// whether it had a capacity.
func (c *Client) QueueClearCapacity(ctx context.Context, name string, opts *CapacityOpts) (bool, error) {
	return fromEngine(c.q.ClearCapacity(ctx, name, by(opts)))
}

// LimitOpts are the options of LimitSet.
type LimitOpts struct {
	// By records who set the limit. Defaults to none.
	By string
}

// RunLimit is one stored concurrency limit as LimitList returns it (see
// queue.RunLimit): Limit is the stored number, 0 for LimitNone.
type RunLimit = queue.RunLimit

// LimitSet limits how many jobs of name (KindLimit(kind) or
// QueueLimit(queue)) run at once across every worker process: n from 1 to
// 10,000, or LimitNone to run none (0 is refused, as in
// Config.Limits). It applies within a second; lowering it stops no running
// job.
func (c *Client) LimitSet(ctx context.Context, name string, n int, opts *LimitOpts) error {
	stored, err := limitValue(n)
	if err != nil {
		return fmt.Errorf("docket: LimitSet %s: %w", name, err)
	}
	return engineErr(c.q.SetLimit(ctx, name, stored, by(opts)))
}

// LimitSetPartition limits how many jobs of name (KindLimit(kind) or
// QueueLimit(queue)) run at once per value of their args field p.By, to
// p.N, across every worker process, beside the limit's total (LimitSet),
// if any. It applies within a second.
func (c *Client) LimitSetPartition(ctx context.Context, name string, p PartitionLimit, opts *LimitOpts) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("docket: LimitSetPartition %s: %w", name, err)
	}
	return engineErr(c.q.SetPartitionLimit(ctx, name, p.By, p.N, by(opts)))
}

// LimitClearPartition removes the partition limit of name, leaving its
// total, and reports whether there was one.
func (c *Client) LimitClearPartition(ctx context.Context, name string) (bool, error) {
	return fromEngine(c.q.ClearPartitionLimit(ctx, name))
}

// LimitClear removes the limit name, its total and its partition limit,
// and reports whether there was one.
func (c *Client) LimitClear(ctx context.Context, name string) (bool, error) {
	return fromEngine(c.q.ClearLimit(ctx, name))
}

// LimitList returns every stored limit, in name order, with how many of its
// jobs run now.
func (c *Client) LimitList(ctx context.Context) ([]RunLimit, error) {
	return fromEngine(c.q.RunLimits(ctx))
}

// RateLimit is one stored rate limit as RateList returns it (see
// queue.RateLimit): its Rate, the starts reserved under it, how much of
// its burst is used now and when the next start is allowed.
type RateLimit = queue.RateLimit

// RateSet limits how many jobs of name (KindLimit(kind) or
// QueueLimit(queue)) start per period across every worker process, to r
// (see Rate, ParseRate). It applies within a second; jobs over the rate
// wait, their attempts not counted.
func (c *Client) RateSet(ctx context.Context, name string, r Rate, opts *LimitOpts) error {
	return engineErr(c.q.SetRate(ctx, name, r, by(opts)))
}

// RateClear removes the rate limit name, and reports whether there was
// one.
func (c *Client) RateClear(ctx context.Context, name string) (bool, error) {
	return fromEngine(c.q.ClearRate(ctx, name))
}

// RateList returns every stored rate limit, in name order.
func (c *Client) RateList(ctx context.Context) ([]RateLimit, error) {
	return fromEngine(c.q.RateLimits(ctx))
}

// ParentResult is the result of one parent of a job: its ID and what its
// handler set with jobs.SetResult (nil when it set none). Its Decode
// decodes it, a parent without a result being an error that wraps
// ErrNoResult.
type ParentResult = queue.ParentResult

// ErrNoResult is wrapped by ParentResult.Decode's error for a parent that
// set no result, or is no longer in the collection.
var ErrNoResult = queue.ErrNoResult

// ParentResults returns the results of job's parents, one per parent in
// the order of job.After, the workflow's gate of a workflow task left out
// (it is no task and has no result): a handler reads what the jobs it ran
// after passed on. See docs/WORKFLOWS.md.
func (c *Client) ParentResults(ctx context.Context, job *jobs.Job) ([]ParentResult, error) {
	return fromEngine(c.q.ParentResults(ctx, job))
}

// JobID is a job's _id, whatever its BSON type (another application may
// insert a number or an ObjectId): what JobGet, JobCancel and
// JobFilter.JobIDs take. InsertResult.JobID and StringJobID make one of a
// string id, JobSummary.JobID is a listed job's. Its String is the id for
// a person, in extended JSON when it is not a string; its Token names it
// in a URL or on a command line, and ParseJobID reads the token back.
type JobID = queue.JobID

// StringJobID is the JobID of the string id s, an id an application
// chose (InsertOpts.ID). For a jobs.Job use JobIDOf: its ID names another
// job when its own id is not a string.
func StringJobID(s string) JobID { return queue.StringJobID(s) }

// JobIDOf is the id of job as stored, of its type: what JobCancel and
// JobFilter.JobIDs take to act on the job JobGet returned, or on any
// other jobs.Job.
func JobIDOf(job *jobs.Job) JobID { return queue.JobIDOfJob(job) }

// ParseJobID reads a JobID.Token back as the same id, type included. A
// token that does not start with "@" is a string id; "" is the zero
// JobID, which names no job: JobGet and JobCancel find nothing by it and
// JobFilter.JobIDs skips it.
func ParseJobID(token string) (JobID, error) {
	id, err := queue.ParseJobID(token)
	if err != nil {
		return JobID{}, fmt.Errorf("docket: %w", err)
	}
	return id, nil
}

// CancelHook is a kind's side of a cancel: given the job's id and its args
// as stored, it stops what the job's work started (rolls a transfer back)
// before a cancel of an unfinished job of the kind is written. It may run
// more than once for one job, and after the job started or finished: it
// must be idempotent. An error wrapping ErrNotCancellable refuses the
// cancel (the work can no longer be stopped); any error leaves the job as
// it was and is what JobCancel returns.
type CancelHook = queue.CancelHook

// ErrNotCancellable, wrapped by a CancelHook's error, refuses a cancel.
var ErrNotCancellable = queue.ErrNotCancellable

// OnCancel makes JobCancel (and docketctl's and the dashboard's cancel,
// when they run with this hook registered) run hook before it cancels an
// unfinished job of kind, replacing the hook kind had; a nil hook removes
// it. Register it on every client that cancels jobs.
func (c *Client) OnCancel(kind string, hook CancelHook) { c.q.OnCancel(kind, hook) }

// WorkersParams say which worker processes Workers lists.
type WorkersParams struct {
	// All lists the processes that stopped beating too, not only the
	// live ones.
	All bool
	// TTL is how recently a process must have beaten to be alive.
	// Defaults to three of its own beat intervals.
	TTL time.Duration
}

// WorkerInfo is one worker process of the registry (its fields: see
// queue.WorkerInfo): every started Client, embedded or docket's worker
// command, registers.
type WorkerInfo = queue.WorkerInfo

// Workers lists the worker processes, in host and id order: the live ones,
// or with params.All every one seen within the last hour.
func (c *Client) Workers(ctx context.Context, params *WorkersParams) ([]WorkerInfo, error) {
	var p WorkersParams
	if params != nil {
		p = *params
	}
	return fromEngine(c.q.Workers(ctx, p.TTL, p.All))
}

// fromEngine is what an engine call returned, as the client returns it: on
// an error, T's zero value and the error said to come from docket.
func fromEngine[T any](v T, err error) (T, error) {
	if err != nil {
		var zero T
		return zero, engineErr(err)
	}
	return v, nil
}

// engineErr is an engine call's error, nil or said to come from docket.
func engineErr(err error) error {
	if err != nil {
		return fmt.Errorf("docket: %w", err)
	}
	return nil
}
