package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.uber.org/zap"
)

// DefaultCollection is the name of the jobs collection unless configured;
// the collections beside it (queues, limits, workers) take their default
// names only beside it.
const DefaultCollection = "jobs"

// Config is what a Store is made with: queue.Config's fields, defaults
// set and validated by package queue.
type Config struct {
	Collection   string
	WriteConcern string
	RetryBase    time.Duration
	RetryMax     time.Duration
	Logger       *zap.Logger
}

// Store reads and writes the jobs of one jobs collection: the state that
// the writes share (the caches of paused queues and limits, what the
// server was found to support, test hooks) and the lease-level operations.
type Store struct {
	cfg  Config
	coll *mongo.Collection
	log  *zap.Logger

	completions *completer // nil unless WithBatchedCompletion

	// server is what the server was found to support (server.go);
	// shared by copies.
	server *Server
	// clock, when set (by tests), is read instead of the wall clock
	// (clock.go).
	clock func() time.Time
	// pauses caches the paused queues for claims; shared by copies.
	pauses *pauses
	// limits caches the concurrency limits for claims; shared by copies.
	limits *runLimits
	// cands keeps candidates for claims under limits; shared by copies
	// (candidates.go).
	cands *candidateCache
	// rates caches the rate limits for claims; shared by copies.
	rates *rateCache

	// betweenReadAndStamp, when set (by tests), runs in a batch claim after
	// the candidates are read and before they are stamped.
	betweenReadAndStamp func()
	// afterStamp, when set (by tests), runs in a batch claim after a stamp
	// the server applied; an error it returns is taken as the stamp's, as
	// when the reply is lost (a failover, a broken connection).
	afterStamp func() error
	// hooks, when set (by tests), lose replies of claims and finishing
	// writes; see claim.go.
	hooks testHooks
}

// New returns the Store of coll, whose write concern and read preference
// are the caller's (package queue reads and writes on the primary).
func New(coll *mongo.Collection, cfg Config) *Store {
	return &Store{cfg: cfg, coll: coll, log: cfg.Logger.Named("queue"), server: newServer(), pauses: newPauses(), limits: newRunLimits(), cands: &candidateCache{}, rates: newRateCache()}
}

// Collection returns the jobs collection, with the configured write concern.
func (s *Store) Collection() *mongo.Collection { return s.coll }

// Log is the logger of the store's writes.
func (s *Store) Log() *zap.Logger { return s.log }

// Handle is what a queue.Client embeds, under a name of its own, so that
// docket's engine reaches the client's Store with Of while the Store's
// methods stay off the client's API: no package outside docket can name
// this package, so none can call Of.
type Handle struct{ s *Store }

// Handle returns the Handle of s.
func (s *Store) Handle() Handle { return Handle{s} }

func (h Handle) store() *Store { return h.s }

func (s *Store) store() *Store { return s }

// Holder is a value that embeds a Handle (a *queue.Client), or a *Store.
type Holder interface{ store() *Store }

// Of returns the Store of h.
func Of(h Holder) *Store { return h.store() }

// ParseWriteConcern reads a configured write concern: "majority" or a
// number of nodes.
func ParseWriteConcern(s string) (*writeconcern.WriteConcern, error) {
	if s == "majority" {
		return writeconcern.Majority(), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return nil, fmt.Errorf("queue.writeConcern: %q must be \"majority\" or a number of nodes of at least 1", s)
	}
	return &writeconcern.WriteConcern{W: n}, nil
}

// ErrOutcomeUnknown is wrapped by the error of a write whose outcome could
// not be learned: the write, or an earlier try of it, may have been applied
// with its reply lost, and the read that would have told (the job looked up
// by id, read back) failed too. It is the Result.Err of a job whose insert
// failed so: enqueueing it again with the same id adds it at most once. A
// lease holder's writes (renewals, the writes that finish an attempt or
// give the job back) return it when they matched nothing, or not all of
// their leases, and reading the jobs back failed: neither done nor a lost
// lease is known, and trying the write again, which reads back again, is
// safe. The error keeps the read's own failure as well.
var ErrOutcomeUnknown = errors.New("outcome not known")

// now is the wall clock as the store stamps it: UTC, to the millisecond a
// BSON date keeps. The store's writes read their Store's clock (s.Now).
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// ClaimQuery is what a claim by p at t under token sends: its filter, its
// update and its sort, and how many candidates a batch claim of k reads
// per k (the tests of package queue check, on a real MongoDB, the index
// each of docket's queries uses).
func ClaimQuery(p ClaimParams, t time.Time, token string) (filter, update, sort bson.D, window int) {
	return claimFilter(p, t), claimUpdate(p, t, token), claimSort, claimWindow
}

// FoundBatch bounds the jobs one FoundIDs reads, and so the jobs one of
// the reaper's repairs changes a call; the next call changes more.
const FoundBatch = 1000

// FoundIDs reads the ids of up to FoundBatch jobs filter matches: the
// first half of a repair of what other applications wrote (a null unique
// key, a stranded slot), whose second half is UpdateIDs. Such jobs are
// few, and their filters are ones a server evaluating filters over every
// document (devdb) cannot narrow: there the read runs beside the writes,
// where an updateMany held every write up (1.5-2.2 s at a 20,000-job
// backlog), and a pass that finds nothing writes nothing. On MongoDB both
// halves are index scans.
func (s *Store) FoundIDs(ctx context.Context, filter bson.D) (bson.A, error) {
	ids, err := s.IDs(ctx, filter, FoundBatch)
	if err != nil {
		return nil, fmt.Errorf("find them: %w", err)
	}
	if len(ids) > 0 && s.hooks != nil {
		s.hooks.BetweenFindAndUpdate()
	}
	return ids, nil
}

// IDs returns the _id of each job filter matches, up to limit (0: no
// limit; a negative one is the find's, as its callers' callers may pass
// it).
func (s *Store) IDs(ctx context.Context, filter bson.D, limit int) (bson.A, error) {
	opts := options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}})
	if limit != 0 {
		opts.SetLimit(int64(limit))
	}
	var ids bson.A
	err := eachFound(ctx, s.coll, filter, opts, func(d bson.Raw) error {
		if v, err := d.LookupErr("_id"); err == nil {
			ids = append(ids, v)
		}
		return nil
	})
	return ids, err
}

// UpdateIDs applies update to those of the jobs ids that filter still
// matches, and returns how many it changed: a job changed since its id was
// read (FoundIDs) so that it no longer matches is left alone.
func (s *Store) UpdateIDs(ctx context.Context, ids bson.A, filter, update bson.D) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	res, err := s.coll.UpdateMany(ctx, append(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, filter...), update)
	if err != nil {
		return 0, err
	}
	return int(res.ModifiedCount), nil
}
