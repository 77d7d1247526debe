package queue

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// InsertOpts are the options of one enqueued job. The zero value enqueues
// to the default queue, priority 0, runnable now, with the default number
// of attempts, a new id and no unique key.
type InsertOpts struct {
	// ID is the job's id. Defaults to a new UUIDv7. A job whose id is
	// already in the collection is not added again (Result.Existed): give
	// every job an id of your own, or keep the ids of a failed enqueue
	// (Result.ID), and an enqueue can be retried after any error without
	// adding a job twice. At most jobs.MaxNameBytes of UTF-8.
	ID string
	// Queue is the queue to enqueue to. Defaults to jobs.DefaultQueue.
	Queue string
	// Priority orders claims, higher first. Defaults to 0.
	Priority int
	// RunAt is the earliest time the job may run. Defaults to now.
	RunAt time.Time
	// Delay, when RunAt is unset, makes the job runnable this long from now.
	Delay time.Duration
	// MaxAttempts is how many attempts the job gets. Defaults to
	// jobs.DefaultMaxAttempts.
	MaxAttempts int
	// UniqueKey, when set, makes the enqueue return the id of the unfinished
	// job that holds the same key instead of adding a second one
	// (Result.Duplicate).
	UniqueKey string
	// UniqueFor, when positive, makes UniqueKey hold for a period instead
	// of while the job is unfinished (River's ByPeriod): time is cut into
	// periods of this length (aligned on the Unix epoch, so an hour starts
	// on the hour, 24h at midnight UTC and a week on Thursday), and only
	// the first job with the key inserted in a period is added, finished
	// or not; the next period takes a new one, whatever the state of this
	// period's. The period is the one the inserting client's clock is in.
	// Exact across processes: the key and the period's start are one value
	// of a unique index. Requires UniqueKey.
	UniqueFor time.Duration
	// After holds the ids of jobs (its parents) this job waits for: it is
	// enqueued blocked, and runs once every one of them has succeeded. A
	// parent that ends dead or cancelled, or that is not in the
	// collection, cancels it, with why in its errors, unless
	// AfterRunAnyway. Parents enqueued in the same EnqueueMany are found.
	// At most MaxAfter ids. See docs/WORKFLOWS.md.
	After []string
	// AfterRunAnyway makes a job with After run once every parent has
	// finished, however it ended.
	AfterRunAnyway bool
	// Traceparent and Tracestate are the W3C Trace Context of the span
	// that inserts the job (jobs.Job.Traceparent): package docketotel sets
	// them. At most jobs.MaxTraceHeaderBytes of printable ASCII each.
	Traceparent, Tracestate string
}

// periodKeyLayout formats a period's start in a job's UniquePeriodKey:
// fixed width, so the key before it is never ambiguous.
const periodKeyLayout = "2006-01-02T15:04:05.000Z"

// Insert is one job to enqueue.
type Insert struct {
	// Kind names the job's handler.
	Kind string
	// Args is the handler's input: anything that encodes to a BSON
	// document (a struct, a map, bson.D, bson.Raw). Nil means {}. See
	// jobs.CheckArgs for what a document may not hold.
	Args any
	// Opts are the job's options.
	Opts InsertOpts
}

// Result says what an enqueue did for one job.
type Result struct {
	// ID is the id of the job enqueued, or of the unfinished job that
	// already held the unique key. After a failed enqueue it is the id to
	// enqueue the job again with (InsertOpts.ID).
	ID string
	// Duplicate is true when the unique key was held and no job was added:
	// ID is the holder's (its display form, in extended JSON, when another
	// application gave it an id that is not a string: act on it by JobID).
	Duplicate bool
	// ArgsDropped is true, with Duplicate, when the holder's args differ
	// from this insert's: the new args are in no job. False when they are
	// the same (nothing was lost), or when the holder could not be read.
	ArgsDropped bool
	// Existed is true when a job with this id was already in the
	// collection, so none was added: an earlier enqueue with the same
	// InsertOpts.ID, whose reply may have been lost, inserted it.
	Existed bool
	// Err is nil when the job is in the collection (or, Duplicate, the
	// holder of its key is). Only a failed EnqueueMany sets it: it then
	// wraps ErrNotInserted or ErrOutcomeUnknown.
	Err error
	// holder is the id of a Duplicate's holder as stored, when it is not
	// a string.
	holder JobID
}

