package store

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.uber.org/zap"
)

// Concurrency limits: at most N jobs of a kind ("kind:NAME"), or of a
// queue ("queue:NAME"), run at once across every worker process.
//
// The limit is stored in the limits collection, {_id: "kind:email",
// limit: 3, limitSetAt, limitSetBy}, and read by every claim through a
// cache of at most LimitRefresh.
//
// A running job of a limited kind holds a run slot, kindRunSlot:
// "<kind>/<k>" with k in [0, N), taken by the claim's own write under a
// unique sparse index; a job of a limited queue holds queueRunSlot:
// "<queue>/<k>" the same way (a job under both limits holds both). Two
// running jobs can never hold one slot, so at every moment at most N jobs
// of the limit hold one. The slot is freed by the write that ends or gives
// back the attempt, in the same write (Finish and requeue, lease.go):
// complete, CompleteMany, fail (retry or dead), cancelled, release,
// ReleaseClaim, and the reaper's re-queue, which is fenced on the expired
// lease; a worker that stalls or dies keeps its slots until the reaper
// takes its jobs back, never while its lease holds.
//
// A claim whose queues or kinds have limits first reads the running jobs
// of those limits (one find), or takes what a recent read showed (a view,
// runload.go): which slots are held, and how many running
// jobs hold none (claimed before the limit was set, by a worker that had
// not yet read it, or by an older docket). It leaves out of its filter the
// kinds and queues whose limit is full, so a full limit costs no claim a
// read of its jobs, and claims the rest: jobs of no limit as any claim, and
// each job of a limit with a write of its own that stamps a free slot
// (a batch cannot stamp k different slots with one updateMany). As with a
// capacity, a running job holding no slot counts, and a claim takes only
// slots below N minus their number (see QueueLoad.FreeSlots).

// DefaultLimitsCollection holds the concurrency limits, beside the default
// jobs collection; a Store on another jobs collection C uses C_limits.
const DefaultLimitsCollection = "limits"

// LimitRefresh is how long a claim trusts the limits it read: a limit set
// or cleared by another process applies to this one's claims within it
// (within twice a read's time, when reading them takes longer: a slow
// server).
// SetLimit and ClearLimit apply at once to the client that calls them.
const LimitRefresh = time.Second

// MaxLimit bounds a concurrency limit: a claim reads the running jobs of
// the limit, up to that many.
const MaxLimit = 10_000

// The job fields holding run slots, and the names of their unique sparse
// indexes.
const (
	kindRunSlotField  = "kindRunSlot"
	queueRunSlotField = "queueRunSlot"
	// KindRunSlotIndex is the name of the unique sparse index on
	// kindRunSlot.
	KindRunSlotIndex = kindRunSlotField
	// QueueRunSlotIndex is the name of the unique sparse index on
	// queueRunSlot.
	QueueRunSlotIndex = queueRunSlotField
)

// The scopes of a limit's name.
const (
	kindScope  = "kind:"
	queueScope = "queue:"
)

// KindLimit is the name of the concurrency limit on the jobs of kind.
func KindLimit(kind string) string { return kindScope + kind }

// QueueLimit is the name of the concurrency limit on the jobs of queue.
func QueueLimit(queue string) string { return queueScope + queue }

// limitScope returns the job field that limit name (valid) selects on,
// "kind" or "queue", and its value there.
func limitScope(name string) (field, target string) {
	if t, ok := strings.CutPrefix(name, kindScope); ok {
		return "kind", t
	}
	return "queue", strings.TrimPrefix(name, queueScope)
}

// jobLimits are the names of the limits a job of kind in queue is under,
// when they are set: its kind's, then its queue's.
func jobLimits(kind, queue string) [2]string { return [2]string{KindLimit(kind), QueueLimit(queue)} }

// claimLimits are the names of the limits on p's kinds, then on its
// queues.
func claimLimits(p ClaimParams) []string {
	names := make([]string, 0, len(p.Kinds)+len(p.Queues))
	for _, k := range p.Kinds {
		names = append(names, KindLimit(k))
	}
	for _, q := range p.Queues {
		names = append(names, QueueLimit(q))
	}
	return names
}

