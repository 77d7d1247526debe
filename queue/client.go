package queue

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.uber.org/zap"
)

// Defaults for Config.
const (
	// DefaultCollection ("jobs") is the name of the jobs collection.
	DefaultCollection = store.DefaultCollection
	// DefaultWriteConcern is the write concern of every write that changes a
	// job's state.
	DefaultWriteConcern = "majority"
	// DefaultRetryBase is the backoff after a job's first failed attempt.
	DefaultRetryBase = time.Second
	// DefaultRetryMax caps the backoff between attempts.
	DefaultRetryMax = time.Hour
)

// Config configures a Client.
type Config struct {
	// Collection is the jobs collection. Defaults to DefaultCollection.
	Collection string
	// WriteConcern is "majority" or a number of nodes ("1"). Defaults to
	// DefaultWriteConcern.
	WriteConcern string
	// RetryBase is the backoff after a first failed attempt; it doubles with
	// each further attempt, with jitter. Defaults to DefaultRetryBase.
	RetryBase time.Duration
	// RetryMax caps the backoff. Defaults to DefaultRetryMax.
	RetryMax time.Duration
	// Logger receives the client's logs. Defaults to a no-op logger.
	Logger *zap.Logger
}

// WithDefaults returns c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	c.Collection = cmp.Or(c.Collection, DefaultCollection)
	c.WriteConcern = cmp.Or(c.WriteConcern, DefaultWriteConcern)
	c.RetryBase = cmp.Or(c.RetryBase, DefaultRetryBase)
	c.RetryMax = cmp.Or(c.RetryMax, DefaultRetryMax)
	c.Logger = cmp.Or(c.Logger, zap.NewNop())
	return c
}

// Validate reports the first invalid field, naming it and its value.
func (c Config) Validate() error {
	if _, err := store.ParseWriteConcern(c.WriteConcern); err != nil {
		return err
	}
	if c.RetryBase <= 0 {
		return fmt.Errorf("queue.retryBase: %s must be positive", c.RetryBase)
	}
	if c.RetryMax < c.RetryBase {
		return fmt.Errorf("queue.retryMax: %s must be at least queue.retryBase (%s)", c.RetryMax, c.RetryBase)
	}
	return nil
}

// Client enqueues and administers the jobs of one database. Claiming,
// renewing and finishing leases are docket's engine's (package worker and
// package recovery), through the client's store in internal/store.
type Client struct {
	handle // the engine reaches st through it (store.Of)

	st   *store.Store
	cfg  Config
	coll *mongo.Collection
	log  *zap.Logger

	// indexes ensures the jobs indexes once per client.
	indexes *ensured

	// srv is what the server was found to support (the store's).
	srv *store.Server
	// capacities caches the queues' capacities for enqueues.
	capacities *capacities
	// cancels are the applications' cancel hooks (OnCancel).
	cancels *cancelHooks
	// watch holds the running parents its links found (depswatch.go).
	watch *parentWatch
}

// handle is the name under which a Client embeds its store's Handle.
type handle = store.Handle

// ensured records that the jobs indexes exist, once EnsureIndexes
// succeeded.
type ensured struct {
	mu   sync.Mutex
	done bool
}

// New returns a Client for the jobs collection of db.
//
// The collection reads from the primary whatever readPreference db's
// client has: docket reads what it has just written (a batch claim's read
// back, a unique key's holder, a job's state before a cancel), which a
// secondary may not have yet.
func New(db *mongo.Database, cfg Config) (*Client, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	wc, _ := store.ParseWriteConcern(cfg.WriteConcern)
	coll := db.Collection(cfg.Collection, options.Collection().SetWriteConcern(wc).SetReadPreference(readpref.Primary()))
	st := store.New(coll, store.Config(cfg))
	return &Client{handle: st.Handle(), st: st, cfg: cfg, coll: coll, log: st.Log(), indexes: &ensured{}, srv: st.Server(), capacities: newCapacities(), cancels: &cancelHooks{},
		watch: &parentWatch{until: map[string]time.Time{}}}, nil
}

// CollectionName is the name of the jobs collection, for an application
// that reads job documents itself (its handlers, a report). Reading is
// safe; a write to a running job bypasses the fencing of its lease and
// must not be made: change jobs through this client's methods.
func (c *Client) CollectionName() string { return c.coll.Name() }