// JobID is the job's id as stored, the id JobGet and JobCancel take: r.ID's,
// or a Duplicate's holder's of whatever type another application gave it
// (r.ID is then its display form).
func (r Result) JobID() JobID {
	if !r.holder.IsZero() {
		return r.holder
	}
	return StringJobID(r.ID)
}

// ErrNotInserted is the Result.Err of a job that a failed enqueue did not
// insert: the server refused it, the enqueue stopped before it, or it was
// not in the collection when looked up after the failure. Enqueue it again
// with the same id (Result.ID as InsertOpts.ID); should the failed insert
// still land late, the retry finds it there and adds nothing.
var ErrNotInserted = errors.New("not inserted")

// EnqueueError is the error of an EnqueueMany that failed after validation:
// some jobs are not known to be in the collection. The Results returned
// with it say, job by job, what is.
type EnqueueError struct {
	// Inserted, Existed and Duplicates count the jobs that are in the
	// collection (Result.Err nil): added by this call, there already, and
	// those whose unique key another job held.
	Inserted, Existed, Duplicates int
	// NotInserted and Unknown count the jobs whose Result.Err wraps
	// ErrNotInserted and ErrOutcomeUnknown, the refused ones aside.
	NotInserted, Unknown int
	// Refused counts the jobs refused because their queue was full
	// (Result.Err wraps ErrQueueFull and ErrNotInserted). When they are
	// the only jobs not inserted, Err is the first one's
	// *QueueFullError.
	Refused int
	// Err is what failed.
	Err error
}

// Error implements error.
func (e *EnqueueError) Error() string {
	total := e.Inserted + e.Existed + e.Duplicates + e.NotInserted + e.Unknown + e.Refused
	msg := fmt.Sprintf("queue: enqueue %d jobs: %d inserted, %d already there", total, e.Inserted, e.Existed)
	if e.Duplicates > 0 {
		msg += fmt.Sprintf(", %d unique key held", e.Duplicates)
	}
	if e.Refused > 0 {
		msg += fmt.Sprintf(", %d refused (queue full)", e.Refused)
	}
	msg += fmt.Sprintf(", %d not inserted", e.NotInserted)
	if e.Unknown > 0 {
		msg += fmt.Sprintf(", %d unknown", e.Unknown)
	}
	return msg + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *EnqueueError) Unwrap() error { return e.Err }

// ValidationError says which field of an enqueued job is invalid.
type ValidationError struct {
	// Index is the job's position in an EnqueueMany call (0 for Enqueue).
	Index int
	// Field names the invalid field; for args, the path in them
	// ("args.items[2].meta").
	Field string
	// Reason says what is wrong with it.
	Reason string
	// Err is the error Reason reports, when it comes from one (the args'
	// own Validate); nil otherwise.
	Err error
}

// Error implements error.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("queue: job %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Unwrap returns Err, so errors.Is and errors.As see the error of the
// args' Validate.
func (e *ValidationError) Unwrap() error { return e.Err }

// Limits of one insert command of EnqueueMany. Bounded commands keep the
// encoded command small (well under the server's 48 MB message), bound
// the time of each, and let other clients' commands run between them on a
// server that runs one command at a time (server.go in internal/store).
const (
	// ChunkJobs is the most jobs one insert command carries.
	ChunkJobs = 1000
	// ChunkBytes is the most bytes of args one insert command carries
	// (a single larger job goes alone).
	ChunkBytes = 4 << 20
)

// settleTimeout bounds the lookup that finds out, after an insert failed
// without an answer, which jobs are in the collection. It runs on a
// context of its own: the caller's may be what expired.
const settleTimeout = 10 * time.Second

// Enqueue adds one job. After an error the Result still carries the job's
// id: enqueue again with it as InsertOpts.ID to retry safely (see
// EnqueueMany). An insert whose reply was lost but that is found in the
// collection is a success. An enqueue to a bounded queue with no free
// capacity is refused with a *QueueFullError (errors.Is ErrQueueFull).
func (c *Client) Enqueue(ctx context.Context, kind string, args any, opts InsertOpts) (Result, error) {
	res, err := c.EnqueueMany(ctx, []Insert{{Kind: kind, Args: args, Opts: opts}})
	if len(res) == 0 {
		return Result{}, err
	}
	var full *QueueFullError
	if errors.As(res[0].Err, &full) {
		return res[0], full
	}
	return res[0], err
}

