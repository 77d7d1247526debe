package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Bounded queues: a queue may have a capacity, the most of its jobs that
// may be unfinished (blocked, available, scheduled, retrying or running)
// when an enqueue is admitted. Past it, an enqueue is refused at once
// (ErrQueueFull) instead of growing a backlog.
//
// The capacity is stored in the queue's document of the queues collection,
// {_id: queue, capacity: N, paused: …}, beside its pause, so every enqueuer
// in every process enforces the same limit.
//
// Admission is exact without locks and without check-then-insert: an
// admitted job carries a slot, capacitySlot: "<queue>/<k>" with k in
// [0, N), under a unique sparse index. Admitting reads the queue's load,
// and inserts the job with a free slot picked at random; an insert refused
// on the slot (another enqueuer took it in between) tries another. The
// insert is one atomic write: an enqueuer killed at any point leaks
// nothing, as there is nothing to release but the job itself. Every write
// that finishes a job (finish) unsets its slot in the same write, and
// deleting a job frees it too.
//
// Every unfinished job of the queue counts, not only those admitted: jobs
// enqueued while the queue had no capacity (before the first one, or
// between `capacity off` and the next), jobs other applications insert
// without a slot, periodic jobs, and jobs an operator retried while the
// queue was unbounded hold no slot; jobs admitted under a higher capacity
// since lowered hold slots at or over the new one. Call them the
// overflow. An admission reads the overflow's size o (the unslotted
// unfinished jobs are counted before the slots are read), and may only
// take a free slot below N - o. The overflow only shrinks (its jobs
// finish; no admission adds to it), so every slot below N held at any
// moment is below N minus the overflow then, and the queue's unfinished
// jobs never exceed N through admissions, however many race. Only what
// bypasses admission can take a queue past its capacity (the jobs above,
// and enqueuers that have not yet read a capacity set less than
// CapacityRefresh ago); admissions then wait until the count is under it.
//
// Retry: a finished job of a bounded queue is admitted again, holding a
// slot in the same write, or left alone with a *QueueFullError when the
// queue is full (readmit); an unfinished job retried keeps what it holds.

// ErrQueueFull is wrapped by the error of an enqueue refused because its
// queue has no free capacity. The error is a *QueueFullError naming the
// queue and its capacity.
var ErrQueueFull = errors.New("queue is full")

// QueueFullError is the error of an enqueue refused by a full queue.
type QueueFullError struct {
	// Queue is the queue's name.
	Queue string
	// Capacity is the queue's capacity.
	Capacity int
}

// Error implements error: "queue NAME is full (capacity N)".
func (e *QueueFullError) Error() string {
	return fmt.Sprintf("queue %s is full (capacity %d)", e.Queue, e.Capacity)
}

// Is makes errors.Is(err, ErrQueueFull) true.
func (e *QueueFullError) Is(target error) bool { return target == ErrQueueFull }

// CapacityRefresh is how long an enqueuer trusts the capacities it read: a
// capacity set or cleared by another process applies to this one's
// enqueues within it. SetCapacity and ClearCapacity apply at once to the
// client that calls them.
const CapacityRefresh = time.Second

// capacityIndex is the name of the unique sparse index on capacitySlot.
const capacityIndex = "capacitySlot"

// capacitySlotField is the job field holding its slot of the queue's
// capacity; only admitted, unfinished jobs of a bounded queue have it.
const capacitySlotField = store.CapacitySlotField

// MaxCapacity bounds a queue's capacity: admission reads the occupied
// slots, so a capacity costs a read of up to that many short documents.
const MaxCapacity = 100_000

// maxAdmitRounds is how many times an admission reads the occupied slots
// again after every slot it saw free was taken under it.
const maxAdmitRounds = 3

// slotted is a job document holding a slot.
type slotted struct {
	jobs.Job     `bson:",inline"`
	CapacitySlot string `bson:"capacitySlot"`
}

// capacities caches the queues' capacities for the enqueues of one Client
// and its copies.
type capacities struct {
	mu      sync.Mutex
	readAt  time.Time
	limits  map[string]int
	warned  map[string]string
	refresh time.Duration
}

