// Package leadership elects one leader among docket's processes, so that
// work that must not grow with the number of processes (the reaper,
// retention, sweepers, periodic jobs) runs in one of them.
//
// The leader holds a lease document in the database, one per leadership
// name: {_id: name, owner, token, term, version, renewedAt, electedAt}.
// Every write to it is a compare-and-set on the token and version the
// writer last read, so two processes never both win a round.
//
// No process compares its clock with another's. The leader counts its own
// lease from the moment it sent its last successful renewal; a follower
// counts from the moment it first saw the document's current version, and
// takes over only once that version has stayed unchanged for the whole TTL
// on its own clock. The renewal was applied after it was sent and seen after
// it was applied, so the leader stops trusting its term (TTL minus a safety
// margin after sending) before any follower can take the lease: at no moment
// do two live processes each believe they lead. A process that stalls (a
// SIGSTOP, a VM pause) resumes past its trusted term and knows it no longer
// leads; work it had already started must be harmless to repeat, which is
// true of every maintenance pass docket runs (each write is fenced on what
// it read).
//
// A machine that was suspended (a laptop's sleep, some VM pauses) is
// another matter: Go's monotonic clock stops during a system suspend on
// Linux, so a leader that slept for longer than its TTL would count its
// term as barely begun. Its wall clock kept running, though: the leader
// reads both clocks when it sends a renewal, and when the wall clock has
// since moved further than the monotonic one by more than suspendTolerance,
// it takes the term as lost, at its next check, as if it had expired; the
// election then goes its normal way. A wall clock set back changes nothing:
// the term is counted on the monotonic clock.
//
// A slow server does not cost the leader its lease: a renewal may wait for
// its reply for as long as the lease it renews still holds (until the
// leader's trusted end of its term), not a fixed interval, so a renewal
// queued behind seconds of other commands still lands. One renewal is in
// flight at a time, and the next is sent an Interval after the last was
// sent, or at once when its reply took longer. A reply that comes after the
// trusted end is not trusted: the leader has already stopped leading, and
// stays stopped. A leader keeps its lease on a server that answers it
// within (TTL - 1 s) / 2, 7 s at the default TTL.
package leadership

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
)

// Defaults for Config.
const (
	// DefaultName is the leadership docket's maintenance runs under.
	DefaultName = "maintenance"
	// DefaultTTL is how long a leader that stopped renewing keeps the lease.
	DefaultTTL = 15 * time.Second
	// DefaultCollection holds the lease documents.
	DefaultCollection = "leaders"
)

// safetyMargin is taken off the leader's own count of its term, against the
// clocks of two machines running at slightly different rates.
const safetyMargin = time.Second

// suspendTolerance is how much further than the monotonic clock the wall
// clock may move during a term before the leader takes it for a suspend
// (or a wall clock set forward) and stops leading.
const suspendTolerance = time.Second

// MinTTL is the shortest TTL: the safety margin must be a small part of it.
const MinTTL = 3 * safetyMargin

// Config configures an Elector.
type Config struct {
	// ID names this process in the lease document and the logs. Required.
	ID string
	// Name is the leadership to take part in. Defaults to DefaultName.
	Name string
	// TTL is how long the lease outlives its leader's last renewal.
	// Defaults to DefaultTTL; at least 3 s.
	TTL time.Duration
	// Interval is how often the leader renews. Defaults to TTL/3; at most
	// TTL/2, so a leader renews at least twice per TTL. A renewal may wait
	// for its reply until the leader's term would end, however long the
	// interval; the next is sent an interval after it was, or at once
	// after a slower reply. A follower looks at the lease once per TTL
	// while a leader renews it, and about every Interval when its look
	// fails or it lost a try to take the lease.
	Interval time.Duration
	// Logger receives the elector's logs. Defaults to a no-op logger.
	Logger *zap.Logger
}

// WithDefaults returns c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	c.Name = cmp.Or(c.Name, DefaultName)
	c.TTL = cmp.Or(c.TTL, DefaultTTL)
	c.Interval = cmp.Or(c.Interval, c.TTL/3)
	c.Logger = cmp.Or(c.Logger, zap.NewNop())
	return c
}

// Validate reports the first invalid field, naming it and its value.
func (c Config) Validate() error {
	switch {
	case c.ID == "":
		return errors.New("leadership: ID must not be empty")
	case c.TTL < MinTTL:
		return fmt.Errorf("leadership.ttl: %s must be at least %s", c.TTL, MinTTL)
	case c.Interval <= 0 || c.Interval > c.TTL/2:
		return fmt.Errorf("leadership.interval: %s must be positive and at most half the ttl (%s)", c.Interval, c.TTL/2)
	}
	return nil
}