// slotField is the job field holding a run slot of limit name: of its
// total, or (part) of one of its partitions.
func slotField(name string, part bool) string {
	kind := strings.HasPrefix(name, kindScope)
	switch {
	case kind && part:
		return kindPartSlotField
	case kind:
		return kindRunSlotField
	case part:
		return queuePartSlotField
	}
	return queueRunSlotField
}

// ParseLimitName checks a limit's name, "kind:NAME" or "queue:NAME", and
// returns whether it is a kind's and the kind's or queue's name.
func ParseLimitName(name string) (isKind bool, target string, err error) {
	switch {
	case strings.HasPrefix(name, kindScope):
		target = name[len(kindScope):]
		if target == "" {
			return false, "", fmt.Errorf("limit %q: the kind is empty", name)
		}
		if p := NameProblem(target); p != "" {
			return false, "", fmt.Errorf("limit %q: kind %s", name, p)
		}
		return true, target, nil
	case strings.HasPrefix(name, queueScope):
		target = name[len(queueScope):]
		if err := ValidQueueName(target); err != nil {
			return false, "", fmt.Errorf("limit %q: %w", name, err)
		}
		return false, target, nil
	}
	return false, "", fmt.Errorf("limit %q: a limit is named kind:KIND or queue:QUEUE", name)
}

// RunLimit is one stored concurrency limit.
type RunLimit struct {
	// Name is "kind:KIND" or "queue:QUEUE".
	Name string
	// Limit is the most jobs of it that run at once.
	Limit int
	// Running is how many of its jobs run now: those holding a slot and
	// those holding none (filled by RunLimits only).
	Running int
	SetAt   time.Time
	SetBy   string
	// Malformed says what is wrong with a limit another application wrote
	// (not an integer between 0 and MaxLimit); such a limit limits
	// nothing.
	Malformed string
	// NoTotal: only the partition limit applies (Limit is 0 and means
	// nothing).
	NoTotal bool
	// PartitionBy, when set, is the args field whose every value gets
	// its own limit, PartitionLimit jobs running at once (partition.go).
	PartitionBy    string
	PartitionLimit int
	// Partitions is how many values of PartitionBy have jobs running now,
	// and Saturated how many of them run PartitionLimit jobs or more
	// (filled by RunLimits only).
	Partitions, Saturated int
	PartitionSetAt        time.Time
	PartitionSetBy        string
}

// Use says how much of l is used: "2 / 3 running", and for a partitioned
// limit "; 2 per customerId: 1 of 4 partitions running full" (l.Running,
// l.Partitions and l.Saturated as RunLimits fills them). The field's name
// comes from the database: a caller escapes it for where it shows it.
func (l RunLimit) Use() string {
	s := fmt.Sprintf("%d / %d running", l.Running, l.Limit)
	if l.NoTotal {
		s = fmt.Sprintf("%d running", l.Running)
	}
	if l.PartitionBy != "" {
		s += fmt.Sprintf("; %d per %s: %d of %d partitions running full", l.PartitionLimit, l.PartitionBy, l.Saturated, l.Partitions)
	}
	return s
}

// Binding reports whether l lets no job start now: its total is reached.
// (A partition running full binds only its own jobs.)
func (l RunLimit) Binding() bool { return l.Malformed == "" && !l.NoTotal && l.Running >= l.Limit }

// runLimits caches the limits for the claims of one Store and its copies.
type runLimits struct {
	readCache
	totals map[string]int // by limit name: those with a total
	warned map[string]string
	setAt  map[string]time.Time
	parts  partSpecs // partition.go
	loads  *runLoads // runload.go
}

func newRunLimits() *runLimits {
	return &runLimits{readCache: readCache{refresh: LimitRefresh}, warned: map[string]string{}, loads: newRunLoads()}
}

// limitsColl is the collection of the limits.
func (s *Store) limitsColl() *mongo.Collection { return s.BesideJobs(DefaultLimitsCollection) }

// BesideJobs is the collection named name beside the default jobs
// collection (beside another jobs collection C, C_name), read on the
// primary and written with the jobs' write concern.
func (s *Store) BesideJobs(name string) *mongo.Collection {
	wc, _ := ParseWriteConcern(s.cfg.WriteConcern)
	return s.coll.Database().Collection(s.besideJobsName(name), options.Collection().SetWriteConcern(wc).SetReadPreference(readpref.Primary()))
}

