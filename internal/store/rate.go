package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// Rate limits: at most N starts of a kind's or a queue's jobs per period,
// with a burst, across every worker process.
//
// A rate is stored in the limits collection beside the concurrency limits,
// {_id: "rate:kind:email", rate: 14, periodMs: 1000, burst: 5, tat, tNs,
// starts, rateSetAt, rateSetBy}, so the read of that collection that every
// claim makes each LimitRefresh brings the rates too: a process with no
// rate set pays no command for them.
//
// The rate is kept by GCRA (gcra.go): tat is the theoretical arrival time
// of the next start, tNs the interval it was written under. A claim under a
// rate reserves k starts (at most what it may claim) with one write of the
// rate's document matching tat and the rate as last read (a
// compare-and-set; on a miss it reads the document and tries again),
// claims up to k jobs, and gives back the starts it did not use with one
// more write, only while tat is still the one it wrote and the rate the
// one it read (else they are lost: the rate runs under). starts counts the
// reservations.
//
// The reservations are exact: in any window of one period at most
// N + burst starts are reserved, whatever the number of processes, as each
// is a compare-and-set of the one document; a lost reply of one counts as
// taken. A claim stamps its jobs after its reservation; one whose reply
// comes more than RateStartLag after it (a stall, a slow server, a lost
// reply) gives its jobs back unstarted, attempts not counted, and keeps the
// reservation. So a job of a rate starts within RateStartLag of its
// reservation, and in any window of one period at most N + burst jobs of
// it are claimed, plus those of one RateStartLag (⌈RateStartLag/T⌉) when
// claims are delayed. Rates assume the processes' clocks agree: a clock
// ahead by d lets its process start up to d/T early. Only a wrong clock
// over-runs; every other failure slows the rate.
//
// A rate bounds handler starts, not only claims: a worker asks for jobs
// under a rate only for its run slots free now (ClaimParams.Ahead), never
// for the jobs it holds ahead, and starts them at once.
//
// A claim leaves out a kind or queue whose rate allows no start now, as
// last read, until its next start (NextRateStart tells a worker when), so
// a rate that binds costs no claim a read of its jobs. Under a backlog it
// waits for a few starts at once (ratebatch.go).

// RateStartLag bounds how long after its reservation a job of a rate
// limit may be claimed: a claim answered later gives its jobs of the rate
// back, unstarted and uncounted.
const RateStartLag = 500 * time.Millisecond

// MaxRate bounds a rate's count per period, and MaxBurst its burst.
const (
	MaxRate  = 1_000_000
	MaxBurst = 10_000
)

// rateReserveTries bounds the compare-and-sets of one reservation.
const rateReserveTries = 4

// rateScope prefixes the _id of a rate's document in the limits
// collection.
const rateScope = "rate:"

// Rate is a rate limit: at most N starts per Per, of which at most Burst
// at once; with By, per value of the args field By (ratepart.go).
type Rate struct {
	// N is how many starts each Per allows.
	N int
	// Per is the period, at least a millisecond.
	Per time.Duration
	// Burst is how many may start at once after a quiet spell; 0 is 1.
	Burst int
	// By, when set, partitions the rate: every value of the jobs' args
	// field By (a dotted path for a nested field) gets N starts per Per
	// of its own, with its own burst.
	By string
}

// gcra is r's arithmetic (gcra.go). r must be valid.
func (r Rate) gcra() gcra {
	return gcra{t: time.Duration((int64(r.Per) + int64(r.N) - 1) / int64(r.N)), burst: r.burst()}
}

func (r Rate) burst() int { return max(r.Burst, 1) }

// Validate reports what is wrong with r.
func (r Rate) Validate() error {
	switch {
	case r.N < 1 || r.N > MaxRate:
		return fmt.Errorf("rate %d must be from 1 to %d", r.N, MaxRate)
	case r.Per < time.Millisecond || r.Per%time.Millisecond != 0:
		return fmt.Errorf("rate period %s must be a whole number of milliseconds, at least 1ms", r.Per)
	case r.Per > MaxRatePeriod:
		return fmt.Errorf("rate period %s is longer than %s", r.Per, MaxRatePeriod)
	case r.Burst < 0 || r.Burst > MaxBurst:
		return fmt.Errorf("rate burst %d must be from 1 to %d", r.Burst, MaxBurst)
	case r.gcra().t > MaxRateWindow/time.Duration(r.burst()):
		return fmt.Errorf("rate %s: its burst of %d takes %s to refill (burst × period / N), more than %s: lower the burst or the period",
			r, r.burst(), refill(r), MaxRateWindow)
	case r.By != "":
		return ValidPartitionArg(r.By)
	}
	return nil
}