// EnqueueMany adds jobs with unordered inserts of at most ChunkJobs jobs
// and ChunkBytes of args each. The first enqueue of a Client also ensures
// the jobs indexes (see EnsureIndexes).
//
// Every job is validated before anything is written, the batch as a whole
// too (two jobs with one id): an invalid job fails the call with a
// *ValidationError naming its index and field, writes nothing and returns
// no Results.
//
// Otherwise the Results are in the order of ins, one per job, even with an
// error. An insert that fails without an answer (a timeout, a lost
// connection: the server may have applied it) is sent again on a context
// of its own, bounded by 10 s, and a job whose id is then found taken is
// there; if that gets no answer either, the jobs are looked up by id. So
// when every job ends up in the collection, the call succeeds. If not, it
// stops at that insert and returns a *EnqueueError with the Results: Err
// nil for each job in the collection, wrapping ErrNotInserted or
// ErrOutcomeUnknown for the others.
//
// When nothing can be sent (the queues' capacities cannot be read, or the
// indexes a unique key or a bounded queue needs cannot be set up), every
// Result wraps ErrNotInserted and keeps its id.
//
// Calling EnqueueMany again with the same ids (InsertOpts.ID = Result.ID)
// is always safe: a job already there is reported Existed and not added
// again. A job with a unique key is added at most once as well: its key or
// its id is found held.
//
// A job to a bounded queue (SetCapacity) is admitted on its own, holding a
// slot of the queue's capacity; when none is free it is refused: its
// Result.Err wraps ErrQueueFull (and ErrNotInserted), the other jobs are
// still enqueued, and the call returns a *EnqueueError counting it in
// Refused, whose Err is the *QueueFullError when nothing else failed.
func (c *Client) EnqueueMany(ctx context.Context, ins []Insert) ([]Result, error) {
	if len(ins) == 0 {
		return nil, nil
	}
	docs := make([]*jobs.Job, len(ins))
	own := make([]bool, len(ins))
	results := make([]Result, len(ins))
	ids := make(map[string]int, len(ins))
	t := c.now()
	for i, in := range ins {
		j, err := NewJob(in, t)
		if err != nil {
			var ve *ValidationError
			if errors.As(err, &ve) {
				ve.Index = i
			}
			return nil, err
		}
		if first, dup := ids[j.ID]; dup {
			return nil, &ValidationError{Index: i, Field: "id", Reason: fmt.Sprintf("%q is also the id of job %d", j.ID, first)}
		}
		ids[j.ID] = i
		docs[i] = j
		own[i] = in.Opts.ID != ""
		results[i].ID = j.ID
	}
	limits, err := c.capacityOf(ctx)
	if err != nil {
		// Admitting without knowing the limits would break them: nothing
		// is sent.
		return noneInserted(results, "reading the queues' capacities failed", err)
	}
	bounded := false
	for _, d := range docs {
		if _, ok := limits[d.Queue]; ok {
			bounded = true
		}
	}
	if err := c.indexesFor(ctx, docs, bounded); err != nil {
		return noneInserted(results, "setting up the jobs indexes failed", err)
	}
	if bounded {
		results, err = c.enqueueBounded(ctx, docs, own, results, limits)
	} else {
		results, err = c.enqueueChunks(ctx, docs, own, results)
	}
	c.linkInserted(ctx, docs, results)
	return results, err
}

// errStoppedEarlier is the Result.Err of a job not sent because an
// earlier one of the call failed.
var errStoppedEarlier = fmt.Errorf("%w: the enqueue stopped at an earlier failure", ErrNotInserted)

// noneInserted marks every result not inserted, because of err, and
// returns them with the *EnqueueError: the Results keep the ids to enqueue
// again with.
func noneInserted(results []Result, why string, err error) ([]Result, error) {
	for i := range results {
		results[i].Err = fmt.Errorf("%w: %s: %v", ErrNotInserted, why, err)
	}
	return results, enqueueError(results, err)
}