// besideJobsName is name beside the default jobs collection; beside
// another jobs collection C, C_name.
func (s *Store) besideJobsName(name string) string {
	if s.cfg.Collection != DefaultCollection {
		return s.cfg.Collection + "_" + name
	}
	return name
}

// SetLimit limits the jobs of name ("kind:KIND", "queue:QUEUE") that run
// at once, across every worker process, to n (0: none runs). It applies at
// once to this client's claims and within LimitRefresh to every other
// worker's. Lowering it below the jobs running now stops none: claims wait
// until fewer than n run. by, when set, records who set it.
func (s *Store) SetLimit(ctx context.Context, name string, n int, by string) error {
	_, err := limitsWrite("set limit", name, limitProblem(n), func() (bool, error) {
		return true, s.setLimitsDoc(ctx, name, bson.D{{Key: "limit", Value: n}}, "limit", by)
	})
	return err
}

// limitProblem says what is wrong with n as a limit, nil when nothing.
func limitProblem(n int) error {
	if n < 0 || n > MaxLimit {
		return fmt.Errorf("%d must be between 0 and %d", n, MaxLimit)
	}
	return nil
}

// limitsWrite makes write, a change of the limits collection for limit
// name, when name is valid and invalid nil (what is wrong with the value
// written); its errors name op and name.
func limitsWrite(op, name string, invalid error, write func() (bool, error)) (bool, error) {
	if _, _, err := ParseLimitName(name); err != nil {
		return false, fmt.Errorf("store: %s: %w", op, err)
	}
	if invalid != nil {
		return false, fmt.Errorf("store: %s %s: %w", op, name, invalid)
	}
	found, err := write()
	if err != nil {
		return false, fmt.Errorf("store: %s %s: %w", op, name, err)
	}
	return found, nil
}

// setLimitsDoc sets fields, with PREFIXSetAt now and PREFIXSetBy by (when
// set), in the limits collection's document id, creating it when missing,
// and makes this client's next claim read the limits again.
func (s *Store) setLimitsDoc(ctx context.Context, id string, fields bson.D, prefix, by string) error {
	_, err := s.limitsColl().UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$set", Value: Stamp(fields, prefix+"Set", s.Now(), by)}}, options.UpdateOne().SetUpsert(true))
	if err != nil {
		return err
	}
	s.limits.forget()
	return nil
}

// deleteLimitsDoc deletes the limits collection's document id, reporting
// whether there was one, and makes this client's next claim read the
// limits again.
func (s *Store) deleteLimitsDoc(ctx context.Context, id string) (bool, error) {
	res, err := s.limitsColl().DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return false, err
	}
	s.limits.forget()
	return res.DeletedCount > 0, nil
}

// ClearLimit removes the limit name, its total and its partition limit
// (ClearPartitionLimit removes only the latter). It reports whether there
// was one. Running jobs keep their slots until they end, harmlessly.
func (s *Store) ClearLimit(ctx context.Context, name string) (bool, error) {
	return limitsWrite("clear limit", name, nil, func() (bool, error) { return s.deleteLimitsDoc(ctx, name) })
}

// RunLimits returns every stored limit, in name order, with how many of
// its jobs run now.
func (s *Store) RunLimits(ctx context.Context) ([]RunLimit, error) {
	ls, err := s.readLimits(ctx)
	if err != nil {
		return nil, err
	}
	totals, parts := map[string]int{}, partSpecs{}
	for _, l := range ls {
		if l.Malformed != "" {
			continue
		}
		// Every limit's running jobs are counted, a partitioned one's
		// against its total or, with none, against the most there are.
		totals[l.Name] = l.Limit
		if l.NoTotal {
			totals[l.Name] = MaxLimit
		}
		parts.add(l)
	}
	load, pload, err := s.readRunLoad(ctx, totals, parts)
	if err != nil {
		return nil, err
	}
	for i, l := range ls {
		if l.Malformed != "" {
			continue
		}
		ls[i].Running = load[l.Name].Count()
		for _, pl := range pload[l.Name] {
			ls[i].Partitions++
			if pl.Count() >= l.PartitionLimit {
				ls[i].Saturated++
			}
		}
	}
	return ls, nil
}