// refill writes how long r's whole burst takes to refill, in hours, for
// an error: it may be too long for a time.Duration.
func refill(r Rate) string {
	h := float64(r.burst()) * float64(r.gcra().t) / float64(time.Hour)
	return strconv.FormatFloat(h, 'f', 0, 64) + "h"
}

// ratePeriods are the periods a rate writes as a letter.
var ratePeriods = map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}

// String writes r as ParseRate reads it: "14/s", "600/m burst 20",
// "10/m burst 2 per customerId".
func (r Rate) String() string {
	per := r.Per.String()
	for letter, d := range ratePeriods {
		if d == r.Per {
			per = letter
		}
	}
	s := fmt.Sprintf("%d/%s", r.N, per)
	if r.Burst > 1 {
		s += fmt.Sprintf(" burst %d", r.Burst)
	}
	if r.By != "" {
		s += " per " + r.By
	}
	return s
}

// ParseRate reads a rate: N/PERIOD, the period s, m, h or a Go duration
// (14/s, 600/m, 5/250ms), optionally followed by " burst B", then
// optionally by " per FIELD", which partitions it by that args field
// ("10/m burst 2 per customerId").
func ParseRate(s string) (Rate, error) {
	usage := fmt.Errorf("rate %q: write N/PERIOD, e.g. 14/s, 600/m burst 20 or 10/m per customerId", s)
	f := strings.Fields(s)
	var r Rate
	if len(f) >= 3 && f[len(f)-2] == "per" {
		r.By = f[len(f)-1]
		f = f[:len(f)-2]
	}
	switch {
	case len(f) == 1:
	case len(f) == 3 && f[1] == "burst":
		b, err := strconv.Atoi(f[2])
		if err != nil {
			return Rate{}, fmt.Errorf("rate %q: burst %q is not a whole number", s, f[2])
		}
		if b < 1 { // Rate{Burst: 0} is 1, but written out it is a mistake
			return Rate{}, fmt.Errorf("rate %q: burst %d must be from 1 to %d", s, b, MaxBurst)
		}
		r.Burst = b
	default:
		return Rate{}, usage
	}
	n, per, ok := strings.Cut(f[0], "/")
	if !ok {
		return Rate{}, usage
	}
	var err error
	if r.N, err = strconv.Atoi(n); err != nil {
		return Rate{}, fmt.Errorf("rate %q: %q is not a whole number", s, n)
	}
	if d, ok := ratePeriods[per]; ok {
		r.Per = d
	} else if r.Per, err = time.ParseDuration(per); err != nil {
		return Rate{}, fmt.Errorf("rate %q: period %q is not s, m, h or a duration", s, per)
	}
	if err := r.Validate(); err != nil {
		return Rate{}, fmt.Errorf("rate %q: %w", s, err)
	}
	return r, nil
}

// RateLimit is one stored rate limit.
type RateLimit struct {
	// Name is "kind:KIND" or "queue:QUEUE".
	Name string
	Rate Rate
	// Starts counts the starts reserved under it, across every process,
	// since it was first set.
	Starts int64
	// Used is how much of the burst is taken now: 0 when Burst jobs may
	// start at once, Burst when none may.
	Used int
	// NextStart is when the next start is allowed; zero: now.
	NextStart time.Time
	SetAt     time.Time
	SetBy     string
	// Malformed says what is wrong with a rate another application wrote;
	// such a rate limits nothing.
	Malformed string
	// Partitions is how many partitions of a partitioned rate (Rate.By)
	// have state stored, and Spent how many of them allow no start now
	// (filled by RateLimits only). Used and NextStart are then zero: each
	// partition has its own.
	Partitions, Spent int
}

// rateState is one rate as a claim knows it.
type rateState struct {
	rate  Rate
	setAt time.Time     // when it was set (rateSetAt): its partitions' tats convert from then
	tat   time.Time     // as last read or written by this client
	raw   bson.RawValue // tat as stored, for the compare-and-set
	// badStarts: starts is stored but not a number (another application
	// wrote it), so that $inc would fail: the next reservation sets it.
	badStarts bool
}