// indexesFor sets up the jobs indexes, and returns why docs cannot be
// enqueued without them. Unique keys and capacities rely on their
// indexes: without them, two enqueues of one key would make two jobs, and
// admission would not be exact. Other jobs only lose the claim's speed.
func (c *Client) indexesFor(ctx context.Context, docs []*jobs.Job, bounded bool) error {
	err := c.ensureIndexes(ctx)
	if err == nil {
		return nil
	}
	if bounded {
		return fmt.Errorf("the capacity index is missing: %w", err)
	}
	for _, d := range docs {
		if _, key := uniqueField(d); key != "" {
			return fmt.Errorf("the unique key index is missing: %w", err)
		}
	}
	c.log.Warn("enqueue without the jobs indexes: creating them failed; the next enqueue tries again", zap.Error(err))
	return nil
}

// enqueueBounded enqueues docs, some of which go to bounded queues: each
// of those is admitted on its own (admit), the others are inserted in
// chunks. A refused job does not stop the others; a failure does.
func (c *Client) enqueueBounded(ctx context.Context, docs []*jobs.Job, own []bool, results []Result, limits map[string]int) ([]Result, error) {
	var plain []int
	var failure error
	for i, d := range docs {
		capacity, ok := limits[d.Queue]
		if !ok {
			plain = append(plain, i)
			continue
		}
		if failure == nil {
			if failure = ctx.Err(); failure != nil {
				failure = fmt.Errorf("the enqueue stopped: %w", failure)
			}
		}
		if failure != nil {
			results[i].Err = errStoppedEarlier
			continue
		}
		results[i], failure = c.admit(ctx, d, capacity, own[i])
	}
	if len(plain) > 0 {
		pd, po, pr := make([]*jobs.Job, len(plain)), make([]bool, len(plain)), make([]Result, len(plain))
		for k, i := range plain {
			pd[k], po[k], pr[k] = docs[i], own[i], results[i]
		}
		if failure != nil {
			for k := range pr {
				pr[k].Err = errStoppedEarlier
			}
		} else if _, err := c.enqueueChunks(ctx, pd, po, pr); err != nil {
			var ee *EnqueueError
			if errors.As(err, &ee) {
				err = ee.Err
			}
			failure = err
		}
		for k, i := range plain {
			results[i] = pr[k]
		}
	}
	if failure != nil {
		return results, enqueueError(results, failure)
	}
	var full *QueueFullError
	for _, r := range results {
		if errors.As(r.Err, &full) {
			return results, enqueueError(results, full)
		}
	}
	return results, nil
}

// enqueueChunks inserts docs in chunks of at most ChunkJobs jobs and
// ChunkBytes of args, stopping at the first chunk that fails.
func (c *Client) enqueueChunks(ctx context.Context, docs []*jobs.Job, own []bool, results []Result) ([]Result, error) {
	for lo := 0; lo < len(docs); {
		hi, size := lo, 0
		for hi < len(docs) && hi-lo < ChunkJobs && (hi == lo || size+len(docs[hi].Args) <= ChunkBytes) {
			size += len(docs[hi].Args)
			hi++
		}
		if err := ctx.Err(); err != nil {
			// Nothing more is sent once the caller gave up.
			for i := lo; i < len(results); i++ {
				results[i].Err = fmt.Errorf("%w: the enqueue stopped: %w", ErrNotInserted, err)
			}
			return results, enqueueError(results, err)
		}
		if err := c.insertChunk(ctx, docs[lo:hi], own[lo:hi], results[lo:hi]); err != nil {
			for i := hi; i < len(results); i++ {
				results[i].Err = errStoppedEarlier
			}
			return results, enqueueError(results, err)
		}
		lo = hi
	}
	return results, nil
}

// enqueueError counts results into the error of a failed enqueue.
func enqueueError(results []Result, cause error) error {
	e := &EnqueueError{Err: cause}
	for _, r := range results {
		switch {
		case errors.Is(r.Err, ErrQueueFull):
			e.Refused++
		case errors.Is(r.Err, ErrOutcomeUnknown):
			e.Unknown++
		case r.Err != nil:
			e.NotInserted++
		case r.Duplicate:
			e.Duplicates++
		case r.Existed:
			e.Existed++
		default:
			e.Inserted++
		}
	}
	return e
}