// readLimits reads the stored limits in name order.
func (s *Store) readLimits(ctx context.Context) ([]RunLimit, error) {
	var out []RunLimit
	var rates []bson.Raw
	err := eachFound(ctx, s.limitsColl(), bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}), func(d bson.Raw) error {
		if isRateDoc(d) { // rate.go
			rates = append(rates, d)
			return nil
		}
		out = append(out, runLimit(d))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: read limits: %w", err)
	}
	s.storeRates(rates)
	return out, nil
}

// runLimit reads one limits document field by field.
func runLimit(d bson.Raw) RunLimit {
	name, bad := StoredName(d, "limit")
	if bad != "" {
		return RunLimit{Name: name, Malformed: bad}
	}
	l := RunLimit{Name: name}
	if _, _, err := ParseLimitName(name); err != nil {
		l.Malformed = err.Error()
		return l
	}
	arg, bad := storedPartitionBy(d) // ratepart.go: as a rate's
	if bad != "" {
		l.Malformed = bad
		return l
	}
	if arg != "" {
		l.PartitionBy = arg
		if l.PartitionLimit, l.Malformed = StoredCount(d, "partitionLimit", MaxLimit); l.Malformed != "" {
			return l
		}
		l.PartitionSetAt, l.PartitionSetBy = StoredStamp(d, "partitionSet")
		if d.Lookup("limit").Type == 0 {
			l.NoTotal = true
			return l
		}
	}
	if l.Limit, l.Malformed = StoredCount(d, "limit", MaxLimit); l.Malformed != "" {
		return l
	}
	l.SetAt, l.SetBy = StoredStamp(d, "limitSet")
	return l
}

// limitsFor returns the limits, as read at most LimitRefresh ago (or twice
// the last read's time, on a slow server: see readCache.stale), on the
// kinds and the queues of p. A failed read fails the claim: claiming
// without knowing the limits could break them.
func (s *Store) limitsFor(ctx context.Context, p ClaimParams) (totals map[string]int, parts partSpecs, err error) {
	l := s.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := time.Now(); l.stale() {
		ls, err := s.readLimits(ctx)
		if err != nil {
			return nil, nil, err
		}
		l.read(t)
		l.totals, l.parts, l.setAt = map[string]int{}, partSpecs{}, map[string]time.Time{}
		for _, rl := range ls {
			if s.WarnMalformed(l.warned, rl.Name, rl.Malformed,
				"a limits document is malformed: it limits NOTHING; `docketctl limit` rewrites it") {
				continue
			}
			l.setAt[rl.Name] = rl.SetAt
			l.setAt[rl.Name+partSetAtKey] = rl.PartitionSetAt
			l.parts.add(rl)
			if !rl.NoTotal {
				l.totals[rl.Name] = rl.Limit
			}
		}
	}
	totals, parts = map[string]int{}, partSpecs{}
	for _, name := range claimLimits(p) {
		if n, ok := l.totals[name]; ok {
			totals[name] = n
		}
		if pl, ok := l.parts[name]; ok {
			parts[name] = pl
		}
	}
	return totals, parts, nil
}

// runLoadQuery is the filter and projection of readRunLoad's find: the
// running jobs of the limits totals and parts, with their slots (and
// partition fields). ok is false when no limit applies.
func runLoadQuery(totals map[string]int, parts partSpecs) (filter, proj bson.D, ok bool) {
	targets := map[string]map[string]bool{"kind": {}, "queue": {}}
	for _, names := range []iter.Seq[string]{maps.Keys(totals), maps.Keys(parts)} {
		for name := range names {
			field, target := limitScope(name)
			targets[field][target] = true
		}
	}
	var or bson.A
	for _, field := range []string{"kind", "queue"} {
		if len(targets[field]) > 0 {
			or = append(or, bson.D{{Key: field, Value: bson.D{{Key: "$in", Value: slices.Sorted(maps.Keys(targets[field]))}}}})
		}
	}
	if len(or) == 0 {
		return nil, nil, false
	}
	filter = bson.D{{Key: "state", Value: jobs.StateRunning}}
	if len(or) == 1 {
		filter = append(filter, or[0].(bson.D)...)
	} else {
		filter = append(filter, bson.E{Key: "$or", Value: or})
	}
	proj = bson.D{
		{Key: "_id", Value: 0}, {Key: "kind", Value: 1}, {Key: "queue", Value: 1},
		{Key: kindRunSlotField, Value: 1}, {Key: queueRunSlotField, Value: 1},
	}
	if len(parts) > 0 {
		proj = append(proj, bson.E{Key: kindPartSlotField, Value: 1}, bson.E{Key: queuePartSlotField, Value: 1})
		for _, f := range parts.argPaths() {
			proj = append(proj, bson.E{Key: "args." + f, Value: 1})
		}
	}
	return filter, proj, true
}