// rateCache caches the rates for the claims of one Client and its copies.
// It is filled by every read of the limits collection (limitsFor).
type rateCache struct {
	mu     sync.Mutex
	rates  map[string]*rateState // by limit name
	warned map[string]string
	// next is when the earliest rate that a claim left out allows a start
	// again; zero when the last claim left none out.
	next time.Time
	// restIdle is how long claims wait before claiming again the part no
	// rate applies to, which found nothing last (ClaimParams.RestPollMax),
	// and restNext when they may; zero when it found jobs. restKinds and
	// restQueues are that part's: a claim whose part differs (a kind back
	// under its process limit, a queue resumed) claims it at once.
	restIdle              time.Duration
	restNext              time.Time
	restKinds, restQueues []string
	// lost counts, by rate name, this client's reservations in a row that
	// found the rate reserved by another process since it read it (see
	// reserve).
	lost map[string]int
	// full reports, by rate name, that the last claim under it used every
	// start it reserved: the next waits for a batch (ratebatch.go).
	full map[string]bool
	// underRates reports that a rate applied to the last claim.
	underRates bool
	// spent are the partitions of partitioned rates that claims found
	// spent, by rate name and partition (ratepart.go).
	spent map[string]map[string]spentPart

	// Test hooks, nil but in tests (export_rate_test.go): afterReserve
	// runs after a reservation the server applied, its error taken as the
	// write's (a lost reply); beforeRateClaim between a reservation and the
	// claim of its jobs (a stall); beforePartReserve when a claim under a
	// partitioned rate has read its partitions, before it reserves;
	// beforePartClean when CleanRatePartitions has read what to delete,
	// before it deletes.
	afterReserve                                        func() error
	beforeRateClaim, beforePartReserve, beforePartClean func()
}

func newRateCache() *rateCache {
	return &rateCache{rates: map[string]*rateState{}, warned: map[string]string{}, lost: map[string]int{}, full: map[string]bool{},
		spent: map[string]map[string]spentPart{}}
}

// isRateDoc reports whether d, a document of the limits collection, is a
// rate's.
func isRateDoc(d bson.Raw) bool {
	id, _ := d.Lookup("_id").StringValueOK()
	return strings.HasPrefix(id, rateScope)
}

// storeRates replaces the cached rates with those read in docs.
func (s *Store) storeRates(docs []bson.Raw) {
	rc := s.rates
	rc.mu.Lock()
	defer rc.mu.Unlock()
	old := rc.rates
	rc.rates = map[string]*rateState{}
	for _, d := range docs {
		name, st := s.usableRate(d)
		if o := old[name]; st != nil && o != nil && o.tat.After(st.tat) && o.rate == st.rate {
			// This client reserved since the read was sent.
			st.tat, st.raw, st.badStarts = o.tat, o.raw, o.badStarts
		}
		if st != nil {
			rc.rates[name] = st
		}
	}
}

// usableRate reads the rate document d into its name and state; a nil
// state when it is malformed, which it warns of. rc.mu is held.
func (s *Store) usableRate(d bson.Raw) (string, *rateState) {
	rl, st := rateLimit(d, s.instant())
	s.WarnMalformed(s.rates.warned, rl.Name, rl.Malformed,
		"a rate limit's document is malformed: it limits NOTHING; `docketctl limit rate` rewrites it")
	return rl.Name, st
}

// rateLimit reads one rate's document field by field.
func rateLimit(d bson.Raw, t time.Time) (RateLimit, *rateState) {
	id, _ := d.Lookup("_id").StringValueOK()
	rl := RateLimit{Name: strings.TrimPrefix(id, rateScope)}
	if _, _, err := ParseLimitName(rl.Name); err != nil {
		rl.Malformed = err.Error()
		return rl, nil
	}
	var v [3]int
	var bad string
	for i, f := range []string{"rate", "periodMs", "burst"} {
		if bad == "" {
			v[i], bad = StoredCount(d, f, []int{MaxRate, int(MaxRatePeriod / time.Millisecond), MaxBurst}[i])
		}
		if bad == "" && v[0] == 0 {
			bad = "rate is 0"
		}
	}
	rl.Rate = Rate{N: v[0], Per: time.Duration(v[1]) * time.Millisecond, Burst: v[2]}
	if bad == "" {
		rl.Rate.By, bad = storedPartitionBy(d)
	}
	if bad == "" {
		if err := rl.Rate.Validate(); err != nil {
			bad = err.Error()
		}
	}
	if bad != "" {
		rl.Malformed = bad
		return rl, nil
	}
	rl.SetAt, rl.SetBy = StoredStamp(d, "rateSet")
	st := &rateState{rate: rl.Rate, setAt: rl.SetAt}
	st.read(d)
	rl.Starts, _ = d.Lookup("starts").AsInt64OK()
	rl.Used, rl.NextStart = st.used(t)
	return rl, st
}

