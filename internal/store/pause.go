package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// Pausing a queue: its state is a document in the queues collection,
// {_id: queue, paused: true, pausedAt, pausedBy}, which every claim reads
// (through a cache of at most PauseRefresh) before it claims. A paused
// queue's jobs stay available; running jobs finish as usual.
//
// Documents written by others: a queue is paused only when its document's
// paused field is the boolean true. Any other value (a string, a number,
// null) leaves the queue running and is logged: the normal state of a
// queue is running, and a stray document must not stop a queue silently.
// `docketctl pause` and `resume` rewrite such a document cleanly.

// DefaultQueuesCollection is the collection holding the queues' paused
// state, beside the default jobs collection. A Store on another jobs
// collection C uses C_queues.
const DefaultQueuesCollection = "queues"

// PauseRefresh is how long a claim trusts the paused queues it read: a
// queue paused now is no longer claimed from once every worker's cache is
// older than this, that is within a second plus the claim in flight (on
// a slow server, within twice what reading the states takes).
const PauseRefresh = time.Second

// QueueState is the stored state of one queue.
type QueueState struct {
	Queue    string
	Paused   bool
	PausedAt time.Time
	PausedBy string
	// Malformed says what is wrong with a document another application
	// wrote (a paused field that is not a boolean); such a queue is not
	// paused.
	Malformed string
}

// pauses caches the paused queues for the claims of one Store and its
// copies.
type pauses struct {
	readCache
	paused map[string]bool
	warned map[string]string // queue → the malformed value last logged
}

func newPauses() *pauses {
	return &pauses{readCache: readCache{refresh: PauseRefresh}, warned: map[string]string{}}
}

// QueuesColl is the collection of the queues' states.
func (s *Store) QueuesColl() *mongo.Collection { return s.BesideJobs(DefaultQueuesCollection) }

// ValidQueueName reports what is wrong with q as a queue name, by the rule
// of enqueue: empty, longer than jobs.MaxNameBytes, not UTF-8, or holding
// a control character.
func ValidQueueName(q string) error {
	if err := storedQueueName(q); err != nil {
		return err
	}
	if p := NameProblem(q); p != "" {
		return fmt.Errorf("queue name %s", p)
	}
	return nil
}

// storedQueueName reports what makes q no queue name at all: empty, or
// longer than jobs.MaxNameBytes. A name another application stored may
// break enqueue's other rules: what undoes a state (Resume) takes it.
func storedQueueName(q string) error {
	switch {
	case q == "":
		return errors.New("a queue name is empty")
	case len(q) > jobs.MaxNameBytes:
		return fmt.Errorf("queue name %.20q… is %d bytes, more than %d", q, len(q), jobs.MaxNameBytes)
	}
	return nil
}

// Pause stops every worker claiming from queue within PauseRefresh (plus a
// claim in flight); jobs already running finish. A name enqueue would
// refuse (ValidQueueName) is refused. by, when set, records who
// paused it. It reports whether the queue was running until now (false:
// it was already paused, nothing changed).
func (s *Store) Pause(ctx context.Context, queue, by string) (bool, error) {
	if err := ValidQueueName(queue); err != nil {
		return false, fmt.Errorf("store: pause: %w", err)
	}
	set := Stamp(bson.D{{Key: "paused", Value: true}}, "paused", s.Now(), by)
	// Conditioned on not being paused, so that pausing twice keeps the
	// first pausedAt and says nothing changed; the upsert of a queue that
	// is already paused meets its _id: a duplicate key.
	_, err := s.QueuesColl().UpdateOne(ctx,
		bson.D{{Key: "_id", Value: queue}, {Key: "paused", Value: bson.D{{Key: "$ne", Value: true}}}},
		bson.D{{Key: "$set", Value: set}, {Key: "$unset", Value: bson.D{{Key: "resumedAt", Value: ""}, {Key: "resumedBy", Value: ""}}}},
		options.UpdateOne().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: pause %s: %w", queue, err)
	}
	s.pauses.forget()
	return true, nil
}

// Resume lets workers claim from queue again, within PauseRefresh. It
// reports whether the queue was paused (or its document malformed) until
// now. Any name that can be stored is taken, so that a queue another
// application paused under a name enqueue refuses can be resumed.
func (s *Store) Resume(ctx context.Context, queue, by string) (bool, error) {
	if err := storedQueueName(queue); err != nil {
		return false, fmt.Errorf("store: resume: %w", err)
	}
	set := Stamp(bson.D{{Key: "paused", Value: false}}, "resumed", s.Now(), by)
	res, err := s.QueuesColl().UpdateOne(ctx,
		bson.D{{Key: "_id", Value: queue}, {Key: "paused", Value: bson.D{{Key: "$ne", Value: false}}}},
		bson.D{{Key: "$set", Value: set}})
	if err != nil {
		return false, fmt.Errorf("store: resume %s: %w", queue, err)
	}
	s.pauses.forget()
	return res.MatchedCount > 0, nil
}

// QueueStates returns the stored state of every queue that has one and is
// not plainly running: the paused ones, and those whose document another
// application wrote malformed. Queues are in name order.
func (s *Store) QueueStates(ctx context.Context) ([]QueueState, error) {
	return ReadQueues(ctx, s, bson.D{{Key: "paused", Value: bson.D{{Key: "$ne", Value: false}}}}, "paused queues", queueState)
}