// jobIndexes returns the indexes docket creates on the jobs collection, fresh
// each call (the driver writes to the option builders). Optional fields are
// indexed sparse: on MongoDB, a unique index that is not sparse lets only
// one document lack the field.
//
// Each index is laid out equality, sort, range for the query it serves (the
// table is in docs/MONGODB.md). An index whose keys change gets a new
// name: EnsureIndexes looks indexes up by name, so a changed index under
// its old name would never be built on an existing deployment. The index
// it replaces is left in place, never dropped by docket (claimIndexV1).
func jobIndexes() []mongo.IndexModel {
	return []mongo.IndexModel{
		{ // the claim and the batch claim's find:
			//   {state: available, queue: {$in}, kind: {$in}, runAt: {$lte: now}}
			//   sorted {priority: -1, runAt: 1, _id: 1}
			// state, queue and kind are equalities (each $in is a few
			// points: the planner scans each queue × kind prefix and merges
			// the scans in sort order, a SORT_MERGE, no blocking SORT, up to
			// 200 combinations); then the whole sort, _id included, so that
			// the index order is the claim order; runAt's range is checked
			// on the keys as the scan walks them.
			Keys: bson.D{
				{Key: "state", Value: 1}, {Key: "queue", Value: 1}, {Key: "kind", Value: 1},
				{Key: "priority", Value: -1}, {Key: "runAt", Value: 1}, {Key: "_id", Value: 1},
			},
			Options: options.Index().SetName(claimIndex),
		},
		{ // the reaper: {state: running, leaseExpiresAt: {$lt}}, unsorted
			Keys:    bson.D{{Key: "state", Value: 1}, {Key: "leaseExpiresAt", Value: 1}},
			Options: options.Index().SetName("reap"),
		},
		{ // retention: {state: s, finishedAt: {$lt}}, unsorted
			Keys:    bson.D{{Key: "state", Value: 1}, {Key: "finishedAt", Value: 1}},
			Options: options.Index().SetName("finished"),
		},
		// at most one unfinished job per unique key
		uniqueIndex("uniqueKey", "uniqueKey"),
		// at most one job per unique key and period (InsertOpts.UniqueFor),
		// finished or not
		uniqueIndex("uniquePeriodKey", "uniquePeriodKey"),
		// a bounded queue's slots: at most one admitted unfinished job per
		// slot (capacity.go); also serves reading a queue's occupied
		// slots, a range on the "<queue>/" prefix
		uniqueIndex(capacitySlotField, capacityIndex),
		// a limited kind's run slots: at most one running job per slot
		// (limit.go)
		uniqueIndex(store.KindRunSlotIndex, store.KindRunSlotIndex),
		// a limited queue's run slots
		uniqueIndex(store.QueueRunSlotIndex, store.QueueRunSlotIndex),
		// a partitioned kind's run slots, per partition
		uniqueIndex(store.KindPartSlotIndex, store.KindPartSlotIndex),
		// a partitioned queue's run slots
		uniqueIndex(store.QueuePartSlotIndex, store.QueuePartSlotIndex),
		// Workflows (deps.go): settling a parent's dependents,
		// {after: id, state: blocked, ...}, and a job's dependents shown;
		// the leader's pass over outcomes due and jobs left linking.
		sparseIndex(afterField, "after"),
		sparseIndex(dependentsDueField, dependentsDueField),
		sparseIndex(linkingField, linkingField),
		// A workflow's tasks, {workflow: id}, for docketctl workflow and
		// the dashboard's workflow page (workflow_view.go).
		sparseIndex(workflowField, workflowField),
	}
}

// sparseIndex is an index on field alone, named name, of the jobs that have
// the field.
func sparseIndex(field, name string) mongo.IndexModel {
	return mongo.IndexModel{Keys: bson.D{{Key: field, Value: 1}}, Options: options.Index().SetName(name).SetSparse(true)}
}

// uniqueIndex is sparseIndex(field, name) where no two jobs hold one value.
func uniqueIndex(field, name string) mongo.IndexModel {
	m := sparseIndex(field, name)
	m.Options.SetUnique(true)
	return m
}

// claimIndex is the name of the index the claim uses.
const claimIndex = "claim_v2"

// claimIndexV1 is the claim index claimIndex replaces, keyed {state,
// queue, priority: -1, runAt}: without kind and _id, a claim on a large
// backlog sorted in memory. Docket neither creates nor drops it; once
// every worker creates claimIndex, drop it with db.jobs.dropIndex("claim").
const claimIndexV1 = "claim"