// runLoadRead is what readRunLoad read: each limit's load by name (the slots
// held and how many running jobs hold none), and each partitioned
// limit's loads by partition.
type runLoadRead struct {
	totals map[string]*QueueLoad
	parts  map[string]map[string]*partLoad
}

// count counts d, a running job, in the loads of the limits it is under.
func (r runLoadRead) count(d bson.Raw, parts partSpecs) {
	kind, _ := d.Lookup("kind").StringValueOK()
	queue, _ := d.Lookup("queue").StringValueOK()
	args, _ := d.Lookup("args").DocumentOK()
	for i, name := range jobLimits(kind, queue) {
		target := []string{kind, queue}[i]
		if load := r.totals[name]; load != nil {
			load.hold(target, d.Lookup(slotField(name, false)))
		}
		pl, ok := parts[name]
		if !ok {
			continue
		}
		v := partValue(args, pl.arg)
		p := partKey(pl.arg, v)
		if r.parts[name] == nil {
			r.parts[name] = map[string]*partLoad{}
		}
		load := r.parts[name][p]
		if load == nil {
			load = &partLoad{QueueLoad: QueueLoad{Slots: map[int]bool{}}, value: v, known: true}
			r.parts[name][p] = load
		}
		load.hold(partSlotTarget(target, p), d.Lookup(slotField(name, true)))
	}
}