// badStarts reports that the starts of a rate's or a partition's document
// d is stored but not a number (another application wrote it), so that
// $inc would fail: the next reservation sets it.
func badStarts(d bson.Raw) bool {
	switch d.Lookup("starts").Type {
	case 0, bson.TypeInt32, bson.TypeInt64, bson.TypeDouble:
		return false
	}
	return true
}

// read sets s's tat (raw: as stored) and badStarts from d, its rate's or
// its partition's document.
func (s *rateState) read(d bson.Raw) {
	s.tat, s.raw = storedTat(d, s.rate, s.setAt)
	s.badStarts = badStarts(d)
}

// avail is how many starts s allows at t.
func (s *rateState) avail(t time.Time) int { return s.rate.gcra().avail(s.tat, t) }

// used is how much of the burst is taken at t, and when the next start is
// allowed (zero: now).
func (s *rateState) used(t time.Time) (int, time.Time) { return s.rate.gcra().used(s.tat, t) }

// storedTat reads a rate's or a partition's tat from d. When it was
// written under another interval than r's (tNs holds the one it was), the
// rate was changed at setAt since: it is converted to r's interval as it
// stood then. (Converting as it stands at each read instead would keep
// the old rate's debt, which drains at the old pace, until it is paid.)
// Any tat but a date (another application wrote it) is taken as none, and
// replaced by the next reservation. raw is tat as stored, for the
// compare-and-set, a null matching it missing.
func storedTat(d bson.Raw, r Rate, setAt time.Time) (tat time.Time, raw bson.RawValue) {
	raw = storedValue(d, "tat")
	at, ok := raw.TimeOK()
	if !ok {
		return time.Time{}, raw
	}
	from, _ := d.Lookup("tNs").AsInt64OK()
	if setAt.IsZero() { // not set by docket: no change to date it from
		from = 0
	}
	return r.gcra().convert(at.UTC(), setAt, time.Duration(from)), raw
}

// SetRate limits the jobs of name ("kind:KIND", "queue:QUEUE") that start,
// across every worker process, to r. It applies at once to this client's
// claims, to every other worker's next reservation under a rate it had
// read (the reservation is conditioned on the rate), and within
// LimitRefresh to its claims otherwise. by, when set, records who set it.
func (s *Store) SetRate(ctx context.Context, name string, r Rate, by string) error {
	fields := bson.D{
		{Key: "rate", Value: r.N}, {Key: "periodMs", Value: r.Per.Milliseconds()}, {Key: "burst", Value: r.burst()},
		{Key: "partitionBy", Value: partitionByValue(r)},
	}
	_, err := limitsWrite("set rate", name, r.Validate(), func() (bool, error) {
		return true, s.setLimitsDoc(ctx, rateScope+name, fields, "rate", by)
	})
	return err
}

// ClearRate removes the rate limit of name. It reports whether there was
// one.
func (s *Store) ClearRate(ctx context.Context, name string) (bool, error) {
	return limitsWrite("clear rate", name, nil, func() (bool, error) { return s.deleteLimitsDoc(ctx, rateScope+name) })
}

// RateLimits returns every stored rate limit, in name order, with how much
// of its burst is used now.
func (s *Store) RateLimits(ctx context.Context) ([]RateLimit, error) {
	var out []RateLimit
	t := s.instant()
	rates := bson.D{{Key: "_id", Value: bson.D{{Key: "$regex", Value: "^" + rateScope}}}}
	err := eachFound(ctx, s.limitsColl(), rates, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}), func(d bson.Raw) error {
		rl, _ := rateLimit(d, t)
		out = append(out, rl)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: read rate limits: %w", err)
	}
	for i, rl := range out {
		if rl.Malformed != "" || rl.Rate.By == "" {
			continue
		}
		// Each partition has its own burst and next start.
		out[i].Used, out[i].NextStart = 0, time.Time{}
		if out[i].Partitions, out[i].Spent, err = s.ratePartCounts(ctx, rl.Name, rl.Rate, t); err != nil {
			return nil, fmt.Errorf("store: read the partitions of rate %s: %w", rl.Name, err)
		}
	}
	return out, nil
}

// Rated reports whether a rate limit applies to the jobs of kind in
// queue, as this client last read the rates: a job claimed under one must
// start at once (see ClaimParams.Ahead).
func (s *Store) Rated(kind, queue string) bool {
	rc := s.rates
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.rates[KindLimit(kind)] != nil || rc.rates[QueueLimit(queue)] != nil
}

// NextRateStart is when a rate limit that made this client's last claim
// leave out a kind or queue allows a start again; zero when the last claim
// left none out. A worker whose claim found nothing waits no longer than
// until then.
func (s *Store) NextRateStart() time.Time {
	rc := s.rates
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.next
}