// insertChunk inserts docs with one unordered insert and settles results,
// one per doc; own[i] is whether docs[i]'s id is the caller's. It returns
// an error when a doc is not known to be in the collection afterwards;
// each such result's Err says why. An insert that fails without an answer
// may have been applied in whole or in part: it is sent again (on a
// context of its own, settleTimeout), and a duplicate id then means the
// job is there; when that gets no answer either, the jobs are looked up.
func (c *Client) insertChunk(ctx context.Context, docs []*jobs.Job, own []bool, results []Result) error {
	err := c.insertOnce(ctx, docs)
	if err == nil {
		return nil
	}
	if bwe, ok := answered(err); ok {
		return c.settleAnswered(ctx, docs, own, results, bwe, false)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	again := c.insertOnce(sctx, docs)
	if again == nil {
		c.log.Warn("an insert failed without an answer; sent again, it inserted every job", zap.Int("jobs", len(docs)), zap.Error(err))
		return nil
	}
	if bwe, ok := answered(again); ok {
		c.log.Warn("an insert failed without an answer; sent again", zap.Int("jobs", len(docs)), zap.Error(err))
		if serr := c.settleAnswered(sctx, docs, own, results, bwe, true); serr != nil {
			return fmt.Errorf("%w; sent again: %w", err, serr)
		}
		return nil
	}
	return c.settleByLookup(sctx, docs, results, fmt.Errorf("%w; sent again: %v", err, again))
}

// insertOnce sends one unordered insert of docs.
func (c *Client) insertOnce(ctx context.Context, docs []*jobs.Job) error {
	batch := make([]any, len(docs))
	for i, d := range docs {
		batch[i] = insertDoc(ctx, d.ID, d) // a workflow's task carries its fields (workflow.go)
	}
	_, err := c.coll.InsertMany(ctx, batch, options.InsertMany().SetOrdered(false))
	if hook, ok := ctx.Value(insertHookKey{}).(func(error) error); ok {
		err = hook(err)
	}
	return err
}

// answered returns the write errors of an insert the server answered:
// every document without one was inserted.
func answered(err error) (mongo.BulkWriteException, bool) {
	var bwe mongo.BulkWriteException
	ok := errors.As(err, &bwe) && bwe.WriteConcernError == nil && len(bwe.WriteErrors) > 0
	return bwe, ok
}

// settleAnswered settles docs after an insert the server answered with
// write errors. A duplicate key means the job's id is there, or its
// unique key is held; after a lost reply (resent), a job found there may
// have been inserted by the lost insert: so it is when its id was made by
// this call, and when its createdAt is this call's.
func (c *Client) settleAnswered(ctx context.Context, docs []*jobs.Job, own []bool, results []Result, bwe mongo.BulkWriteException, resent bool) error {
	var failed error
	var ambiguous []int
	for _, we := range bwe.WriteErrors {
		i := we.Index
		if i < 0 || i >= len(docs) {
			return c.settleByLookup(ctx, docs, results, bwe)
		}
		j := docs[i]
		if we.Code != 11000 {
			results[i].Err = fmt.Errorf("%w: the server refused it: %w", ErrNotInserted, we)
			failed = cmp.Or(failed, fmt.Errorf("queue: enqueue job %s (%s): %w", j.ID, j.Kind, we))
			continue
		}
		r, err := c.settleHeld(ctx, j)
		if err != nil {
			results[i].ID = j.ID
			results[i].Err = fmt.Errorf("%w: %w", ErrNotInserted, err)
			failed = cmp.Or(failed, err)
			continue
		}
		if resent && r.Existed {
			if own[i] {
				ambiguous = append(ambiguous, i)
			} else {
				r.Existed = false // its id was made by this call
			}
		}
		results[i] = r
	}
	if len(ambiguous) > 0 {
		ids := make([]string, len(ambiguous))
		for k, i := range ambiguous {
			ids[k] = docs[i].ID
		}
		found, err := c.lookUp(ctx, ids)
		if err != nil {
			c.log.Warn("jobs found there after a lost reply: whether this enqueue or an earlier one inserted them is unknown; reported as already there",
				zap.Int("jobs", len(ids)), zap.Error(err))
		}
		for _, i := range ambiguous {
			if created, ok := found[docs[i].ID]; ok && created.Equal(docs[i].CreatedAt) {
				results[i].Existed = false
			}
		}
	}
	return failed
}

// settleHeld settles a job whose insert was refused as a duplicate key:
// its id is taken (an earlier enqueue of it), or its unique key is held.
func (c *Client) settleHeld(ctx context.Context, j *jobs.Job) (Result, error) {
	if _, key := uniqueField(j); key == "" {
		// The unique indexes a job without a key is in are _id and a
		// bounded queue's slot, which an enqueue that is not admitted
		// does not set.
		return Result{ID: j.ID, Existed: true}, nil
	}
	if r, there, err := c.existing(ctx, j); there || err != nil {
		return r, err
	}
	return c.insertUnique(ctx, j)
}

// existing reports whether a job with j's id is in the collection, with
// the Existed Result for it.
func (c *Client) existing(ctx context.Context, j *jobs.Job) (Result, bool, error) {
	err := c.coll.FindOne(ctx, bson.D{{Key: "_id", Value: j.ID}},
		options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err()
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return Result{}, false, fmt.Errorf("queue: look up job %s: %w", j.ID, err)
	}
	return Result{ID: j.ID, Existed: true}, err == nil, nil
}

// settleByLookup settles docs after inserts that failed without saying
// which documents they wrote, by looking them up by id. A doc found with
// this call's createdAt is Inserted, one found with another is Existed (an
// earlier enqueue of the same id). It returns nil when every doc is found.
func (c *Client) settleByLookup(ctx context.Context, docs []*jobs.Job, results []Result, cause error) error {
	ids := make([]string, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
	}
	found, err := c.lookUp(ctx, ids)
	if err != nil {
		for i := range results {
			results[i].Err = fmt.Errorf("%w: the insert failed (%v) and looking the job up failed too: %v", ErrOutcomeUnknown, cause, err)
		}
		return fmt.Errorf("%w; looking the jobs up failed too: %v", cause, err)
	}
	missing := 0
	for i, d := range docs {
		created, ok := found[d.ID]
		switch {
		case !ok:
			missing++
			results[i].Err = fmt.Errorf("%w: not in the collection after the insert failed: %v", ErrNotInserted, cause)
		case !created.Equal(d.CreatedAt):
			results[i].Existed = true
		}
	}
	if missing == 0 {
		c.log.Warn("inserts failed without an answer but every job is in the collection", zap.Int("jobs", len(docs)), zap.Error(cause))
		return nil
	}
	return cause
}

// lookUp returns the createdAt of each of ids that is in the collection
// (the zero time when it has none or another type).
func (c *Client) lookUp(ctx context.Context, ids []string) (map[string]time.Time, error) {
	cur, err := c.coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "createdAt", Value: 1}}))
	if err != nil {
		return nil, err
	}
	defer store.CloseCursor(ctx, cur)
	found := make(map[string]time.Time, len(ids))
	for cur.Next(ctx) {
		id, ok := cur.Current.Lookup("_id").StringValueOK()
		if !ok {
			continue
		}
		var created time.Time
		if dt, ok := cur.Current.Lookup("createdAt").DateTimeOK(); ok {
			created = time.UnixMilli(dt).UTC()
		}
		found[id] = created
	}
	return found, cur.Err()
}