// EnsureIndexes creates the indexes the claim, the reaper and unique keys
// need. It is idempotent and safe to run from many processes at once. The
// first enqueue of a Client calls it too, so a program that only enqueues
// gets unique keys that hold. When the server refuses an index (documents
// already break a unique one), the error wraps ErrSetupRefused and names
// the duplicated values.
func (c *Client) EnsureIndexes(ctx context.Context) error {
	err := c.clearNullsAndEnsure(ctx)
	if err == nil {
		c.indexes.mu.Lock()
		c.indexes.done = true
		c.indexes.mu.Unlock()
	}
	return err
}

// ensureIndexes runs EnsureIndexes unless it already succeeded for c.
func (c *Client) ensureIndexes(ctx context.Context) error {
	c.indexes.mu.Lock()
	defer c.indexes.mu.Unlock()
	if c.indexes.done {
		return nil
	}
	err := c.clearNullsAndEnsure(ctx)
	c.indexes.done = err == nil
	return err
}

// clearNullsAndEnsure makes the indexes that are missing. Explicit null
// unique keys would collide in the unique index, so they are cleared first,
// but only when an index is missing: that pass is an updateMany which,
// without the uniqueKey index, scans the whole collection, and every
// enqueueing process runs this once. With the indexes in place,
// the reaper clears nulls on its passes.
func (c *Client) clearNullsAndEnsure(ctx context.Context) error {
	missing, err := missingIndexes(ctx, c.coll, jobIndexes())
	if err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := c.clearNullUniqueKeys(ctx); err != nil {
		return err
	}
	return EnsureIndexes(ctx, c.coll, jobIndexes())
}

// nullUniqueKeys matches the jobs clearNullUniqueKeys changes.
var nullUniqueKeys = bson.D{{Key: "uniqueKey", Value: bson.D{{Key: "$type", Value: "null"}}}}