func newCapacities() *capacities {
	return &capacities{refresh: CapacityRefresh, warned: map[string]string{}}
}

// QueueCapacity is the stored capacity of one queue.
type QueueCapacity struct {
	Queue string
	// Capacity is the most admitted unfinished jobs.
	Capacity int
	// Occupied is how many of the queue's jobs are unfinished now, held
	// slot or not: the count admissions are measured against (filled by
	// QueueCapacities only).
	Occupied int
	SetAt    time.Time
	SetBy    string
	// Malformed says what is wrong with a capacity another application
	// wrote (not a non-negative integer); such a queue is not bounded.
	Malformed string
}

// SetCapacity bounds queue to n admitted, unfinished jobs (n = 0 refuses
// every enqueue). It applies at once to this client and within
// CapacityRefresh to every other enqueuer. Lowering it below the jobs
// admitted now refuses enqueues until fewer than n hold a slot; none is
// removed. by, when set, records who set it.
func (c *Client) SetCapacity(ctx context.Context, queue string, n int, by string) error {
	if err := ValidQueueName(queue); err != nil {
		return fmt.Errorf("queue: set capacity: %w", err)
	}
	if n < 0 || n > MaxCapacity {
		return fmt.Errorf("queue: set capacity of %s: %d must be between 0 and %d", queue, n, MaxCapacity)
	}
	set := store.Stamp(bson.D{{Key: "capacity", Value: n}}, "capacitySet", c.now(), by)
	// A new document gets paused: false, so it reads as a running queue
	// to the pause code (a document without paused is malformed there).
	_, err := c.st.QueuesColl().UpdateOne(ctx, bson.D{{Key: "_id", Value: queue}},
		bson.D{{Key: "$set", Value: set}, {Key: "$setOnInsert", Value: bson.D{{Key: "paused", Value: false}}}},
		options.UpdateOne().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("queue: set capacity of %s: %w", queue, err)
	}
	c.forgetCapacities()
	return nil
}

// ClearCapacity makes queue unbounded again. It reports whether it had a
// capacity. Jobs that hold a slot keep it until they finish, harmlessly.
func (c *Client) ClearCapacity(ctx context.Context, queue, by string) (bool, error) {
	if err := ValidQueueName(queue); err != nil {
		return false, fmt.Errorf("queue: clear capacity: %w", err)
	}
	update := bson.D{{Key: "$unset", Value: bson.D{{Key: "capacity", Value: ""}, {Key: "capacitySetAt", Value: ""}, {Key: "capacitySetBy", Value: ""}}}}
	res, err := c.st.QueuesColl().UpdateOne(ctx,
		bson.D{{Key: "_id", Value: queue}, {Key: "capacity", Value: bson.D{{Key: "$exists", Value: true}}}}, update)
	if err != nil {
		return false, fmt.Errorf("queue: clear capacity of %s: %w", queue, err)
	}
	c.forgetCapacities()
	return res.MatchedCount > 0, nil
}

// QueueCapacities returns every queue that has a capacity, in name order,
// with how many of its jobs are unfinished now.
func (c *Client) QueueCapacities(ctx context.Context) ([]QueueCapacity, error) {
	caps, err := c.readCapacities(ctx)
	if err != nil {
		return nil, err
	}
	for i := range caps {
		if caps[i].Malformed != "" {
			continue
		}
		load, err := c.readLoad(ctx, caps[i].Queue)
		if err != nil {
			return nil, err
		}
		caps[i].Occupied = load.Count()
	}
	return caps, nil
}

// Occupied returns how many jobs of queue are unfinished: those admitted
// (holding a slot of its capacity) and those that hold none (see
// SetCapacity). Admissions are measured against it.
func (c *Client) Occupied(ctx context.Context, queue string) (int, error) {
	load, err := c.readLoad(ctx, queue)
	return load.Count(), err
}