// Term is one uninterrupted leadership of this process.
type Term struct {
	// Number counts the terms of the leadership, across processes: a new
	// leader's term is higher than every earlier one.
	Number int64
	// Token is the term's own fresh id.
	Token string
}

// Elector takes part in one leadership. Run it; ask Leading whenever it
// matters.
type Elector struct {
	coll *mongo.Collection
	cfg  Config
	log  *zap.Logger

	mu       sync.Mutex
	term     Term
	leading  bool
	trusted  time.Time // monotonic: the leader trusts its term until then
	renewed  reading   // when the renewal (or election) that set trusted was sent
	version  int64     // the lease document's version as this leader wrote it
	seen     bson.Raw  // a follower's last look at the lease document
	seenAt   time.Time // monotonic: when seen first looked that way
	changes  chan struct{}
	clock    func() reading // readClock; tests move it
	pauseFor func()         // tests: called before each round
}

// A reading is the clock read once: mono keeps Go's monotonic reading, by
// which the elector counts its term; wall is the wall clock alone.
type reading struct{ mono, wall time.Time }

func readClock() reading {
	t := time.Now()
	return reading{mono: t, wall: t.Round(0)}
}

// slept is how much further the wall clock moved than the monotonic one
// from r to now: about zero, unless the machine was suspended in between
// (or its wall clock set forward); negative when the wall clock was set back.
func (r reading) slept(now reading) time.Duration {
	return now.wall.Sub(r.wall) - now.mono.Sub(r.mono)
}

// New returns an Elector for the leadership cfg.Name, with its lease
// document in coll.
func New(coll *mongo.Collection, cfg Config) (*Elector, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Elector{
		coll:    coll,
		cfg:     cfg,
		log:     cfg.Logger.Named("leadership").With(zap.String("leadership", cfg.Name), zap.String("id", cfg.ID)),
		changes: make(chan struct{}, 1),
		clock:   readClock,
	}, nil
}

// Leading reports whether this process leads now, and its term. It
// consults only memory and the clock: call it before each pass of
// leader-only work. A leader that finds its machine was suspended since its
// last renewal stops leading here.
func (e *Elector) Leading() (Term, bool) {
	now := e.clock()
	e.mu.Lock()
	if !e.leading {
		e.mu.Unlock()
		return Term{}, false
	}
	if slept := e.renewed.slept(now); slept > suspendTolerance {
		e.leading, e.seen = false, nil
		e.mu.Unlock()
		e.log.Warn("no longer leading: the machine was suspended (or its wall clock set forward) since the last renewal",
			zap.Duration("wallAheadOfMonotonic", slept))
		e.notify()
		return Term{}, false
	}
	defer e.mu.Unlock()
	if now.mono.Before(e.trusted) {
		return e.term, true
	}
	return Term{}, false
}

// Changes receives a value whenever this process gains or loses the
// leadership (coalesced: read Leading for the state).
func (e *Elector) Changes() <-chan struct{} { return e.changes }