// RepairForeignWrites undoes what another application's writes may leave
// that would block docket: null unique keys (clearNullUniqueKeys), and the
// capacity slots (freeStrandedSlotsOf) and run slots (store.FreeRunSlotsOf)
// of jobs that no longer hold them. One read finds the jobs that need any
// of them (up to store.FoundBatch; the next call finds more), and each
// repair writes by their ids with its own filter repeated, so a job changed
// meanwhile is left alone; a pass that finds none writes nothing. One read
// serves the three repairs: on devdb each read is a pass over every job
// (1-2 s at 20,000). The reaper runs it every pass.
func (c *Client) RepairForeignWrites(ctx context.Context) error {
	ids, err := c.st.FoundIDs(ctx, bson.D{{Key: "$or", Value: bson.A{nullUniqueKeys, strandedCapacitySlots, store.StrandedRunSlotsFilter()}}})
	if err != nil {
		return fmt.Errorf("queue: repair other applications' writes: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := c.clearNullUniqueKeysOf(ctx, ids); err != nil {
		return err
	}
	if _, err := c.freeStrandedSlotsOf(ctx, ids); err != nil {
		return err
	}
	_, err = c.st.FreeRunSlotsOf(ctx, ids)
	return err
}

// clearNullUniqueKeys removes the uniqueKey field of the jobs where it is
// an explicit null (another app's driver may write one), and returns how
// many it changed. A null unique key means no unique key; but MongoDB's
// sparse unique index indexes explicit nulls, so until it is cleared a
// second document with uniqueKey null is refused (E11000). EnsureIndexes
// runs it before it creates the index (the reaper's RepairForeignWrites
// clears the nulls it finds). It touches only nulls, so any number may run
// at any time; it finds them first, a thousand at a time (store.FoundIDs).
func (c *Client) clearNullUniqueKeys(ctx context.Context) (int, error) {
	n := 0
	for {
		ids, err := c.st.FoundIDs(ctx, nullUniqueKeys)
		if err != nil {
			return n, fmt.Errorf("queue: clear null unique keys: %w", err)
		}
		k, err := c.clearNullUniqueKeysOf(ctx, ids)
		n += k
		if err != nil || len(ids) < store.FoundBatch {
			return n, err
		}
	}
}

// clearNullUniqueKeysOf clears the null unique keys of those of the jobs
// ids that still have one.
func (c *Client) clearNullUniqueKeysOf(ctx context.Context, ids bson.A) (int, error) {
	n, err := c.unsetOf(ctx, ids, nullUniqueKeys, "uniqueKey", "cleared explicit null unique keys (null means no key)")
	if err != nil {
		return n, fmt.Errorf("queue: clear null unique keys: %w", err)
	}
	return n, nil
}

// unsetOf removes field from those of the jobs ids that filter still
// matches (a repair), and logs done with how many it changed, if any.
func (c *Client) unsetOf(ctx context.Context, ids bson.A, filter bson.D, field, done string) (int, error) {
	n, err := c.st.UpdateIDs(ctx, ids, filter, bson.D{{Key: "$unset", Value: bson.D{{Key: field, Value: ""}}}})
	if err == nil && n > 0 {
		c.log.Info(done, zap.Int("jobs", n))
	}
	return n, err
}

// ErrSetupRefused is wrapped by the errors of a set-up step (creating
// indexes) that the server refused for what is in the database, such as
// documents that already break a unique index: retrying cannot help until
// someone fixes the data.
var ErrSetupRefused = errors.New("setup refused by the server")

// refused reports whether err, from createIndexes, is the server refusing
// the index rather than the server being away.
func refused(err error) bool {
	if store.IsDuplicateKey(err) {
		return true
	}
	var se mongo.ServerError
	if errors.As(err, &se) {
		// 67 CannotCreateIndex, 85 IndexOptionsConflict, 86
		// IndexKeySpecsConflict, 13 Unauthorized.
		for _, code := range []int{67, 85, 86, 13} {
			if se.HasErrorCode(code) {
				return true
			}
		}
	}
	return false
}

// duplicates names, for each unique index of models, up to five values
// that several documents of coll share.
func duplicates(ctx context.Context, coll *mongo.Collection, models []mongo.IndexModel) string {
	var out []string
	for _, m := range models {
		o := indexOptions(m)
		keys, ok := m.Keys.(bson.D)
		if o.Unique == nil || !*o.Unique || !ok || len(keys) == 0 {
			continue
		}
		group := bson.D{}
		match := bson.D{}
		for _, k := range keys {
			group = append(group, bson.E{Key: k.Key, Value: "$" + k.Key})
			match = append(match, bson.E{Key: k.Key, Value: bson.D{{Key: "$exists", Value: true}}})
		}
		cur, err := coll.Aggregate(ctx, mongo.Pipeline{
			{{Key: "$match", Value: match}},
			{{Key: "$group", Value: bson.D{{Key: "_id", Value: group}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
			{{Key: "$match", Value: bson.D{{Key: "n", Value: bson.D{{Key: "$gt", Value: 1}}}}}},
			{{Key: "$limit", Value: 5}},
		})
		if err != nil {
			continue
		}
		var dups []string
		_ = store.EachRaw(ctx, cur, func(d bson.Raw) error {
			n, _ := d.Lookup("n").AsInt64OK()
			v := d.Lookup("_id")
			if len(keys) == 1 {
				v = d.Lookup("_id", keys[0].Key)
			}
			dups = append(dups, fmt.Sprintf("%s in %d documents", v, n))
			return nil
		})
		name := ""
		if o.Name != nil {
			name = *o.Name
		}
		if len(dups) > 0 {
			out = append(out, fmt.Sprintf("unique index %s: %s", name, strings.Join(dups, ", ")))
		}
	}
	return strings.Join(out, "; ")
}

// EnsureIndexes creates those of models that coll lacks, by name, and
// wraps ErrSetupRefused when the server refuses one for what coll holds.
// Asking only for the missing ones keeps a start-up with every index in
// place to one listIndexes, and never asks a server to build an index it
// has (some fail on that, server.go in internal/store).
func EnsureIndexes(ctx context.Context, coll *mongo.Collection, models []mongo.IndexModel) error {
	missing, err := missingIndexes(ctx, coll, models)
	if err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	// One at a time: MongoDB builds the indexes of one createIndexes
	// together and fails them together, so one refused index (duplicates
	// under a unique one) would leave the claim's and the reaper's unbuilt
	// too. Alone, the others are made, and only the refused one is
	// missing. (A server that makes them in steps would also leave the
	// others made but unrecorded.)
	var refusal error
	var refusedModels []mongo.IndexModel
	for _, m := range missing {
		_, err := coll.Indexes().CreateOne(ctx, m)
		switch {
		case err == nil:
		case isCode(err, errIndexOptionsConflict) && equivalentExists(ctx, coll, m):
			// The same index under another name (made by hand): it serves.
		case refused(err):
			refusal = errors.Join(refusal, err)
			refusedModels = append(refusedModels, m)
		default:
			// Another process may have made it in between, and a server
			// may fail on an index that exists: look again.
			if again, lerr := coll.Indexes().ListSpecifications(ctx); lerr == nil && len(unnamed(again, []mongo.IndexModel{m})) == 0 {
				continue
			}
			return fmt.Errorf("queue: create indexes on %s: %w", coll.Name(), err)
		}
	}
	if refusal == nil {
		return nil
	}
	if dups := duplicates(ctx, coll, refusedModels); dups != "" {
		return fmt.Errorf("queue: create indexes on %s: %w: documents share a value that must be unique (%s); finish, change or delete all but one of each: %w",
			coll.Name(), ErrSetupRefused, dups, refusal)
	}
	return fmt.Errorf("queue: create indexes on %s: %w: %w", coll.Name(), ErrSetupRefused, refusal)
}

// errIndexOptionsConflict is the server's code for an index whose keys an
// index of another name or other options already has.
const errIndexOptionsConflict = 85

func isCode(err error, code int) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(code)
}

// equivalentExists reports whether coll has an index on m's keys, in the
// same order, with m's uniqueness, whatever its name.
func equivalentExists(ctx context.Context, coll *mongo.Collection, m mongo.IndexModel) bool {
	specs, err := coll.Indexes().ListSpecifications(ctx)
	if err != nil {
		return false
	}
	want, err := bson.Marshal(m.Keys)
	if err != nil {
		return false
	}
	o := indexOptions(m)
	flag := func(b *bool) bool { return b != nil && *b }
	for _, s := range specs {
		// Sparseness is not compared: not every server reports it
		// (server.go in internal/store).
		if bytes.Equal(s.KeysDocument, want) && flag(s.Unique) == flag(o.Unique) {
			return true
		}
	}
	return false
}

// indexOptions is what m's option builders set.
func indexOptions(m mongo.IndexModel) options.IndexOptions {
	var o options.IndexOptions
	if m.Options != nil {
		for _, set := range m.Options.List() {
			_ = set(&o)
		}
	}
	return o
}

// unnamed returns the models whose index (by name) specs do not name.
func unnamed(specs []mongo.IndexSpecification, models []mongo.IndexModel) []mongo.IndexModel {
	have := map[string]bool{}
	for _, s := range specs {
		have[s.Name] = true
	}
	var missing []mongo.IndexModel
	for _, m := range models {
		o := indexOptions(m)
		if o.Name == nil || !have[*o.Name] {
			missing = append(missing, m)
		}
	}
	return missing
}

// Get returns the job with id, or ErrNotFound.
func (c *Client) Get(ctx context.Context, id string) (*jobs.Job, error) {
	return c.GetJobID(ctx, StringJobID(id))
}

// GetJobID is Get for an id of any type (a job another application wrote
// with _id 7 or an ObjectId). The job's ID is then only the stored id's
// String, in extended JSON, and its StoredID the id: JobIDOfJob names it.
// The zero JobID names no job.
func (c *Client) GetJobID(ctx context.Context, id JobID) (*jobs.Job, error) {
	if id.IsZero() {
		return nil, fmt.Errorf("queue: job with no id: %w", ErrNotFound)
	}
	raw, err := c.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id.v}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("queue: job %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: get job %s: %w", id, err)
	}
	// The stored id, not the one asked for: int64 7 finds a stored int32 7.
	stored := JobIDOf(raw)
	_, isString := stored.StringID()
	if !isString {
		if raw, err = withStringID(raw, stored.String()); err != nil {
			return nil, fmt.Errorf("queue: get job %s: %w", id, err)
		}
	}
	var j jobs.Job
	if err := bson.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("queue: get job %s: %w", id, err)
	}
	if !isString {
		j.StoredID = stored.v
	}
	return &j, nil
}

// withStringID is doc with its _id replaced by id, so that a job whose _id
// is not a string decodes as a jobs.Job.
func withStringID(doc bson.Raw, id string) (bson.Raw, error) {
	elems, err := doc.Elements()
	if err != nil {
		return nil, err
	}
	d := bson.D{{Key: "_id", Value: id}}
	for _, e := range elems {
		if e.Key() != "_id" {
			d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
		}
	}
	return bson.Marshal(d)
}

// ErrNotFound is returned for a job id that is not in the collection.
var ErrNotFound = errors.New("job not found")

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
var ErrOutcomeUnknown = store.ErrOutcomeUnknown

// now is the time c stamps and compares with: its store's clock.
func (c *Client) now() time.Time { return c.st.Now() }

// missingIndexes returns the models whose index (by name) coll lacks.
func missingIndexes(ctx context.Context, coll *mongo.Collection, models []mongo.IndexModel) ([]mongo.IndexModel, error) {
	specs, err := coll.Indexes().ListSpecifications(ctx)
	if err != nil {
		return nil, fmt.Errorf("queue: list indexes of %s: %w", coll.Name(), err)
	}
	return unnamed(specs, models), nil
}