// insertHookKey is the context key of a test's hook that runs after each
// insert command of EnqueueMany, given its error and returning the one
// EnqueueMany sees (export_inserts_test.go).
type insertHookKey struct{}

// insertUnique settles a job whose unique key was taken: it returns the
// holder's id, or inserts the job if the holder finished in the meantime.
// The holder may be the job itself, inserted by an earlier enqueue of its
// id, and so may a job with its id that finished: both are Existed.
func (c *Client) insertUnique(ctx context.Context, j *jobs.Job) (Result, error) {
	field, key := uniqueField(j)
	for range 5 {
		r, held, err := c.uniqueHolder(ctx, j)
		if err != nil {
			return Result{}, err
		}
		if held {
			return r, nil
		}
		_, err = c.coll.InsertOne(ctx, j)
		if err == nil {
			return Result{ID: j.ID}, nil
		}
		if !mongo.IsDuplicateKeyError(err) {
			return Result{}, fmt.Errorf("queue: enqueue %s with %s %q: %w", j.Kind, field, key, err)
		}
		if r, there, err := c.existing(ctx, j); there || err != nil {
			return r, err
		}
	}
	return Result{}, fmt.Errorf("queue: %s %q: held and released repeatedly, giving up", field, key)
}

// uniqueField names the unique index field that j's key is in, and its
// value there: uniquePeriodKey for a key held over a period, uniqueKey
// for one held while the job is unfinished; "" when j has no key.
func uniqueField(j *jobs.Job) (field, key string) {
	if j.UniquePeriodKey != "" {
		return "uniquePeriodKey", j.UniquePeriodKey
	}
	return "uniqueKey", j.UniqueKey
}

