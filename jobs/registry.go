package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// DefaultTimeout bounds one attempt of a job whose kind sets no timeout.
const DefaultTimeout = time.Minute

// Handler runs one attempt of a job. A nil error completes the job; a
// [PermanentError] sends it to the dead state; [Snooze] runs it again
// later and [Cancel] ends it cancelled; any other error retries it with
// backoff. The context is cancelled when the job times out, is cancelled,
// its lease is lost or the worker stops; context.Cause says which
// (worker.ErrTimeout, [ErrCancelled], [ErrLeaseLost], worker.ErrShutdown).
type Handler interface {
	Work(ctx context.Context, job *Job) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, job *Job) error

// Work calls f.
func (f HandlerFunc) Work(ctx context.Context, job *Job) error { return f(ctx, job) }

// Middleware wraps a handler: it runs around every attempt of every kind
// (logging, tracing, recovering panics its own way), calling next.Work to
// run the attempt, and returns the attempt's error. Middleware listed
// first runs outermost.
type Middleware func(next Handler) Handler

// Wrap returns h wrapped in mw, mw[0] outermost.
func Wrap(h Handler, mw ...Middleware) Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// Args is implemented by typed job args: Kind names the handler they are for.
type Args interface {
	Kind() string
}

// Validator is implemented by args that can check themselves. An error from
// Validate is permanent: the job goes to the dead state with it.
type Validator interface {
	Validate() error
}

// KindOptions tune how one kind runs where its handler is registered.
// A zero field means the default, for every field.
//
// What an insert of the kind takes when its options leave a field zero
// (queue, priority, attempts) is not here: it must be the same in every
// process, one that inserts without the handler too, so it comes from the
// args type alone, through its InsertOpts() method (see
// docket.ArgsWithInsertOpts). MaxAttempts, Queue and Priority remain only
// so that code that set them fails with that message: Registry.Add
// refuses them unless zero, and docket.AddHandler unless the args type
// declares the same value.
type KindOptions struct {
	// Timeout bounds each attempt. Defaults to DefaultTimeout.
	Timeout time.Duration
	// Deprecated: an insert default; declare it with the args type's
	// InsertOpts() (docket.ArgsWithInsertOpts) and leave it zero here.
	MaxAttempts int
	// Deprecated: an insert default; declare it with the args type's
	// InsertOpts() (docket.ArgsWithInsertOpts) and leave it zero here.
	Queue string
	// Deprecated: an insert default; declare it with the args type's
	// InsertOpts() (docket.ArgsWithInsertOpts) and leave it zero here.
	Priority int
}

// insertDefaults lists the insert defaults o sets, as "Field value"
// pairs, in the order Queue, Priority, MaxAttempts.
func (o KindOptions) insertDefaults() []string {
	var set []string
	if o.Queue != "" {
		set = append(set, fmt.Sprintf("Queue %q", o.Queue))
	}
	if o.Priority != 0 {
		set = append(set, fmt.Sprintf("Priority %d", o.Priority))
	}
	if o.MaxAttempts != 0 {
		set = append(set, fmt.Sprintf("MaxAttempts %d", o.MaxAttempts))
	}
	return set
}

type entry struct {
	handler Handler
	opts    KindOptions
}

// Registry maps job kinds to handlers. It is safe for concurrent use;
// registering a kind twice is an error.
type Registry struct {
	mu     sync.RWMutex
	kinds  map[string]entry
	sealed string // why Add is refused, once Seal was called
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{kinds: map[string]entry{}}
}

// Add registers h for kind.
func (r *Registry) Add(kind string, h Handler, opts KindOptions) error {
	if kind == "" {
		return errors.New("jobs: register: kind must not be empty")
	}
	if h == nil {
		return fmt.Errorf("jobs: register %q: handler must not be nil", kind)
	}
	if opts.Timeout < 0 {
		return fmt.Errorf("jobs: register %q: timeout %s must not be negative", kind, opts.Timeout)
	}
	if set := opts.insertDefaults(); len(set) > 0 {
		return fmt.Errorf("jobs: register %q: KindOptions %s: an insert default applies only where this handler is registered, so a process without it would insert the kind otherwise: declare it with the args type's InsertOpts() (docket.ArgsWithInsertOpts) and leave it zero here",
			kind, strings.Join(set, ", "))
	}
	opts.Timeout = cmp.Or(opts.Timeout, DefaultTimeout)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sealed != "" {
		return fmt.Errorf("jobs: register %q: %s", kind, r.sealed)
	}
	if _, dup := r.kinds[kind]; dup {
		return fmt.Errorf("jobs: register %q: kind is already registered", kind)
	}
	r.kinds[kind] = entry{handler: h, opts: opts}
	return nil
}

// Seal makes every later Add fail with reason: a pool takes the kinds
// registered when it starts, so a handler added after would never run.
func (r *Registry) Seal(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sealed = reason
}

// Lookup returns the handler for kind and its options.
func (r *Registry) Lookup(kind string) (Handler, KindOptions, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.kinds[kind]
	return e.handler, e.opts, ok
}

// Kinds returns the registered kinds, sorted.
func (r *Registry) Kinds() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.kinds))
	for k := range r.kinds {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Register adds a typed handler: the job's args are decoded into a T (and
// validated when T is a [Validator]) before fn runs. Args that do not decode
// or validate fail the job permanently. A program registers with
// docket.AddHandler, which calls it and also checks the kind's insert
// defaults.
func Register[T Args](r *Registry, fn func(ctx context.Context, job *Job, args T) error, opts KindOptions) error {
	var zero T
	kind := zero.Kind()
	return r.Add(kind, HandlerFunc(func(ctx context.Context, job *Job) error {
		args, err := DecodeArgs[T](job.Args)
		if err != nil {
			return err
		}
		return fn(ctx, job, args)
	}), opts)
}

// DecodeArgs decodes raw into a T and validates it. Every error it returns
// is permanent and names what is wrong.
func DecodeArgs[T any](raw bson.Raw) (T, error) {
	var args T
	if len(raw) == 0 {
		raw = emptyDoc
	}
	// Unmarshal can loop forever on malformed bytes (found by fuzzing);
	// a server never returns such a document, but a caller might pass one.
	if err := raw.Validate(); err != nil {
		return args, Permanent(&ArgsError{Reason: "not a valid BSON document: " + err.Error()})
	}
	if err := bson.Unmarshal(raw, &args); err != nil {
		return args, Permanent(&ArgsError{Reason: err.Error()})
	}
	if v, ok := any(&args).(Validator); ok {
		if err := v.Validate(); err != nil {
			if IsPermanent(err) {
				return args, err
			}
			return args, Permanent(err)
		}
	}
	return args, nil
}

var emptyDoc = bson.Raw{5, 0, 0, 0, 0}