// WaitingOnLimits counts, for each of names ("kind:K", "queue:Q"), the
// jobs of it that could run now (available, runAt passed): those a full
// limit or a spent rate holds back.
func (s *Store) WaitingOnLimits(ctx context.Context, names []string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, name := range names {
		if _, _, err := ParseLimitName(name); err != nil {
			continue
		}
		field, target := limitScope(name)
		n, err := s.coll.CountDocuments(ctx, bson.D{
			{Key: field, Value: target},
			{Key: "state", Value: jobs.StateAvailable},
			{Key: "runAt", Value: bson.D{{Key: "$lte", Value: s.Now()}}},
		})
		if err != nil {
			return nil, fmt.Errorf("store: count the jobs waiting on %s: %w", name, err)
		}
		out[name] = n
	}
	return out, nil
}

// rateCell is a part of a claim's params under the same rates.
type rateCell struct {
	p     ClaimParams
	names []string // the rates, one or two
}

// plan splits p by the rates that apply to it: the cells of jobs under a
// rate (each kind, each queue, and each pair of both), and the rest,
// under none. ok is false when no rate applies.
func (rc *rateCache) plan(p ClaimParams) (cells []rateCell, rest ClaimParams, ok bool) {
	split := func(targets []string, limit func(string) string) (rated, free []string) {
		for _, t := range targets {
			if rc.rates[limit(t)] != nil {
				rated = append(rated, t)
			} else {
				free = append(free, t)
			}
		}
		return rated, free
	}
	rk, fk := split(p.Kinds, KindLimit)
	rq, fq := split(p.Queues, QueueLimit)
	if len(rk) == 0 && len(rq) == 0 {
		return nil, p, false
	}
	cell := func(ks, qs []string, names ...string) {
		if len(ks) > 0 && len(qs) > 0 {
			cp := p
			cp.Kinds, cp.Queues = ks, qs
			cells = append(cells, rateCell{p: cp, names: names})
		}
	}
	for _, k := range rk {
		cell([]string{k}, fq, KindLimit(k))
		for _, q := range rq {
			cell([]string{k}, []string{q}, KindLimit(k), QueueLimit(q))
		}
	}
	for _, q := range rq {
		cell(fk, []string{q}, QueueLimit(q))
	}
	rest = p
	rest.Kinds, rest.Queues = fk, fq
	return cells, rest, true
}

// claimUnderRates is a claim of up to k jobs (Claim: 1) by p, under the
// rate limits that apply to p's kinds and queues, then under the
// concurrency limits (claimUnderLimits). handled is false when neither
// applies: the caller claims as usual.
func (s *Store) claimUnderRates(ctx context.Context, p ClaimParams, k int) (claimed []*jobs.Job, handled bool, err error) {
	// The limits read brings the rates (readLimits); cached, it costs
	// nothing.
	if _, _, err := s.limitsFor(ctx, p); err != nil {
		return nil, true, fmt.Errorf("store: claim: %w", err)
	}
	rc := s.rates
	rc.mu.Lock()
	cells, rest, ok := rc.plan(p)
	rc.next, rc.underRates = time.Time{}, ok
	rc.mu.Unlock()
	if !ok {
		return s.claimUnderLimits(ctx, p, k)
	}
	now := k - max(p.Ahead, 0) // the jobs that start at once: only those may start under a rate
	for _, cell := range cells {
		if len(claimed) >= now {
			break
		}
		got, err := s.claimRateCell(ctx, cell, now-len(claimed))
		claimed = append(claimed, got...)
		if err != nil {
			return claimed, true, err
		}
	}
	if len(claimed) < k && len(rest.Kinds) > 0 && len(rest.Queues) > 0 && rc.restDue(rest) {
		got, err := s.claimPlain(ctx, rest, k-len(claimed))
		claimed = append(claimed, got...)
		if err != nil {
			return claimed, true, err
		}
		rc.restFound(rest, len(got) > 0)
	}
	slices.SortStableFunc(claimed, claimOrder)
	return claimed, true, nil
}