// Run takes part in the election until ctx ends, then resigns if it leads,
// so that another process takes over at its next look rather than after
// the TTL.
func (e *Elector) Run(ctx context.Context) {
	defer e.resign()
	for {
		if e.pauseFor != nil {
			e.pauseFor()
		}
		wait := e.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// round renews the lease when leading, or looks at it (and takes it when it
// has expired) when following. It returns how long to wait before the next.
// Rounds run one after the other: one renewal at most is in flight.
func (e *Elector) round(ctx context.Context) time.Duration {
	e.Leading() // a leader whose machine was suspended stops here, before renewing
	e.mu.Lock()
	leading, term, version, trusted, renewed := e.leading, e.term, e.version, e.trusted, e.renewed
	e.mu.Unlock()
	if leading {
		sent := e.clock()
		e.renew(ctx, term, version, trusted, renewed)
		// At once after a slow reply: the term's end is nearer.
		return max(0, e.cfg.Interval-e.clock().mono.Sub(sent.mono))
	}
	return e.follow(ctx)
}

// soon is the wait before a follower's next look when it does not know the
// lease's state: its read failed, or it tried to take the lease and lost
// (another process took it, or the write failed). Jittered, so that
// followers do not all look again in the same instant.
func (e *Elector) soon() time.Duration {
	return e.cfg.Interval/2 + rand.N(e.cfg.Interval)
}

// jitter is added to a follower's wait for a lease's expiry: followers that
// first looked at the same moment (processes started together) drift apart
// by it at every look, so that on a leader's death they do not all try to
// take the lease in the same instant. A tenth of the TTL keeps the added
// delay small (1.5 s at the default) whatever the interval.
func (e *Elector) jitter() time.Duration {
	return rand.N(e.cfg.TTL/10 + 1)
}

// renew renews the lease of term, at version, that this leader trusts
// until trusted, since the renewal sent at renewed. It waits for the reply
// until then and no longer: a reply after it would renew a term the leader
// has already stopped trusting. A suspend of the machine since renewed
// ends the term whatever the reply.
func (e *Elector) renew(ctx context.Context, term Term, version int64, trusted time.Time, renewed reading) {
	ctx, cancel := context.WithDeadline(ctx, trusted)
	defer cancel()
	sent := e.clock()
	res, err := e.coll.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: e.cfg.Name}, {Key: "token", Value: term.Token}, {Key: "version", Value: version}},
		bson.D{
			{Key: "$inc", Value: bson.D{{Key: "version", Value: int64(1)}}},
			{Key: "$currentDate", Value: bson.D{{Key: "renewedAt", Value: true}}},
		})
	now := e.clock()
	switch {
	case !now.mono.Before(trusted):
		// Whatever the reply, it came after the term's trusted end: the
		// leader stopped leading then (Leading said so), and a follower
		// may have taken over since.
		e.lose("the lease could not be renewed before the term's end", err)
	case renewed.slept(now) > suspendTolerance || sent.slept(now) > suspendTolerance:
		// The machine slept: the monotonic clock says the term holds, but
		// for all the leader knows a follower has taken over meanwhile.
		e.lose("the machine was suspended (or its wall clock set forward) during the term", err)
	case err != nil:
		// The lease may still be ours: keep trusting it until its end.
		if _, ok := e.Leading(); !ok {
			e.lose("the lease could not be renewed before the term's end", err)
		} else {
			e.log.Warn("renewing the leadership failed; retrying", zap.Error(err))
		}
	case res.MatchedCount == 0:
		e.lose("another process took the lease", nil)
	default:
		e.mu.Lock()
		e.version = version + 1
		e.trusted = sent.mono.Add(e.cfg.TTL - safetyMargin)
		e.renewed = sent
		e.mu.Unlock()
	}
}

// follow looks at the lease, takes it when it has expired or was given up,
// and returns the wait before the next look. A follower may take a lease
// only once it has seen the same version of it for a whole TTL, so it has
// nothing to learn before then: after seeing a new version, its next look
// is a TTL (and a jitter) later. A follower costs one read per TTL while a
// leader renews. Takeover after a leader's last renewal comes between one
// TTL and two, plus up to two jitters: the look just before that renewal
// saw an older version and waits a TTL, the next sees the last version and
// waits a TTL more. Looking every Interval would take over no sooner: it
// also comes within two TTLs.
func (e *Elector) follow(ctx context.Context) time.Duration {
	// A look may wait as long as a lease lasts: how long it took does not
	// matter, since the follower counts from the moment its reply came.
	lctx, cancel := context.WithTimeout(ctx, e.cfg.TTL-safetyMargin)
	raw, err := e.coll.FindOne(lctx, bson.D{{Key: "_id", Value: e.cfg.Name}}).Raw()
	cancel()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return e.take(ctx, nil)
	}
	if err != nil {
		e.log.Warn("reading the leadership failed; retrying", zap.Error(err))
		return e.soon()
	}
	// The time the reply came back, not the time the read was sent: the
	// version read may have been written after that.
	now := e.clock().mono
	e.mu.Lock()
	if string(e.seen) != string(raw) {
		e.seen, e.seenAt = append(bson.Raw(nil), raw...), now
		e.mu.Unlock()
		if token, _ := raw.Lookup("token").StringValueOK(); token != "" {
			return e.cfg.TTL + e.jitter() // a leader renewed it since our last look
		}
		return e.take(ctx, raw) // resigned: no need to wait
	}
	left := e.seenAt.Add(e.cfg.TTL).Sub(now)
	e.mu.Unlock()
	if left > 0 {
		return left + e.jitter()
	}
	return e.take(ctx, raw)
}

// take tries to take the lease prev (nil: there is none) and returns the
// wait before the next round: a new leader renews after an Interval.
func (e *Elector) take(ctx context.Context, prev bson.Raw) time.Duration {
	if e.elect(ctx, prev) {
		return e.cfg.Interval
	}
	return e.soon()
}