// readLoad reads queue's load: first how many of its unfinished jobs hold
// no slot, then the slots held, so that a job is never missed by both
// reads (none takes a slot while unfinished; finishing only lowers the
// load). The count is served by the claim index's {state, queue} prefix.
func (c *Client) readLoad(ctx context.Context, queue string) (store.QueueLoad, error) {
	n, err := c.coll.CountDocuments(ctx, bson.D{
		{Key: "state", Value: bson.D{{Key: "$in", Value: unfinishedStates}}},
		{Key: "queue", Value: queue},
		{Key: capacitySlotField, Value: nil}, // none, or null (written by another app)
	})
	if err != nil {
		return store.QueueLoad{}, fmt.Errorf("queue: count the unfinished jobs of %s that hold no slot: %w", queue, err)
	}
	slots, err := c.occupiedSlots(ctx, queue)
	if err != nil {
		return store.QueueLoad{}, err
	}
	return store.QueueLoad{Slots: slots, Unslotted: int(n)}, nil
}

// readCapacities reads the capacities stored, in queue name order.
func (c *Client) readCapacities(ctx context.Context) ([]QueueCapacity, error) {
	return store.ReadQueues(ctx, c.st, bson.D{{Key: "capacity", Value: bson.D{{Key: "$exists", Value: true}}}}, "capacities", queueCapacity)
}

// queueCapacity reads one queues document's capacity field by field.
func queueCapacity(d bson.Raw) QueueCapacity {
	name, bad := store.StoredName(d, "queue")
	if bad != "" {
		return QueueCapacity{Queue: name, Malformed: bad}
	}
	qc := QueueCapacity{Queue: name}
	if qc.Capacity, qc.Malformed = store.StoredCount(d, "capacity", MaxCapacity); qc.Malformed != "" {
		return qc
	}
	qc.SetAt, qc.SetBy = store.StoredStamp(d, "capacitySet")
	return qc
}

// forgetCapacities makes the next enqueue of this client read the
// capacities again.
func (c *Client) forgetCapacities() {
	c.capacities.mu.Lock()
	c.capacities.readAt = time.Time{}
	c.capacities.mu.Unlock()
}

// capacityOf returns the capacities of the queues that have one, as read
// at most CapacityRefresh ago. Unlike a pause, a failed read fails the
// enqueue: admitting without knowing the limit would break it.
func (c *Client) capacityOf(ctx context.Context) (map[string]int, error) {
	p := c.capacities
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := time.Now(); p.readAt.IsZero() || t.Sub(p.readAt) >= p.refresh {
		caps, err := c.readCapacities(ctx)
		if err != nil {
			return nil, err
		}
		p.readAt = t
		p.limits = map[string]int{}
		for _, qc := range caps {
			if c.st.WarnMalformed(p.warned, qc.Queue, qc.Malformed,
				"a queues document has a malformed capacity: the queue is NOT bounded; `docketctl capacity` rewrites it") {
				continue
			}
			p.limits[qc.Queue] = qc.Capacity
		}
	}
	return p.limits, nil
}