// restDue reports whether a claim under rates claims now rest, its part
// that no rate applies to (see ClaimParams.RestPollMax).
func (rc *rateCache) restDue(rest ClaimParams) bool {
	if rest.RestPollMax <= 0 {
		return true
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return !time.Now().Before(rc.restNext) ||
		!slices.Equal(rest.Kinds, rc.restKinds) || !slices.Equal(rest.Queues, rc.restQueues)
}

// restFound records whether a claim under rates found jobs in rest, its
// part that no rate applies to: when not, the next claim of the same part
// waits, twice as long as the last up to RestPollMax, spread by ±20% so
// that processes do not claim in step.
func (rc *rateCache) restFound(rest ClaimParams, found bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if found || rest.RestPollMax <= 0 {
		rc.restIdle, rc.restNext, rc.restKinds, rc.restQueues = 0, time.Time{}, nil, nil
		return
	}
	if !slices.Equal(rest.Kinds, rc.restKinds) || !slices.Equal(rest.Queues, rc.restQueues) {
		rc.restIdle, rc.restKinds, rc.restQueues = 0, slices.Clone(rest.Kinds), slices.Clone(rest.Queues)
	}
	lo := max(min(rest.RestPollMin, rest.RestPollMax), time.Millisecond)
	rc.restIdle = min(max(2*rc.restIdle, lo), rest.RestPollMax)
	rc.restNext = time.Now().Add(time.Duration(float64(rc.restIdle) * (0.8 + 0.4*rand.Float64())))
}

// claimPlain claims up to k jobs by p under the concurrency limits only.
func (s *Store) claimPlain(ctx context.Context, p ClaimParams, k int) ([]*jobs.Job, error) {
	got, handled, err := s.claimUnderLimits(ctx, p, k)
	if handled {
		return got, err
	}
	return s.claimFree(ctx, p, k)
}

// claimFree claims up to k jobs by p that no limit applies to.
func (s *Store) claimFree(ctx context.Context, p ClaimParams, k int) ([]*jobs.Job, error) {
	if k == 1 {
		return asBatch(s.claimOne(ctx, p))
	}
	return s.claimBatchTries(ctx, p, k)
}

// claimRateCell reserves up to k starts under each rate of cell, claims as
// many jobs of it, and gives back the starts it did not use. Under a
// partitioned rate, it claims them with claimRateParts, which reserves
// per partition the same way.
func (s *Store) claimRateCell(ctx context.Context, cell rateCell, k int) ([]*jobs.Job, error) {
	parted, plain, ok := s.rates.partitionedRates(cell.names)
	if !ok { // cleared since the claim planned
		return nil, nil
	}
	t := s.Now()
	hs, n, err := s.reservePlain(ctx, plain, k, t)
	if err != nil || n == 0 {
		return nil, err
	}
	var claimed []*jobs.Job
	if len(parted) > 0 {
		claimed, err = s.claimRateParts(ctx, cell.p, parted, n, t)
	} else {
		if rc := s.rates; rc.beforeRateClaim != nil {
			rc.beforeRateClaim()
		}
		claimed, err = s.claimPlain(ctx, cell.p, n)
	}
	if err != nil {
		return nil, err // its jobs carry the token: the caller gives them back
	}
	if len(hs) == 0 {
		return claimed, nil // claimRateParts settled them against its own reservation
	}
	return s.settleStarts(ctx, cell.names, t, claimed, func(used int) {
		s.giveBackPlain(ctx, hs, used)
		s.rates.noteFull(plain, used == n)
	})
}

// plainHold is the starts a claim reserved under a plain rate.
type plainHold struct {
	name string
	n    int
	rate Rate      // as the reservation read it
	tat  time.Time // written by the reservation
}

// reservePlain reserves up to k starts at t under each of the plain rates
// names: n, as many as the one allowing the fewest (0: one allows none),
// the others' extra given back.
func (s *Store) reservePlain(ctx context.Context, names []string, k int, t time.Time) (hs []plainHold, n int, err error) {
	n = k
	for _, name := range names {
		h, err := s.reserve(ctx, name, n, t)
		if err != nil || h.n == 0 {
			// A lost reply keeps what it may have reserved: the rate runs
			// under.
			s.giveBackPlain(ctx, hs, 0)
			return nil, 0, err
		}
		if h.n < n {
			s.giveBackPlain(ctx, hs, h.n)
			n = h.n
		}
		hs = append(hs, h)
	}
	return hs, n, nil
}

// giveBackPlain gives back the starts of hs beyond keep of each (giveBack).
func (s *Store) giveBackPlain(ctx context.Context, hs []plainHold, keep int) {
	for i := range hs {
		s.giveBack(ctx, &hs[i], hs[i].n-keep)
		hs[i].n = keep
	}
}

// settleStarts ends a claim of jobs under starts of the rates names
// reserved at t, plain or partitioned. A claim answered more than
// RateStartLag after its reservation came too late to count as made then:
// it gives claimed back, unstarted, the starts staying used, and returns
// none. Else it gives back with giveBack the starts the jobs did not use.
func (s *Store) settleStarts(ctx context.Context, names []string, t time.Time, claimed []*jobs.Job, giveBack func(used int)) ([]*jobs.Job, error) {
	if d := s.instant().Sub(t); d > RateStartLag && len(claimed) > 0 {
		if err := s.releaseRateJobs(ctx, claimed); err != nil {
			return nil, err
		}
		s.log.Warn("gave back the jobs of a claim under a rate limit answered too late after its reservation: not run, attempts not counted",
			zap.Strings("rates", names), zap.Duration("late", d), zap.Int("jobs", len(claimed)))
		return nil, nil
	}
	giveBack(len(claimed))
	return claimed, nil
}

// reserve takes up to k starts of rate name at t with a compare-and-set on
// its document, reading it again when another process changed it. It
// returns what it took (with the rate it read and the tat it wrote); none
// when the rate allows no start now (NextRateStart then says when). The
// write is conditioned on the rate as read too, not only on tat: a rate
// changed since it was read (by an operator, within LimitRefresh or across
// a stall) is read again.
func (s *Store) reserve(ctx context.Context, name string, k int, t time.Time) (plainHold, error) {
	rc := s.rates
	checkFirst := rc.readFirst(name) // likely stale: read before writing (ratebatch.go)
	for range rateReserveTries {
		rc.mu.Lock()
		held := rc.rates[name]
		if held == nil { // cleared since the claim planned
			rc.mu.Unlock()
			return plainHold{}, nil
		}
		st := *held
		rc.mu.Unlock()
		if st.rate.By != "" {
			// Partitioned since the claim planned: its state is its
			// partitions', which the next claim reserves.
			return plainHold{}, nil
		}
		g := st.rate.gcra()
		n := min(k, st.avail(t))
		want := rc.batch(name, st.rate, k)
		if n < want {
			// What this client last saw allows too few starts: it sends
			// nothing, and tries again when they are allowed.
			rc.noteNext(g.startsAt(st.tat, t, want).Add(rc.yield(name, st.rate, want)))
			return plainHold{}, nil
		}
		if checkFirst {
			checkFirst = false
			if err := s.readRate(ctx, name); err != nil {
				return plainHold{}, err
			}
			continue
		}
		tat := g.take(st.tat, t, n)
		update := reservationUpdate(g, tat, n, st.badStarts)
		res, err := s.limitsColl().UpdateOne(ctx, rateFilter(name, st.rate, st.raw), update)
		if err == nil && rc.afterReserve != nil {
			err = rc.afterReserve()
		}
		if err != nil {
			s.limits.forget() // what is stored is unknown: read it again
			return plainHold{}, fmt.Errorf("store: claim: reserve %d starts of rate %s: %w", n, name, err)
		}
		if rc.noteReserved(name, tat, res.MatchedCount == 1) {
			return plainHold{name, n, st.rate, tat}, nil
		}
		// Another process reserved (or the rate changed): read it again.
		if err := s.readRate(ctx, name); err != nil {
			return plainHold{}, err
		}
	}
	return plainHold{}, nil
}

// noteReserved records whether this client's reservation of rate name,
// which would write tat, won, and returns won.
func (rc *rateCache) noteReserved(name string, tat time.Time, won bool) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if !won {
		rc.lost[name]++
		return false
	}
	delete(rc.lost, name)
	if s := rc.rates[name]; s != nil {
		s.tat, s.badStarts = tat, false
		s.raw.Type, s.raw.Value = bsonDateTime(tat)
	}
	return true
}