// elect takes the lease: by inserting it when there is none (prev nil),
// else by replacing exactly the document prev, as read. It reports whether
// this process won.
func (e *Elector) elect(ctx context.Context, prev bson.Raw) bool {
	term := Term{Number: 1, Token: uuid.NewString()}
	version := int64(1)
	if prev != nil {
		if n, ok := prev.Lookup("term").AsInt64OK(); ok {
			term.Number = n + 1
		}
		if v, ok := prev.Lookup("version").AsInt64OK(); ok {
			version = v + 1
		}
	}
	doc := bson.D{
		{Key: "_id", Value: e.cfg.Name},
		{Key: "owner", Value: e.cfg.ID},
		{Key: "token", Value: term.Token},
		{Key: "term", Value: term.Number},
		{Key: "version", Value: version},
		{Key: "electedAt", Value: time.Now().UTC()},
		{Key: "renewedAt", Value: time.Now().UTC()},
	}
	sent := e.clock()
	// The term it takes would be trusted until sent+TTL-margin: wait for
	// the reply until then, and take a later one as lost.
	trusted := sent.mono.Add(e.cfg.TTL - safetyMargin)
	ctx, cancel := context.WithDeadline(ctx, trusted)
	defer cancel()
	var won bool
	if prev == nil {
		_, err := e.coll.InsertOne(ctx, doc)
		if err != nil && !mongo.IsDuplicateKeyError(err) {
			e.log.Warn("taking the leadership failed; retrying", zap.Error(err))
		}
		won = err == nil
	} else {
		// Match the lease as read: every write to it (ours, or another
		// elector's) changes its version or its token, so a lease anyone
		// wrote since is left alone.
		filter := bson.D{{Key: "_id", Value: e.cfg.Name}}
		for _, f := range []string{"token", "version", "owner"} {
			filter = append(filter, bson.E{Key: f, Value: asRead(prev.Lookup(f))})
		}
		res, err := e.coll.ReplaceOne(ctx, filter, doc)
		if err != nil {
			e.log.Warn("taking the leadership failed; retrying", zap.Error(err))
		}
		won = err == nil && res.MatchedCount == 1
	}
	if !won {
		return false
	}
	if now := e.clock(); !now.mono.Before(trusted) || sent.slept(now) > suspendTolerance {
		// Won, but too late to trust (or the machine slept meanwhile): the
		// lease lapses unrenewed, and a follower (this one too) takes it
		// after a TTL.
		e.log.Warn("took the leadership too late to lead; it lapses", zap.Int64("term", term.Number))
		return false
	}
	e.mu.Lock()
	e.leading, e.term, e.version = true, term, version
	e.trusted, e.renewed = trusted, sent
	e.seen = nil
	e.mu.Unlock()
	e.log.Info("leading", zap.Int64("term", term.Number))
	e.notify()
	return true
}

// asRead matches a lease field holding v as read: absent, or as
// store.AsRead matches a value (by its type a regex or an operator-shaped
// document another program wrote, which an elector's write changes).
func asRead(v bson.RawValue) any {
	if v.Type == 0 {
		return bson.D{{Key: "$exists", Value: false}}
	}
	return store.AsRead(v)
}

func (e *Elector) lose(why string, err error) {
	e.mu.Lock()
	was := e.leading
	e.leading, e.seen = false, nil
	e.mu.Unlock()
	if was {
		e.log.Warn("no longer leading: "+why, zap.Error(err))
		e.notify()
	}
}

// resign gives the lease up, so that a follower takes it at its next look.
func (e *Elector) resign() {
	term, leading := e.Leading()
	e.mu.Lock()
	version := e.version
	e.leading = false
	e.mu.Unlock()
	if !leading {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Interval)
	defer cancel()
	_, err := e.coll.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: e.cfg.Name}, {Key: "token", Value: term.Token}, {Key: "version", Value: version}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "token", Value: ""}, {Key: "owner", Value: ""}}}, {Key: "$inc", Value: bson.D{{Key: "version", Value: int64(1)}}}})
	if err != nil {
		e.log.Warn("resigning failed; the lease expires after its ttl", zap.Error(err))
		return
	}
	e.log.Info("resigned", zap.Int64("term", term.Number))
	e.notify()
}

func (e *Elector) notify() {
	select {
	case e.changes <- struct{}{}:
	default:
	}
}