// occupiedSlots returns the slot numbers of queue held by jobs. The range
// on capacitySlot is served by its index; a slot of another queue whose
// name starts with "queue/" is told apart by what follows.
func (c *Client) occupiedSlots(ctx context.Context, queue string) (map[int]bool, error) {
	prefix := queue + "/"
	cur, err := c.coll.Find(ctx,
		bson.D{{Key: capacitySlotField, Value: bson.D{{Key: "$gte", Value: prefix}, {Key: "$lt", Value: queue + "0"}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 0}, {Key: capacitySlotField, Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("queue: read the occupied slots of %s: %w", queue, err)
	}
	out := map[int]bool{}
	err = store.EachRaw(ctx, cur, func(d bson.Raw) error {
		s, ok := d.Lookup(capacitySlotField).StringValueOK()
		if !ok || !strings.HasPrefix(s, prefix) {
			return nil
		}
		k, err := strconv.Atoi(s[len(prefix):])
		if err != nil || k < 0 || strconv.Itoa(k) != s[len(prefix):] {
			return nil // another queue's ("queue/x/3"), or not docket's
		}
		out[k] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: read the occupied slots of %s: %w", queue, err)
	}
	return out, nil
}

// admitHookKey is the context key of a test's hook, called by an
// admission after it read the queue's load, before it inserts.
type admitHookKey struct{}

// admit inserts j, of a queue of the given capacity, holding a free slot.
// The Result's Err wraps ErrQueueFull when every slot is taken, and
// ErrNotInserted or ErrOutcomeUnknown as EnqueueMany's do; the error
// returned is the failure that should stop the enqueue (nil for a
// refusal: the next jobs may go to other queues).
func (c *Client) admit(ctx context.Context, j *jobs.Job, capacity int, own bool) (Result, error) {
	for range maxAdmitRounds {
		load, err := c.readLoad(ctx, j.Queue)
		if err != nil {
			return Result{ID: j.ID, Err: fmt.Errorf("%w: %w", ErrNotInserted, err)}, err
		}
		if hook, ok := ctx.Value(admitHookKey{}).(func()); ok {
			hook()
		}
		// Every unfinished job counts, slot or not (the overflow, above).
		free := load.FreeSlots(capacity)
		if len(free) == 0 {
			return c.refuse(ctx, j, capacity, own)
		}
		for _, k := range free {
			r, taken, err := c.insertSlotted(ctx, j, store.SlotKey(j.Queue, k))
			if taken {
				continue
			}
			return r, err
		}
		if err := ctx.Err(); err != nil {
			return Result{ID: j.ID, Err: fmt.Errorf("%w: the enqueue stopped: %w", ErrNotInserted, err)}, err
		}
	}
	return c.refuse(ctx, j, capacity, own)
}

// refuse returns the Result of a job its full queue refuses, unless the
// job is there already (an earlier enqueue of its id, whose reply may
// have been lost: Existed), or its unique key is held (Duplicate): a full
// queue does not turn a safe retry into an error. Only jobs with an id of
// the caller's or a key cost the look-up.
func (c *Client) refuse(ctx context.Context, j *jobs.Job, capacity int, own bool) (Result, error) {
	if _, key := uniqueField(j); own || key != "" {
		r, taken, err := c.whichDuplicate(ctx, j, nil)
		if err != nil || !taken {
			return r, err
		}
	}
	full := &QueueFullError{Queue: j.Queue, Capacity: capacity}
	return Result{ID: j.ID, Err: fmt.Errorf("%w: %w", ErrNotInserted, full)}, nil
}

// insertSlotted inserts j holding slot. taken is true when the slot was
// held by another job (nothing inserted: try another slot).
func (c *Client) insertSlotted(ctx context.Context, j *jobs.Job, slot string) (r Result, taken bool, err error) {
	_, err = c.coll.InsertOne(ctx, insertDoc(ctx, j.ID, slotted{Job: *j, CapacitySlot: slot}))
	if hook, ok := ctx.Value(insertHookKey{}).(func(error) error); ok {
		err = hook(err)
	}
	if err == nil {
		return Result{ID: j.ID}, false, nil
	}
	if mongo.IsDuplicateKeyError(err) {
		return c.whichDuplicate(ctx, j, err)
	}
	var we mongo.WriteException
	if errors.As(err, &we) && len(we.WriteErrors) > 0 && we.WriteConcernError == nil {
		// Answered, refused for another reason: nothing was written.
		return Result{ID: j.ID, Err: fmt.Errorf("%w: the server refused it: %w", ErrNotInserted, err)},
			false, fmt.Errorf("queue: enqueue job %s (%s): %w", j.ID, j.Kind, err)
	}
	// No answer: the insert may have been applied. Look the job up, on a
	// context of its own (ctx may be what expired); a job found holds its
	// slot, which is the admission. One not found is not inserted (if the
	// insert still lands late, the job is there, admitted, and enqueueing
	// it again with its id finds it).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	res := []Result{{ID: j.ID}}
	err = c.settleByLookup(sctx, []*jobs.Job{j}, res, fmt.Errorf("queue: enqueue job %s: %w", j.ID, err))
	return res[0], false, err
}

// whichDuplicate tells which unique index refused j's insert: its id
// (Existed), its unique key (Duplicate), or its slot (taken). MongoDB names
// the index in the message; when the message names none (not every
// server's does, server.go in internal/store), the id and the key are
// looked up, and a refusal neither explains was the slot. A unique key
// whose holder finished in between reads as taken too: admission tries
// again, which inserts the job.
func (c *Client) whichDuplicate(ctx context.Context, j *jobs.Job, err error) (Result, bool, error) {
	if store.DuplicateIndexIs(err, capacityIndex) {
		return Result{}, true, nil
	}
	r, found, lerr := c.existing(ctx, j)
	if _, key := uniqueField(j); lerr == nil && !found && key != "" {
		r, found, lerr = c.uniqueHolder(ctx, j)
	}
	if lerr != nil {
		return Result{ID: j.ID, Err: fmt.Errorf("%w: %w", ErrNotInserted, lerr)}, false, lerr
	}
	if found {
		return r, false, nil
	}
	return Result{}, true, nil
}

// strandedCapacitySlots matches the jobs that hold a slot but are neither
// blocked, available nor running: finished by another application's write
// that left the slot, or with a state docket does not know. Such a job
// would hold its slot forever. It also matches a slot another app wrote as
// null, which MongoDB's sparse unique index indexes (a second null would
// be refused).
var strandedCapacitySlots = bson.D{{Key: "$or", Value: bson.A{
	bson.D{{Key: capacitySlotField, Value: bson.D{{Key: "$type", Value: "null"}}}},
	bson.D{
		{Key: capacitySlotField, Value: bson.D{{Key: "$exists", Value: true}}},
		{Key: "state", Value: bson.D{{Key: "$nin", Value: unfinishedStates}}},
	},
}}}

// freeStrandedSlotsOf frees the capacity slots of those of the jobs ids
// whose slot is still stranded.
func (c *Client) freeStrandedSlotsOf(ctx context.Context, ids bson.A) (int, error) {
	n, err := c.unsetOf(ctx, ids, strandedCapacitySlots, capacitySlotField, "freed the capacity slots of jobs that were not unfinished (written by another app)")
	if err != nil {
		return n, fmt.Errorf("queue: free stranded capacity slots: %w", err)
	}
	return n, nil
}

// errRetryMissed is readmit's error when the job's state changed between
// the read and the write.
var errRetryMissed = errors.New("state changed")

// readmit applies update, which makes a finished job of a bounded queue
// unfinished again (Retry), to the job filter matches, holding a free slot
// of the queue's capacity in the same write, as an enqueue would. It
// returns a *QueueFullError when none is free, ErrUniqueKeyHeld when the
// job's unique key is held, errRetryMissed when filter matched nothing.
func (c *Client) readmit(ctx context.Context, filter, update bson.D, queue string, capacity int) error {
	for range maxAdmitRounds {
		load, err := c.readLoad(ctx, queue)
		if err != nil {
			return err
		}
		free := load.FreeSlots(capacity)
		if len(free) == 0 {
			return &QueueFullError{Queue: queue, Capacity: capacity}
		}
		for _, k := range free {
			slot := store.SlotKey(queue, k)
			res, err := c.coll.UpdateOne(ctx, filter, store.AlsoIn(update, "$set", bson.E{Key: capacitySlotField, Value: slot}))
			// A duplicate key names the index it broke (E11000's
			// "index: name dup key"; store.DuplicateIndex reads the
			// forms servers use).
			switch {
			case err == nil && res.MatchedCount == 0:
				return errRetryMissed
			case err == nil:
				return nil
			case !store.IsDuplicateKey(err):
				return err
			case store.DuplicateIndexIs(err, capacityIndex):
				continue
			case store.DuplicateIndex(err) != "":
				return ErrUniqueKeyHeld // another index than the slot's
			}
			// The index is not named: the slot's holder tells.
			herr := c.coll.FindOne(ctx, bson.D{{Key: capacitySlotField, Value: slot}}).Err()
			if errors.Is(herr, mongo.ErrNoDocuments) {
				return ErrUniqueKeyHeld
			}
			if herr != nil {
				return herr
			}
		}
	}
	return &QueueFullError{Queue: queue, Capacity: capacity}
}