// ReadQueues reads the queues documents matching filter, in name order,
// each decoded field by field with decode; what names them in errors.
func ReadQueues[T any](ctx context.Context, c *Store, filter bson.D, what string, decode func(bson.Raw) T) ([]T, error) {
	var out []T
	err := eachFound(ctx, c.QueuesColl(), filter, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}), func(d bson.Raw) error {
		out = append(out, decode(d))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", what, err)
	}
	return out, nil
}

// queueState reads one queues document field by field.
func queueState(d bson.Raw) QueueState {
	var s QueueState
	name, bad := StoredName(d, "queue")
	if bad != "" {
		return QueueState{Queue: name, Malformed: bad}
	}
	s.Queue = name
	switch v := d.Lookup("paused"); {
	case v.Type == bson.TypeBoolean:
		s.Paused = v.Boolean()
	case v.Type == 0:
		s.Malformed = "no paused field"
	default:
		s.Malformed = fmt.Sprintf("paused is %s %s, not a boolean", v.Type, v)
	}
	s.PausedAt, s.PausedBy = StoredStamp(d, "paused")
	return s
}

// unpaused returns the queues of qs that are not paused, as last read, and
// whether that answer is stale: older than PauseRefresh. A stale answer
// that pauses none of qs is used without reading again, so that an idle
// worker's empty claims read nothing; a claim that takes jobs with it calls
// confirmUnpaused, which reads the paused queues and gives back the jobs of
// a queue paused since. A stale answer that pauses one of qs is read again
// at once (else a resumed queue would wait for a claim that never takes
// anything). When a read fails it keeps the last paused set (none before
// the first read) and logs: the claim that follows meets the same server
// and reports its error itself.
func (s *Store) unpaused(ctx context.Context, qs []string) (out []string, stale bool) {
	p := s.pauses
	p.mu.Lock()
	defer p.mu.Unlock()
	paused := func(q string) bool { return p.paused[q] }
	never := p.readAt.IsZero()
	stale = p.stale()
	if stale && (never || slices.ContainsFunc(qs, paused)) && s.readPauses(ctx) == nil {
		stale = false
	}
	if len(p.paused) == 0 {
		return qs, stale
	}
	return slices.DeleteFunc(slices.Clone(qs), paused), stale
}

// readPauses reads the paused queues into the cache. s.pauses.mu held.
func (s *Store) readPauses(ctx context.Context) error {
	p := s.pauses
	t := time.Now()
	states, err := s.QueueStates(ctx)
	if err != nil {
		s.log.Warn("reading the paused queues failed; claiming with the last known", zap.Error(err))
		return err
	}
	p.read(t)
	p.paused = map[string]bool{}
	for _, st := range states {
		if s.WarnMalformed(p.warned, st.Queue, st.Malformed,
			"a queues document is malformed: the queue is NOT paused; `docketctl pause` or `resume` rewrites it") {
			continue
		}
		p.paused[st.Queue] = st.Paused
	}
	return nil
}

// WarnMalformed reports whether problem is set: another app wrote the
// queue's document malformed. It logs msg once per queue and problem;
// warned remembers what was logged.
func (s *Store) WarnMalformed(warned map[string]string, queue, problem, msg string) bool {
	if problem != "" && warned[queue] != problem {
		warned[queue] = problem
		s.log.Warn(msg, zap.String("queue", queue), zap.String("problem", problem))
	}
	return problem != ""
}

// confirmUnpaused is called after a claim made with a stale answer of
// unpaused took claimed: it reads the paused queues and, when the queue of
// one of the jobs has been paused since, gives every job of the claim back
// (uncounted, as if the claim had not been made) and returns false; the
// caller claims again with what it read. A failed read keeps the jobs, as
// unpaused claims with the last known set. A failed give-back is returned:
// the caller's claim then fails with the jobs still under its token, which
// a worker gives back as it does after any claim error (ReleaseClaim).
func (s *Store) confirmUnpaused(ctx context.Context, claimed []*jobs.Job) (bool, error) {
	p := s.pauses
	p.mu.Lock()
	err := s.readPauses(ctx)
	var paused string
	for _, j := range claimed {
		if err == nil && p.paused[j.Queue] {
			paused = j.Queue
			break
		}
	}
	p.mu.Unlock()
	if paused == "" {
		return true, nil
	}
	for _, j := range claimed {
		if err := s.Release(ctx, LeaseOf(j)); err != nil && !errors.Is(err, jobs.ErrLeaseLost) {
			return false, fmt.Errorf("store: claim: giving back the jobs of queue %s, paused since the claim was sent: %w", paused, err)
		}
	}
	s.log.Info("gave back the jobs of a claim that met a queue paused a moment ago: not run, attempts not counted",
		zap.String("queue", paused), zap.Int("jobs", len(claimed)))
	return false, nil
}

// readCache is what a cache of stored settings (the paused queues, the
// limits) keeps of its last read; mu guards the whole cache.
type readCache struct {
	mu      sync.Mutex
	readAt  time.Time // when the last read was sent; zero: none, or forgotten
	took    time.Duration
	refresh time.Duration
}

// stale reports whether the last read is no longer trusted: there was
// none, or it is older than refresh, or on a slow server than twice what
// it took, so that re-reading does not take most of the server's time for
// a claim (each read is a command in the claim's line). c.mu held.
func (c *readCache) stale() bool {
	return c.readAt.IsZero() || time.Since(c.readAt) >= max(c.refresh, 2*c.took)
}

// read notes a read sent at sent that has just returned. c.mu held.
func (c *readCache) read(sent time.Time) { c.readAt, c.took = sent, time.Since(sent) }

// forget makes the next claim of this client read again.
func (c *readCache) forget() {
	c.mu.Lock()
	c.readAt = time.Time{}
	c.mu.Unlock()
}