// readRunLoad reads, with one find, the running jobs of the limits totals
// (name → limit) and of the partitioned ones of parts into their loads
// (runLoadRead).
func (s *Store) readRunLoad(ctx context.Context, totals map[string]int, parts partSpecs) (map[string]*QueueLoad, map[string]map[string]*partLoad, error) {
	r := runLoadRead{totals: map[string]*QueueLoad{}, parts: map[string]map[string]*partLoad{}}
	for name := range totals {
		r.totals[name] = &QueueLoad{Slots: map[int]bool{}}
	}
	filter, proj, ok := runLoadQuery(totals, parts)
	if !ok {
		return r.totals, r.parts, nil
	}
	err := eachFound(ctx, s.coll, filter, options.Find().SetProjection(proj), func(d bson.Raw) error {
		r.count(d, parts)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store: read the running jobs of the limits: %w", err)
	}
	return r.totals, r.parts, nil
}

// slotNumber returns k when slot is "<target>/<k>".
func slotNumber(target string, slot bson.RawValue) (int, bool) {
	s, ok := slot.StringValueOK()
	if !ok || !strings.HasPrefix(s, target+"/") {
		return 0, false
	}
	n := s[len(target)+1:]
	k, err := strconv.Atoi(n)
	if err != nil || k < 0 || strconv.Itoa(k) != n {
		return 0, false
	}
	return k, true
}

// slotPicker hands out, for one claim, the free run slots of the limits
// that apply to it, as read just before: of their totals, and of the
// partitions of the partitioned ones. Both are one mechanism: a set of
// slots a job takes one of (slotNeed).
type slotPicker struct {
	totals map[string]int   // limit name → total
	free   map[string][]int // the free slots of each total
	// parts are the partitioned limits, pload their partitions' loads by
	// limit name and partition, and pfree the free slots of the
	// partitions a job of the claim needed so far, by partName.
	parts partSpecs
	pload map[string]map[string]*partLoad
	pfree map[string][]int
	// sent are the jobs of the claim sent a stamp, by id (candidates.go).
	sent map[string]bool
}

// binds reports whether a limit of the claim has fewer than n slots free
// (a claim of n could not take n jobs of it), or a partitioned limit
// applies: where the claim's candidates are kept (candidates.go).
func (s *slotPicker) binds(n int) bool {
	if s.parts.any() {
		return true
	}
	for _, f := range s.free {
		if len(f) < n {
			return true
		}
	}
	return false
}

// markSent records that the job id is sent a stamp.
func (s *slotPicker) markSent(id string) {
	if s.sent == nil {
		s.sent = map[string]bool{}
	}
	s.sent[id] = true
}

// pickerState is what a claim's stamps take from a slotPicker.
type pickerState struct{ free, pfree map[string][]int }

// snapshot returns the free slots of s, for restore.
func (s *slotPicker) snapshot() pickerState {
	return pickerState{free: cloneSlots(s.free), pfree: cloneSlots(s.pfree)}
}

// restore makes the free slots of s what snapshot returned, and forgets
// the stamps sent since: for stamps that matched nothing, so took no slot.
func (s *slotPicker) restore(st pickerState) {
	s.free, s.pfree, s.sent = cloneSlots(st.free), cloneSlots(st.pfree), nil
}

func cloneSlots(m map[string][]int) map[string][]int {
	out := make(map[string][]int, len(m))
	for k, v := range m {
		out[k] = slices.Clone(v)
	}
	return out
}

// newSlotPicker returns the picker of the limits totals (name → limit)
// with their loads, and of the partitioned ones of parts with pload.
func newSlotPicker(totals map[string]int, load map[string]*QueueLoad, parts partSpecs, pload map[string]map[string]*partLoad) *slotPicker {
	s := &slotPicker{totals: totals, free: map[string][]int{}, parts: parts, pload: pload, pfree: map[string][]int{}}
	for name, n := range totals {
		s.free[name] = load[name].FreeSlots(n)
	}
	return s
}

// limited reports whether a job of kind in queue needs a slot.
func (s *slotPicker) limited(kind, queue string) bool {
	for _, name := range jobLimits(kind, queue) {
		_, total := s.totals[name]
		_, part := s.parts[name]
		if total || part {
			return true
		}
	}
	return false
}

// full reports whether limit name has no free slot left.
func (s *slotPicker) full(name string) bool { return len(s.free[name]) == 0 }

// narrow returns p without the kinds and queues whose limit is full, and
// with the saturated partitions of its partitioned ones left out of its
// filter, and whether any of p's kinds and queues is limited and still
// open.
func (s *slotPicker) narrow(p ClaimParams) (ClaimParams, bool) {
	open := false
	keep := func(targets []string, limit func(string) string) (out []string) {
		for _, t := range targets {
			name := limit(t)
			if _, ok := s.totals[name]; ok {
				if s.full(name) {
					continue
				}
				open = true
			}
			if _, ok := s.parts[name]; ok {
				open = true
			}
			out = append(out, t)
		}
		return out
	}
	p.Kinds, p.Queues = keep(p.Kinds, KindLimit), keep(p.Queues, QueueLimit)
	p.skip = s.saturated(p)
	return p, open
}

// slotNeed is one set of run slots a job takes one of: a limit's total's,
// or one partition's of a partitioned limit.
type slotNeed struct {
	free   map[string][]int // the picker's free or pfree
	key    string           // the set's key in free
	field  string           // the job field holding the slot
	prefix string           // the slot's value before "/<k>"
	limit  string           // the limit's name
	part   string           // the partition's key; "" for the total
}

// needs returns the sets of slots a job of kind in queue with args takes
// one of; ok is false when one of them has none free.
func (s *slotPicker) needs(kind, queue string, args bson.Raw) (needs []slotNeed, ok bool) {
	for i, name := range jobLimits(kind, queue) {
		target := [2]string{kind, queue}[i]
		if _, lim := s.totals[name]; lim {
			needs = append(needs, slotNeed{s.free, name, slotField(name, false), target, name, ""})
		}
		if pl, lim := s.parts[name]; lim {
			p := partKey(pl.arg, partValue(args, pl.arg))
			needs = append(needs, slotNeed{s.pfree, s.partFree(name, p, pl), slotField(name, true), partSlotTarget(target, p), name, p})
		}
	}
	for _, n := range needs {
		if len(n.free[n.key]) == 0 {
			return nil, false
		}
	}
	return needs, true
}

// take returns the slot fields for a job of kind in queue with args, and
// the slots they hold, taking a free slot of each limit and partition it
// is under; ok is false when one of them is full.
func (s *slotPicker) take(kind, queue string, args bson.Raw) (set bson.D, held []heldSlot, ok bool) {
	needs, ok := s.needs(kind, queue, args)
	for _, n := range needs {
		f := n.free[n.key]
		k := f[len(f)-1]
		n.free[n.key] = f[:len(f)-1]
		set = append(set, bson.E{Key: n.field, Value: SlotKey(n.prefix, k)})
		held = append(held, heldSlot{limit: n.limit, part: n.part, k: k})
	}
	return set, held, ok
}

// stampLimited stamps, for a batch claim with params p at t, those of
// block (jobs under limits, read as asRead) that are still as read, each
// with free run slots from s, with one unordered bulkWrite of an update per
// job: each update carries its own slots, which one updateMany cannot. An
// update whose slot another claim took meanwhile is refused by the unique
// index, one whose job was taken matches nothing; the others are applied.
// Unless every update matched, the jobs stamped are read back by the
// claim's token. It returns the jobs it claimed.
func (s *Store) stampLimited(ctx context.Context, p ClaimParams, t time.Time, block []*jobs.Job, asRead bson.A, picker *slotPicker) ([]*jobs.Job, error) {
	before := picker.snapshot()
	models, sent, stamped := limitedStamps(p, t, block, asRead, picker)
	if len(models) == 0 {
		return nil, nil
	}
	res, err := s.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if err == nil && s.afterStamp != nil {
		err = s.afterStamp()
	}
	switch {
	case err == nil && res.MatchedCount == int64(len(models)):
		for _, j := range sent {
			stampClaim(j, p, t, p.Token)
		}
		s.limits.loads.noteTaken(stamped)
		return sent, nil
	case err == nil && res.MatchedCount == 0:
		// All taken meanwhile: no write was made, so the slots they were
		// given are still free, for the claim's next block.
		sent := picker.sent
		picker.restore(before)
		picker.sent = sent
		return nil, nil
	}
	if err := s.stampRefused(ctx, p, t, err, len(models)); err != nil {
		return nil, err
	}
	claimed, err := s.readBack(ctx, sent, p.Token)
	got := map[string][]heldSlot{}
	for _, j := range claimed {
		got[j.ID] = stamped[j.ID]
	}
	s.limits.loads.noteTaken(got)
	return claimed, err
}

// limitedStamps are the updates of stampLimited: one per job of block
// whose limits have free slots in s, fenced on the job as read, with the
// jobs sent and the slot fields each was given.
func limitedStamps(p ClaimParams, t time.Time, block []*jobs.Job, asRead bson.A, s *slotPicker) (models []mongo.WriteModel, sent []*jobs.Job, stamped map[string][]heldSlot) {
	stamped = map[string][]heldSlot{}
	for _, i := range stampOrder(p, block) {
		j := block[i]
		set, held, ok := s.take(j.Kind, j.Queue, j.Args)
		if !ok {
			continue // its limit is full
		}
		stamped[j.ID] = held
		s.markSent(j.ID)
		match := append(bson.D{{Key: "_id", Value: j.ID}}, claimFilter(p, t)...)
		match = append(match, asRead[i].(bson.D)[1:]...) // attempt and updatedAt as read
		update := AlsoIn(claimUpdate(p, t, p.Token), "$set", set...)
		models = append(models, mongo.NewUpdateOneModel().SetFilter(match).SetUpdate(update))
		sent = append(sent, j)
	}
	return models, sent, stamped
}

// stampRefused handles what stampLimited's n updates answered when not
// every one matched: err nil (jobs taken meanwhile matched nothing) or
// some refused; then the stamped jobs are read back. An error is a reply
// lost: the jobs carry the token, and the caller's ReleaseClaim gives them
// back.
func (s *Store) stampRefused(ctx context.Context, p ClaimParams, t time.Time, err error, n int) error {
	var bwe mongo.BulkWriteException
	switch {
	case err == nil: // jobs taken meanwhile: they matched nothing
	case errors.As(err, &bwe) && bwe.WriteConcernError == nil && len(bwe.WriteErrors) > 0:
		// Answered: some updates were refused, a slot taken meanwhile
		// (a duplicate key), or a job an app wrote with an attempt that is
		// not a number, which is buried.
		// A slot refused: the views of the run slots are wrong
		// (runload.go).
		s.limits.loads.forget()
		badAttempt := func(we mongo.BulkWriteError) bool { return we.Code == errTypeMismatch }
		if slices.ContainsFunc(bwe.WriteErrors, badAttempt) {
			if _, berr := s.buryBadAttempts(ctx, claimFilter(p, t), t); berr != nil {
				s.log.Warn("claim: cannot bury a job whose attempt is not a number", zap.Error(berr))
			}
		}
	case DuplicateCommand(err):
		// A slot taken, answered as a command error (server.go): none
		// of the updates after it was applied, those before it may be,
		// and the read-back finds them.
		s.limits.loads.forget()
	default:
		s.limits.loads.forget()
		return fmt.Errorf("store: claim %d jobs under their limits: %w", n, err)
	}
	return nil
}

// claimUnderLimits is a claim of up to k jobs (Claim: 1) by p when limits
// apply to p's kinds or queues: it reads their running jobs, leaves the
// full ones out of its filter, and claims the rest, stamping each job of a
// limit with free slots in a write of its own. handled is false when no
// limit applies: the caller claims as usual.
func (s *Store) claimUnderLimits(ctx context.Context, p ClaimParams, k int) (claimed []*jobs.Job, handled bool, err error) {
	totals, parts, err := s.limitsFor(ctx, p)
	if err != nil {
		return nil, true, fmt.Errorf("store: claim: %w", err)
	}
	if len(totals) == 0 && len(parts) == 0 {
		s.limits.loads.noteFull(nil)
		return nil, false, nil
	}
	var picker *slotPicker
	defer func() { s.limits.loads.noteFull(picker) }()
	for try := range claimBatchTries {
		picker, err = s.slotsFor(ctx, totals, parts, k, try > 0)
		if err != nil {
			return nil, true, fmt.Errorf("store: claim: %w", err)
		}
		pn, open := picker.narrow(p)
		if len(pn.Kinds) == 0 || len(pn.Queues) == 0 {
			return nil, true, nil // every limit that applies is full
		}
		if !open {
			// What is left needs no slot: claim it as usual.
			claimed, err := s.claimFree(ctx, pn, k)
			return claimed, true, err
		}
		claimed, raced, err := s.claimBatchOnce(ctx, pn, k, picker)
		if errors.Is(err, errMalformedCandidate) || isTypeMismatch(err) {
			if _, berr := s.buryBadAttempts(ctx, claimFilter(pn, s.Now()), s.Now()); berr != nil {
				return nil, true, fmt.Errorf("store: claim: %w", err)
			}
			continue
		}
		if err != nil || len(claimed) > 0 || !raced {
			return claimed, true, err
		}
	}
	return nil, true, nil
}

// strandedRunSlot matches the jobs whose run slot field f is stranded: null,
// or held by a job that is not running.
func strandedRunSlot(f string) bson.D {
	return bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: f, Value: bson.D{{Key: "$type", Value: "null"}}}},
		bson.D{
			{Key: f, Value: bson.D{{Key: "$exists", Value: true}}},
			{Key: "state", Value: bson.D{{Key: "$ne", Value: jobs.StateRunning}}},
		},
	}}}
}

