package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// InsertOpts are the options of one enqueued job. The zero value enqueues
// to the default queue, priority 0, runnable now, with the default number
// of attempts and no unique key.
type InsertOpts struct {
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
	// job that holds the same key instead of adding a second one.
	UniqueKey string
}

// Insert is one job to enqueue.
type Insert struct {
	// Kind names the job's handler.
	Kind string
	// Args is the handler's input: anything that encodes to a BSON
	// document (a struct, a map, bson.D, bson.Raw). Nil means {}.
	Args any
	// Opts are the job's options.
	Opts InsertOpts
}

// Result says what an enqueue did for one job.
type Result struct {
	// ID is the id of the job enqueued, or of the unfinished job that
	// already held the unique key.
	ID string
	// Duplicate is true when the unique key was held and no job was added.
	Duplicate bool
}

// ValidationError says which field of an enqueued job is invalid.
type ValidationError struct {
	// Index is the job's position in an EnqueueMany call (0 for Enqueue).
	Index int
	// Field names the invalid field.
	Field string
	// Reason says what is wrong with it.
	Reason string
}

// Error implements error.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("queue: job %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Enqueue adds one job.
func (c *Client) Enqueue(ctx context.Context, kind string, args any, opts InsertOpts) (Result, error) {
	res, err := c.EnqueueMany(ctx, []Insert{{Kind: kind, Args: args, Opts: opts}})
	if err != nil {
		return Result{}, err
	}
	return res[0], nil
}

// EnqueueMany adds jobs with one unordered insert. The first enqueue of a
// Client also ensures the jobs indexes (see EnsureIndexes). Every job is validated
// before anything is written; one invalid job fails the call with a
// *ValidationError and writes nothing. Results are in the order of ins.
func (c *Client) EnqueueMany(ctx context.Context, ins []Insert) ([]Result, error) {
	if len(ins) == 0 {
		return nil, nil
	}
	docs := make([]any, len(ins))
	results := make([]Result, len(ins))
	t := now()
	for i, in := range ins {
		j, err := NewJob(in, t)
		if err != nil {
			var ve *ValidationError
			if errors.As(err, &ve) {
				ve.Index = i
			}
			return nil, err
		}
		docs[i] = j
		results[i].ID = j.ID
	}
	if err := c.ensureIndexes(ctx); err != nil {
		// Unique keys rely on the index: without it, two enqueues of one
		// key would make two jobs. Other jobs only lose the claim's speed.
		for _, d := range docs {
			if d.(*jobs.Job).UniqueKey != "" {
				return nil, fmt.Errorf("queue: enqueue %d jobs: the unique key index is missing: %w", len(ins), err)
			}
		}
		c.log.Warn("enqueue without the jobs indexes: creating them failed; the next enqueue tries again", zap.Error(err))
	}
	_, err := c.coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if err == nil {
		return results, nil
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil {
		return nil, fmt.Errorf("queue: enqueue %d jobs: %w", len(ins), err)
	}
	for _, we := range bwe.WriteErrors {
		j := docs[we.Index].(*jobs.Job)
		if we.Code != 11000 || j.UniqueKey == "" {
			return nil, fmt.Errorf("queue: enqueue job %d (%s): %w", we.Index, j.Kind, we)
		}
		r, err := c.insertUnique(ctx, j)
		if err != nil {
			return nil, err
		}
		results[we.Index] = r
	}
	return results, nil
}

// insertUnique settles a job whose unique key was taken: it returns the
// holder's id, or inserts the job if the holder finished in the meantime.
func (c *Client) insertUnique(ctx context.Context, j *jobs.Job) (Result, error) {
	for range 5 {
		var holder struct {
			ID string `bson:"_id"`
		}
		err := c.coll.FindOne(ctx, bson.D{{Key: "uniqueKey", Value: j.UniqueKey}},
			options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Decode(&holder)
		if err == nil {
			return Result{ID: holder.ID, Duplicate: true}, nil
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return Result{}, fmt.Errorf("queue: look up unique key %q: %w", j.UniqueKey, err)
		}
		_, err = c.coll.InsertOne(ctx, j)
		if err == nil {
			return Result{ID: j.ID}, nil
		}
		if !mongo.IsDuplicateKeyError(err) {
			return Result{}, fmt.Errorf("queue: enqueue %s with unique key %q: %w", j.Kind, j.UniqueKey, err)
		}
	}
	return Result{}, fmt.Errorf("queue: unique key %q: held and released repeatedly, giving up", j.UniqueKey)
}

// NewJob validates in and returns the document Enqueue would insert for it,
// created at t. Errors are *ValidationError.
func NewJob(in Insert, t time.Time) (*jobs.Job, error) {
	invalid := func(field, format string, a ...any) error {
		return &ValidationError{Field: field, Reason: fmt.Sprintf(format, a...)}
	}
	if in.Kind == "" {
		return nil, invalid("kind", "must not be empty")
	}
	args, err := encodeArgs(in.Args)
	if err != nil {
		return nil, invalid("args", "%v", err)
	}
	o := in.Opts
	if o.Delay < 0 {
		return nil, invalid("delay", "%s must not be negative", o.Delay)
	}
	if o.MaxAttempts < 0 {
		return nil, invalid("maxAttempts", "%d must not be negative", o.MaxAttempts)
	}
	if o.Queue == "" {
		o.Queue = jobs.DefaultQueue
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = jobs.DefaultMaxAttempts
	}
	runAt := o.RunAt.UTC().Truncate(time.Millisecond)
	if o.RunAt.IsZero() {
		runAt = t.Add(o.Delay)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("queue: new job id: %w", err)
	}
	return &jobs.Job{
		ID:          id.String(),
		Kind:        in.Kind,
		Queue:       o.Queue,
		Args:        args,
		State:       jobs.StateAvailable,
		Priority:    o.Priority,
		RunAt:       runAt,
		MaxAttempts: o.MaxAttempts,
		Errors:      []jobs.AttemptError{},
		UniqueKey:   o.UniqueKey,
		CreatedAt:   t,
		UpdatedAt:   t,
	}, nil
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