// reservationUpdate is the update of a rate's or a partition's document
// that takes n starts under g: it sets tat (and the interval it is in,
// tNs, and extra) and counts the starts, afresh when badStarts (starts is
// stored but not a number, so that $inc would fail every claim).
func reservationUpdate(g gcra, tat time.Time, n int, badStarts bool, extra ...bson.E) bson.D {
	set := append(bson.D{{Key: "tat", Value: tat}, {Key: "tNs", Value: int64(g.t)}}, extra...)
	if badStarts {
		return bson.D{{Key: "$set", Value: append(set, bson.E{Key: "starts", Value: n})}}
	}
	return bson.D{{Key: "$set", Value: set}, {Key: "$inc", Value: bson.D{{Key: "starts", Value: n}}}}
}

// giveBackUpdate is the update of a rate's or a partition's document that
// gives back n starts of a reservation: tat set back to back.
func giveBackUpdate(back time.Time, n int) bson.D {
	return bson.D{{Key: "$set", Value: bson.D{{Key: "tat", Value: back}}}, {Key: "$inc", Value: bson.D{{Key: "starts", Value: -n}}}}
}

// rateFilter matches the document of rate name while it holds rate r and
// tat: what a reservation or a give-back computed from. (Of a partitioned
// rate, whose state is its partitions', tat is left out when nil.)
func rateFilter(name string, r Rate, tat any) bson.D {
	f := bson.D{{Key: "_id", Value: rateScope + name}}
	if v, ok := tat.(bson.RawValue); ok {
		tat = AsRead(v)
	}
	if tat != nil {
		f = append(f, bson.E{Key: "tat", Value: tat})
	}
	return append(f,
		bson.E{Key: "rate", Value: r.N}, bson.E{Key: "periodMs", Value: r.Per.Milliseconds()}, bson.E{Key: "burst", Value: r.Burst},
		bson.E{Key: "partitionBy", Value: partitionByValue(r)})
}