// StrandedRunSlotsFilter matches the jobs that hold a run slot but are
// not running: another application's write ended or re-queued them and
// left the slot, which would otherwise be held forever; or whose slot
// another app wrote as null, which MongoDB's sparse unique index indexes.
func StrandedRunSlotsFilter() bson.D {
	either := make(bson.A, len(runSlotFields))
	for i, f := range runSlotFields {
		either[i] = strandedRunSlot(f)
	}
	return bson.D{{Key: "$or", Value: either}}
}

// FreeRunSlotsOf frees the stranded run slots of those of the jobs ids
// that still hold one (StrandedRunSlotsFilter): each slot field with one
// write by those ids, conditioned again on what makes it stranded.
func (s *Store) FreeRunSlotsOf(ctx context.Context, ids bson.A) (int, error) {
	n := 0
	for _, f := range runSlotFields {
		k, err := s.UpdateIDs(ctx, ids, strandedRunSlot(f), bson.D{{Key: "$unset", Value: unsetFields(f)}})
		n += k
		if err != nil {
			return n, fmt.Errorf("store: free stranded run slots: %w", err)
		}
	}
	if n > 0 {
		s.log.Info("freed the run slots of jobs that were not running (written by another app)", zap.Int("jobs", n))
	}
	return n, nil
}