// uniqueHolder looks up the job that holds j's unique key: held is false
// when none does (it finished, or its period's job was deleted, since j's
// insert was refused). The Result of a holder that is j itself (an
// earlier enqueue of its id) is Existed; of another, Duplicate, with
// ArgsDropped when its args are not j's.
func (c *Client) uniqueHolder(ctx context.Context, j *jobs.Job) (r Result, held bool, err error) {
	field, key := uniqueField(j)
	// Read raw: another application may have written the holder with an
	// _id of any type, and args of any type.
	raw, err := c.coll.FindOne(ctx, bson.D{{Key: field, Value: key}},
		options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "args", Value: 1}})).Raw()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return Result{}, false, nil
	case err != nil:
		return Result{}, false, fmt.Errorf("queue: look up %s %q: %w", field, key, err)
	}
	holder := JobIDOf(raw)
	if holder.Equal(StringJobID(j.ID)) {
		return Result{ID: j.ID, Existed: true}, true, nil
	}
	args := raw.Lookup("args")
	dropped := args.Type != bson.TypeEmbeddedDocument || !bytes.Equal(args.Value, j.Args)
	r = Result{ID: holder.String(), Duplicate: true, ArgsDropped: dropped}
	if _, ok := holder.StringID(); !ok {
		r.holder = holder // r.ID is only its display form
	}
	return r, true, nil
}

// NewJob validates in and returns the document Enqueue would insert for it,
// created at t. Errors are *ValidationError.
func NewJob(in Insert, t time.Time) (*jobs.Job, error) {
	if p := store.NameProblem(in.Kind); p != "" {
		return nil, invalid("kind", "%s", p)
	}
	args, err := checkedArgs(in.Args)
	if err != nil {
		return nil, err
	}
	o := in.Opts
	if err := checkOpts(o); err != nil {
		return nil, err
	}
	o.Queue, o.MaxAttempts = cmp.Or(o.Queue, jobs.DefaultQueue), cmp.Or(o.MaxAttempts, jobs.DefaultMaxAttempts)
	runAt := o.RunAt.UTC().Truncate(time.Millisecond)
	if o.RunAt.IsZero() {
		runAt = t.Add(o.Delay)
	}
	id := o.ID
	if id == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("queue: new job id: %w", err)
		}
		id = u.String()
	}
	state := jobs.StateAvailable
	if len(o.After) > 0 {
		if slices.Contains(o.After, id) {
			return nil, invalid("after", "%q is the job's own id: a job cannot wait for itself", id)
		}
		state = jobs.StateBlocked
	}
	job := &jobs.Job{
		ID:          id,
		Kind:        in.Kind,
		Queue:       o.Queue,
		Args:        args,
		State:       state,
		After:       slices.Clone(o.After),
		WaitingOn:   slices.Clone(o.After),
		RunAnyway:   o.AfterRunAnyway,
		Linking:     len(o.After) > 0,
		Priority:    o.Priority,
		RunAt:       runAt,
		MaxAttempts: o.MaxAttempts,
		Errors:      []jobs.AttemptError{},
		UniqueKey:   o.UniqueKey,
		CreatedAt:   t,
		UpdatedAt:   t,
		Traceparent: jobs.TraceHeader(o.Traceparent),
		Tracestate:  jobs.TraceHeader(o.Tracestate),
	}
	if o.UniqueFor > 0 {
		start := periodStart(t.UTC(), o.UniqueFor)
		end := start.Add(o.UniqueFor)
		job.UniqueKey, job.UniquePeriodKey, job.UniqueUntil = "", o.UniqueKey+"@"+start.Format(periodKeyLayout), &end
	}
	return job, nil
}