// bsonDateTime is the raw BSON of t as a date.
func bsonDateTime(t time.Time) (bson.Type, []byte) {
	typ, b, _ := bson.MarshalValue(t)
	return typ, b
}

// yield is how long after the next start of rate r (name) this client
// waits to try to reserve it when its last reservations lost to another
// process (all but one of the processes trying at that instant lose:
// ratebatch.go): at random within up to one interval per loss in a row,
// but never later than the burst less the want starts it waits for allows,
// so that the burst lets starts made that late catch up at once. The
// winner keeps trying on time (its view is its own write), and a loser
// that finds the rate free wins and tries on time again. Zero for a burst
// of 1, or before any loss.
func (rc *rateCache) yield(name string, r Rate, want int) time.Duration {
	rc.mu.Lock()
	lost := rc.lost[name]
	rc.mu.Unlock()
	most := time.Duration(min(lost, r.burst()-want)) * r.gcra().t
	if most <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(most)))
}

// noteNext records that a claim left out a rate whose next start is at.
func (rc *rateCache) noteNext(at time.Time) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	keepEarliest(&rc.next, at)
}

// keepEarliest sets *next, the earliest of some instants (zero: none yet),
// to at when at is earlier.
func keepEarliest(next *time.Time, at time.Time) {
	if next.IsZero() || at.Before(*next) {
		*next = at
	}
}

// readRate reads the document of rate name into the cache.
func (s *Store) readRate(ctx context.Context, name string) error {
	raw, err := s.limitsColl().FindOne(ctx, bson.D{{Key: "_id", Value: rateScope + name}}).Raw()
	rc := s.rates
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if errors.Is(err, mongo.ErrNoDocuments) {
		delete(rc.rates, name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: claim: read rate %s: %w", name, err)
	}
	if _, st := s.usableRate(raw); st != nil {
		rc.rates[name] = st
	} else {
		delete(rc.rates, name)
	}
	return nil
}

// giveBack returns n unused starts of h when no one reserved since its
// write and the rate is still the one it read: tat goes back by n of the
// rate's intervals. Best-effort: when it does not match, the starts are
// lost (the rate runs under).
func (s *Store) giveBack(ctx context.Context, h *plainHold, n int) {
	if n <= 0 {
		return
	}
	back := h.rate.gcra().giveBack(h.tat, n)
	res, err := s.limitsColl().UpdateOne(ctx, rateFilter(h.name, h.rate, h.tat), giveBackUpdate(back, n))
	if err != nil || res.MatchedCount == 0 {
		return
	}
	rc := s.rates
	rc.mu.Lock()
	if s := rc.rates[h.name]; s != nil && s.tat.Equal(h.tat) {
		s.tat = back
		s.raw.Type, s.raw.Value = bsonDateTime(back)
	}
	rc.mu.Unlock()
	h.tat = back
}

// ValidateRates reports the first of rates (limit name → rate) whose name
// or rate is invalid, named as setting.NAME.
func ValidateRates(setting string, rates map[string]Rate) error {
	for _, name := range slices.Sorted(maps.Keys(rates)) {
		if _, _, err := ParseLimitName(name); err != nil {
			return fmt.Errorf("%s: %w", setting, err)
		}
		if err := rates[name].Validate(); err != nil {
			return fmt.Errorf("%s.%s: %w", setting, name, err)
		}
	}
	return nil
}

// SetRates sets each of rates (limit name → rate), in name order,
// recording by.
func (s *Store) SetRates(ctx context.Context, rates map[string]Rate, by string) error {
	for _, name := range slices.Sorted(maps.Keys(rates)) {
		if err := s.SetRate(ctx, name, rates[name], by); err != nil {
			return err
		}
		s.log.Info("rate limit set from the configuration", zap.String("limit", name), zap.Stringer("rate", rates[name]))
	}
	return nil
}