// invalid is the *ValidationError of an insert's field.
func invalid(field, format string, a ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, a...)}
}

// checkedArgs encodes args and checks them as a job document holds them.
func checkedArgs(a any) (bson.Raw, error) {
	args, err := encodeArgs(a)
	if err != nil {
		return nil, invalid("args", "%v", err)
	}
	if err := jobs.CheckArgs(args); err != nil {
		var ae *jobs.ArgsError
		if errors.As(err, &ae) {
			field := "args"
			if ae.Field != "" {
				field += "." + ae.Field
			}
			return nil, invalid(field, "%s", ae.Reason)
		}
		return nil, invalid("args", "%v", err)
	}
	return args, nil
}

// checkOpts checks an insert's options, each field on its own.
func checkOpts(o InsertOpts) error {
	names := []struct {
		field, value string
		problem      func(string) string
	}{
		{"id", o.ID, func(v string) string { return jobs.NameProblem(v, jobs.MaxNameBytes) }},
		{"queue", o.Queue, store.NameProblem},
		{"uniqueKey", o.UniqueKey, func(v string) string { return jobs.NameProblem(v, jobs.MaxUniqueKeyBytes) }},
	}
	for _, n := range names {
		if n.value == "" {
			continue
		}
		if p := n.problem(n.value); p != "" {
			return invalid(n.field, "%s", p)
		}
	}
	switch {
	case o.UniqueFor < 0:
		return invalid("uniqueFor", "%s must not be negative", o.UniqueFor)
	case o.UniqueFor > 0 && o.UniqueFor < time.Millisecond:
		return invalid("uniqueFor", "%s is under the 1ms resolution of stored times", o.UniqueFor)
	case o.UniqueFor > 0 && o.UniqueKey == "":
		return invalid("uniqueFor", "needs a uniqueKey: it says how long the key holds")
	case o.Delay < 0:
		return invalid("delay", "%s must not be negative", o.Delay)
	case o.MaxAttempts < 0:
		return invalid("maxAttempts", "%d must not be negative", o.MaxAttempts)
	case o.AfterRunAnyway && len(o.After) == 0:
		return invalid("afterRunAnyway", "needs after: it says what to run after")
	}
	if field, problem := checkAfter(o.After, o.ID); problem != "" {
		return invalid(field, "%s", problem)
	}
	if field, problem := checkTrace(o); problem != "" {
		return invalid(field, "%s", problem)
	}
	return nil
}

// checkTrace names the trace header of o that a job cannot carry, and why.
func checkTrace(o InsertOpts) (field, problem string) {
	if p := jobs.TraceHeaderProblem(o.Traceparent); p != "" {
		return "traceparent", p
	}
	return "tracestate", jobs.TraceHeaderProblem(o.Tracestate)
}

// periodStart returns the start of the period of length d that holds t,
// periods being cut from the Unix epoch. time.Time.Truncate cuts from year 1,
// so t is shifted by how far the epoch lies past such a cut (less than d, so
// nothing overflows) and shifted back after.
func periodStart(t time.Time, d time.Duration) time.Time {
	epoch := time.Unix(0, 0).UTC()
	shift := epoch.Sub(epoch.Truncate(d))
	return t.Add(-shift).Truncate(d).Add(shift)
}

// encodeArgs turns args into a BSON document of at most jobs.MaxArgsBytes.
func encodeArgs(args any) (bson.Raw, error) {
	var raw bson.Raw
	switch a := args.(type) {
	case nil:
		return bson.Raw{5, 0, 0, 0, 0}, nil
	case bson.Raw:
		raw = a
		if err := raw.Validate(); err != nil {
			return nil, fmt.Errorf("not a valid BSON document: %w", err)
		}
	default:
		b, err := bson.Marshal(args)
		if err != nil {
			return nil, fmt.Errorf("must be a document (a struct, a map or bson.D), got %T: %w", args, err)
		}
		raw = b
	}
	if len(raw) > jobs.MaxArgsBytes {
		return nil, fmt.Errorf("%d bytes is over the %d-byte limit", len(raw), jobs.MaxArgsBytes)
	}
	return raw, nil
}
