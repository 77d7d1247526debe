package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// Partitioned rates: at most N starts per period per value of one of the
// jobs' args fields, "10 starts a minute per customerId, burst 2", across
// every worker process.
//
// The rate is the rate's document of the limits collection with
// partitionBy: "customerId" (Rate.By), read with the other limits. Each
// partition's GCRA state is a document of its own in the rate partitions
// collection (DefaultRatePartsCollection), {_id: "kind:email/<p>", tat,
// tNs, starts, res}, p naming the partition as for a partitioned limit
// (partKey: numbers of one value are one partition, a missing field and
// null are one). The first reservation of a partition inserts it;
// CleanRatePartitions (the reaper's pass) deletes it once its tat is
// RatePartitionIdle in the past, when it says no more than a missing one.
//
// A claim knows its candidates' partitions only once it has read them, so
// a claim under a partitioned rate (claimRateParts):
//
//  1. reads candidates (one find), leaving out by value ($nin: partSkip) the
//     partitions it knows spent until their next start and those used up
//     in this claim (reading again, at most ratePartTries times, when
//     every candidate read was of such a partition);
//  2. reads those partitions' documents (one find by _id $in) and picks,
//     in claim order, the candidates whose partitions allow a start at t,
//     at most the starts each allows;
//  3. reserves each partition's starts with a compare-and-set on its tat
//     as read (one unordered bulkWrite of updates, and one insert of the
//     partitions with no document, which fails on a duplicate _id when
//     another claim inserted first); when not every write matched, it
//     reads back which did: a partition whose tat and res (this
//     reservation's nonce) are the ones written is reserved, any other is
//     taken as not (the rate runs under);
//  4. claims exactly the jobs reserved for: a batch stamps them as read
//     with one updateMany (stampBlock); a single claim, or one under
//     concurrency limits too, claims them as any claim restricted to them
//     (ClaimParams.ids);
//  5. confirms the rate: one update of the rate's document conditioned on
//     the rate as read, adding the starts used to its starts. It comes
//     after the reservations, so a rate that matched then held when they
//     were made; one that did not (an operator changed or cleared it
//     since) gives the jobs and the starts back and claims again under the
//     rate read anew;
//  6. gives back the starts it did not use, as a plain rate does.
//
// So the guarantee is the plain rate's, per partition: the reservations
// are exact (each a compare-and-set of the partition's document, or an
// insert only the first claim wins), the jobs start within RateStartLag of
// them or go back unstarted, a lost reply counts as taken, and only a
// wrong clock over-runs.
//
// Cost, in commands per claim (TestRatePartitionCost measures it): 5,
// single or batch (the candidates, the partitions, the reservation, the
// stamp, the confirmation), so 0.5 a job for batches of 10; one more when
// some partitions had a document and some none (an update and an insert),
// one more to read back a reservation another claim raced, one more to
// give starts back when fewer jobs were claimed than reserved for; and
// those of the concurrency limits' claim when limits apply too.

// DefaultRatePartsCollection holds the partitions' state of the
// partitioned rates, beside the default jobs collection; a Store on
// another jobs collection C uses C_rate_partitions.
const DefaultRatePartsCollection = "rate_partitions"

// RatePartitionIdle is how long past its tat a partition's document is
// kept: CleanRatePartitions deletes it then. (A tat in the past says no
// more than a missing document; the margin covers clocks that disagree.)
const RatePartitionIdle = time.Minute

// ratePartTries bounds the reads of candidates of one claim under a
// partitioned rate: a read all of whose candidates were of spent
// partitions is made again without them.
const ratePartTries = 3

// ratePartsColl is the collection of the partitions' state.
func (s *Store) ratePartsColl() *mongo.Collection { return s.BesideJobs(DefaultRatePartsCollection) }

// partitionByValue is r.By as stored: null for a rate not partitioned.
func partitionByValue(r Rate) any {
	if r.By == "" {
		return nil
	}
	return r.By
}

// storedPartitionBy reads a rate document's partitionBy: the field, or
// what is wrong with it.
func storedPartitionBy(d bson.Raw) (by, bad string) {
	v := d.Lookup("partitionBy")
	if v.Type == 0 || v.Type == bson.TypeNull {
		return "", ""
	}
	s, ok := v.StringValueOK()
	if !ok {
		return "", fmt.Sprintf("partitionBy is %s %s, not an args field", v.Type, v)
	}
	if err := ValidPartitionArg(s); err != nil {
		return "", err.Error()
	}
	return s, ""
}

// ratePartID is the _id of the document of rate name's partition p.
func ratePartID(name, p string) string { return name + "/" + p }

// ratePartIDs matches the _ids of the partitions of rate name: its name,
// a slash and a partKey (16 hex digits), not those of a kind whose name
// goes on past a slash.
func ratePartIDs(name string) bson.D {
	return bson.D{{Key: "$regex", Value: "^" + regexp.QuoteMeta(name) + "/[0-9a-f]{16}$"}}
}

// spentPart is a partition a claim found spent: the value of its field,
// by which later claims leave its jobs out, and when it allows a start
// again, under rate.
type spentPart struct {
	value bson.RawValue
	next  time.Time
	rate  Rate
}

// noteSpent records that partition p (of value v) of rate name, under r,
// allows no start until next.
func (rc *rateCache) noteSpent(name, p string, v bson.RawValue, r Rate, next time.Time) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	m := rc.spent[name]
	if m == nil {
		m = map[string]spentPart{}
		rc.spent[name] = m
	}
	if _, ok := m[p]; !ok && len(m) >= maxSkippedPartitions {
		return
	}
	m[p] = spentPart{value: v, next: next, rate: r}
}

// spentSkips returns, for rate name under r at t, the values of the
// partitions known spent (dropping those that allow a start again) and
// the earliest next start among them.
func (rc *rateCache) spentSkips(name string, r Rate, t time.Time) (bson.A, time.Time) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var values bson.A
	var next time.Time
	for p, s := range rc.spent[name] {
		if s.rate != r || !s.next.After(t) {
			delete(rc.spent[name], p)
			continue
		}
		values = append(values, skipValue(s.value))
		keepEarliest(&next, s.next)
	}
	return values, next
}

// skipValue is v as a $nin lists it: null for a missing field.
func skipValue(v bson.RawValue) any {
	if v.Type == 0 {
		return nil
	}
	return v
}

// ratePart is one partition of a partitioned rate as one claim sees it.
type ratePart struct {
	// rateState is the partition's as read: its rate, when that was set
	// (a tat stored under another converts from then), its tat.
	rateState
	id     string // its document's _id
	name   string // the rate's
	p      string // partKey
	value  bson.RawValue
	exists bool          // its document, as read
	rawTNs bson.RawValue // the interval tat was written under, as stored (Type 0: none)
	allows int           // starts allowed at t
	take   int           // picked by this claim
	// Written by the reservation: reserved reports that it was applied.
	newTat   time.Time
	res      string // the reservation's nonce, which its write stored
	reserved bool
	used     int // jobs claimed in it
}

// ratePick is a candidate picked for a start, with its partitions.
type ratePick struct {
	id    string
	parts []*ratePart
}

// partitionedRates returns which of names are partitioned rates, with
// their rates, and the others; ok is false when one was cleared.
func (rc *rateCache) partitionedRates(names []string) (parted map[string]rateState, plain []string, ok bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	parted = map[string]rateState{}
	for _, name := range names {
		s := rc.rates[name]
		if s == nil {
			return nil, nil, false
		}
		if s.rate.By != "" {
			parted[name] = rateState{rate: s.rate, setAt: s.setAt}
		} else {
			plain = append(plain, name)
		}
	}
	return parted, plain, true
}

// claimRateParts claims up to n jobs by p under the partitioned rates
// parted (name → rate as read), each job with a start reserved in its
// partition of each, reserving at t (see the top of this file).
func (s *Store) claimRateParts(ctx context.Context, p ClaimParams, parted map[string]rateState, n int, t time.Time) ([]*jobs.Job, error) {
	for try := 0; ; try++ {
		claimed, changed, err := s.claimRatePartsOnce(ctx, p, parted, n, t)
		if !changed || err != nil || try == 1 {
			return claimed, err
		}
		// A rate changed since it was read: claim again under it.
		fresh, _, ok := s.rates.partitionedRates(slices.Sorted(maps.Keys(parted)))
		if !ok || len(fresh) != len(parted) {
			return nil, nil // cleared, or no longer partitioned: the next claim plans anew
		}
		parted, t = fresh, s.Now()
	}
}

// claimRatePartsOnce is one try of claimRateParts; changed reports that a
// rate was changed since it was read (the claim took nothing).
func (s *Store) claimRatePartsOnce(ctx context.Context, p ClaimParams, parted map[string]rateState, n int, t time.Time) (claimed []*jobs.Job, changed bool, err error) {
	pc := newPartClaim(s.rates, p, parted, n, t)
	if err := s.pickRateParts(ctx, pc); err != nil {
		return nil, false, err
	}
	if len(pc.picks) == 0 {
		if !pc.next.IsZero() {
			s.rates.noteNext(pc.next)
		}
		return nil, false, nil
	}
	take := pc.taken()
	// Reserve at the time of the write, not of the reads: a start the
	// reads allowed is allowed later too, and the time a job may take to
	// start (RateStartLag) is counted from here.
	if s.rates.beforePartReserve != nil {
		s.rates.beforePartReserve()
	}
	t = s.Now()
	if err := s.reserveParts(ctx, take, t); err != nil {
		return nil, false, err
	}
	pc.noteReservedSpent(take, t)
	ids := pc.reservedIDs()
	if len(ids) == 0 {
		s.giveBackParts(ctx, take)
		return nil, false, nil
	}
	if claimed, err = s.claimReserved(ctx, pc, ids); err != nil {
		return nil, false, err // its jobs carry the token: the caller gives them back; the starts stay taken
	}
	pc.countUsed(claimed)
	if changed, err := s.confirmParts(ctx, pc, take, claimed); changed || err != nil {
		return nil, changed, err
	}
	claimed, err = s.settleStarts(ctx, pc.names, t, claimed, func(int) { s.giveBackParts(ctx, take) })
	return claimed, false, err
}

// partClaim is the state of one try of a claim under partitioned rates.
type partClaim struct {
	rc     *rateCache
	p      ClaimParams
	parted map[string]rateState // the rates and when they were set, as read
	names  []string             // their names, sorted
	n      int                  // the most jobs to claim
	t      time.Time            // when the reads count from
	parts  map[string]*ratePart
	// usedUp are, by rate name, the partitions this claim's picks use up:
	// the next read of candidates leaves them out.
	usedUp   map[string]map[string]bool
	picks    []ratePick
	candByID map[string]candidate // the picks
	next     time.Time            // the earliest next start of a partition left out
}

func newPartClaim(rc *rateCache, p ClaimParams, parted map[string]rateState, n int, t time.Time) *partClaim {
	names := slices.Sorted(maps.Keys(parted))
	return &partClaim{rc: rc, p: p, parted: parted, names: names, n: n, t: t,
		parts: map[string]*ratePart{}, usedUp: map[string]map[string]bool{}, candByID: map[string]candidate{}}
}

// pickRateParts reads candidates and their partitions, and picks in claim
// order those whose partitions allow a start at pc.t, reading again past
// the partitions found spent, at most ratePartTries times.
func (s *Store) pickRateParts(ctx context.Context, pc *partClaim) error {
	for range ratePartTries {
		limit := pc.n * claimWindow
		cands, err := s.rateCandidates(ctx, pc.params(), pc.t, limit)
		if err != nil {
			return err
		}
		if err := s.readRateParts(ctx, pc.parts, pc.newParts(cands), pc.t); err != nil {
			return err
		}
		pc.pick(cands)
		pc.noteUsedUp()
		if len(pc.picks) == pc.n || len(cands) < limit {
			return nil
		}
	}
	return nil
}

// params is the claim's params leaving out, by value, the partitions known
// spent and those this claim's picks used up.
func (pc *partClaim) params() ClaimParams {
	pp := pc.p
	pp.skip = slices.Clone(pc.p.skip)
	for _, name := range pc.names {
		values, at := pc.rc.spentSkips(name, pc.parted[name].rate, pc.t)
		if !at.IsZero() {
			keepEarliest(&pc.next, at)
		}
		for part := range pc.usedUp[name] {
			values = append(values, skipValue(pc.parts[ratePartID(name, part)].value))
		}
		pp.skip = appendSkip(pp.skip, name, pc.parted[name].rate.By, values)
	}
	return pp
}

// partOf is cand's partition of rate name, as this claim knows it.
func (pc *partClaim) partOf(name string, cand candidate) (id, key string, v bson.RawValue) {
	by := pc.parted[name].rate.By
	v = partValue(cand.job.Args, by)
	key = partKey(by, v)
	return ratePartID(name, key), key, v
}

// newParts registers the partitions of cands this claim has not read yet,
// and returns their ids, to read.
func (pc *partClaim) newParts(cands []candidate) []string {
	var toRead []string
	for _, cand := range cands {
		for _, name := range pc.names {
			id, key, v := pc.partOf(name, cand)
			if pc.parts[id] == nil {
				pc.parts[id] = &ratePart{id: id, name: name, p: key, value: v,
					rateState: rateState{rate: pc.parted[name].rate, setAt: pc.parted[name].setAt, raw: bson.RawValue{Type: bson.TypeNull}}}
				toRead = append(toRead, id)
			}
		}
	}
	return toRead
}

// pick picks, in claim order, the candidates whose partitions all allow
// one more start, up to n in all.
func (pc *partClaim) pick(cands []candidate) {
	for _, cand := range cands {
		if len(pc.picks) == pc.n {
			return
		}
		if _, ok := pc.candByID[cand.job.ID]; ok {
			continue
		}
		var ps []*ratePart
		ok := true
		for _, name := range pc.names {
			id, _, _ := pc.partOf(name, cand)
			rp := pc.parts[id]
			ps = append(ps, rp)
			ok = ok && rp.take < rp.allows
		}
		if !ok {
			continue
		}
		for _, rp := range ps {
			rp.take++
		}
		pc.picks = append(pc.picks, ratePick{id: cand.job.ID, parts: ps})
		pc.candByID[cand.job.ID] = cand
	}
}

// noteUsedUp records the partitions the picks used up, for the next read
// of candidates, and those found spent, for later claims.
func (pc *partClaim) noteUsedUp() {
	for _, rp := range pc.parts {
		if rp.take < rp.allows {
			continue
		}
		if pc.usedUp[rp.name] == nil {
			pc.usedUp[rp.name] = map[string]bool{}
		}
		pc.usedUp[rp.name][rp.p] = true
		if rp.allows == 0 {
			at := rp.rate.gcra().nextStart(rp.tat, pc.t)
			pc.rc.noteSpent(rp.name, rp.p, rp.value, rp.rate, at)
			keepEarliest(&pc.next, at)
		}
	}
}

// taken returns the partitions the picks take starts of, in id order.
func (pc *partClaim) taken() []*ratePart {
	var take []*ratePart
	for _, id := range slices.Sorted(maps.Keys(pc.parts)) {
		if rp := pc.parts[id]; rp.take > 0 {
			take = append(take, rp)
		}
	}
	return take
}

// noteReservedSpent records the partitions whose reservation at t used
// them up, for later claims.
func (pc *partClaim) noteReservedSpent(take []*ratePart, t time.Time) {
	for _, rp := range take {
		if rp.reserved && rp.take >= rp.allows {
			pc.rc.noteSpent(rp.name, rp.p, rp.value, rp.rate, rp.rate.gcra().nextStart(rp.newTat, t))
		}
	}
}

// reservedIDs returns the picks all of whose partitions were reserved.
func (pc *partClaim) reservedIDs() []string {
	var ids []string
	for _, pk := range pc.picks {
		if !slices.ContainsFunc(pk.parts, func(rp *ratePart) bool { return !rp.reserved }) {
			ids = append(ids, pk.id)
		}
	}
	return ids
}

// claimReserved claims exactly the jobs ids, reserved for: stamped as read
// when they are a batch no concurrency limit applies to, else as any
// claim restricted to them.
func (s *Store) claimReserved(ctx context.Context, pc *partClaim, ids []string) ([]*jobs.Job, error) {
	if s.rates.beforeRateClaim != nil {
		s.rates.beforeRateClaim()
	}
	cp := pc.p
	cp.ids = ids
	if block, asRead, ok := s.stampable(ctx, cp, ids, pc.candByID); ok {
		claimed, _, err := s.stampBlock(ctx, cp, s.Now(), block, asRead)
		return claimed, err
	}
	return s.claimPlain(ctx, cp, len(ids))
}

// countUsed counts, in each partition, the jobs claimed in it.
func (pc *partClaim) countUsed(claimed []*jobs.Job) {
	byID := map[string]ratePick{}
	for _, pk := range pc.picks {
		byID[pk.id] = pk
	}
	for _, j := range claimed {
		for _, rp := range byID[j.ID].parts {
			rp.used++
		}
	}
}

// confirmParts confirms the rates of claimed's starts (confirmRates).
// When one changed since it was read, the starts were reserved under a
// rate that no longer holds: it gives the jobs and every start back,
// reads the rates again, and reports changed, to claim again.
func (s *Store) confirmParts(ctx context.Context, pc *partClaim, take []*ratePart, claimed []*jobs.Job) (changed bool, err error) {
	if len(claimed) == 0 {
		return false, nil
	}
	ok, err := s.confirmRates(ctx, pc.names, pc.parted, len(claimed))
	if err != nil {
		return false, errors.Join(err, s.releaseRateJobs(ctx, claimed))
	}
	if ok {
		return false, nil
	}
	if err := s.releaseRateJobs(ctx, claimed); err != nil {
		return false, err
	}
	for _, rp := range take {
		rp.used = 0
	}
	s.giveBackParts(ctx, take)
	for _, name := range pc.names {
		if err := s.readRate(ctx, name); err != nil {
			return false, err
		}
	}
	return true, nil
}

// rateCandidates reads up to limit candidates of p at t, in claim order,
// as a batch claim under limits does: one that does not decode (another
// application wrote it) is buried rather than given a start.
func (s *Store) rateCandidates(ctx context.Context, p ClaimParams, t time.Time, limit int) ([]candidate, error) {
	docs, _, _, err := s.readCandidates(ctx, p, t, limit)
	if err != nil {
		return nil, fmt.Errorf("store: claim under a partitioned rate: %w", err)
	}
	return s.decodeCandidates(ctx, docs, t, true)
}

// stampable returns the jobs ids (picked from cands) as a block that
// stampBlock stamps with one updateMany, saving the batch claim's read of
// them again, when they are a batch and no concurrency limit applies to p
// (whose slots a claim under limits must pick); ok is false otherwise, and
// the claim is made as any claim, by ids.
func (s *Store) stampable(ctx context.Context, p ClaimParams, ids []string, cands map[string]candidate) (block []*jobs.Job, asRead bson.A, ok bool) {
	if len(ids) < 2 {
		return nil, nil, false // a single claim is one findAndModify either way
	}
	totals, parts, err := s.limitsFor(ctx, p)
	if err != nil || len(totals) > 0 || parts.any() {
		return nil, nil, false
	}
	for _, id := range ids {
		cand := cands[id]
		block = append(block, cand.job)
		asRead = append(asRead, cand.asRead)
	}
	return block, asRead, true
}

// readRateParts reads the documents ids of parts (one find) and sets what
// each allows at t. A partition with no document allows its burst; a tat
// that is not a date (another application wrote it) is taken as none, and
// replaced by the reservation.
func (s *Store) readRateParts(ctx context.Context, parts map[string]*ratePart, ids []string, t time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	err := eachFound(ctx, s.ratePartsColl(), bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, options.Find(), func(d bson.Raw) error {
		id, _ := d.Lookup("_id").StringValueOK()
		rp := parts[id]
		if rp == nil {
			return nil
		}
		rp.exists = true
		rp.read(d)
		rp.rawTNs = d.Lookup("tNs")
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: claim: read rate partitions: %w", err)
	}
	for _, id := range ids {
		rp := parts[id]
		rp.allows = rp.avail(t)
	}
	return nil
}

// reserveParts takes rp.take starts of each of parts at t: a
// compare-and-set of each document on its tat as read, an insert of each
// that had none. It sets reserved on those that were applied. An error is
// a reply lost: what it reserved counts as taken.
func (s *Store) reserveParts(ctx context.Context, parts []*ratePart, t time.Time) error {
	nonce := uuid.NewString()
	updates, inserts := partReservations(parts, t, nonce)
	sure, err := s.applyPartReservations(ctx, updates, inserts)
	if err != nil {
		return err
	}
	if !sure {
		return s.readBackReserved(ctx, parts, nonce)
	}
	for _, rp := range parts {
		rp.reserved = true
	}
	return nil
}

// partReservations are the writes that reserve the starts of parts at t
// under nonce: an update fenced on the tat read of each that had a
// document, an insert of each that had none.
func partReservations(parts []*ratePart, t time.Time, nonce string) (updates []mongo.WriteModel, inserts []any) {
	for _, rp := range parts {
		g := rp.rate.gcra()
		rp.newTat, rp.res = g.take(rp.tat, t, rp.take), nonce
		if !rp.exists {
			inserts = append(inserts, bson.D{{Key: "_id", Value: rp.id}, {Key: "tat", Value: rp.newTat}, {Key: "tNs", Value: int64(g.t)}, {Key: "starts", Value: rp.take}, {Key: "res", Value: nonce}})
			continue
		}
		update := reservationUpdate(g, rp.newTat, rp.take, rp.badStarts, bson.E{Key: "res", Value: nonce})
		updates = append(updates, mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: rp.id}, {Key: "tat", Value: AsRead(rp.raw)}}).SetUpdate(update))
	}
	return updates, inserts
}

// applyPartReservations sends updates (one unordered bulkWrite) and
// inserts (one unordered insertMany). sure reports that every write is
// known applied; an error, that a reply was lost.
func (s *Store) applyPartReservations(ctx context.Context, updates []mongo.WriteModel, inserts []any) (sure bool, err error) {
	sure = true
	answered := func(err error) bool {
		var bwe mongo.BulkWriteException
		return (errors.As(err, &bwe) && bwe.WriteConcernError == nil) || IsDuplicateKey(err)
	}
	coll := s.ratePartsColl()
	if len(updates) > 0 {
		res, err := coll.BulkWrite(ctx, updates, options.BulkWrite().SetOrdered(false))
		if err == nil && s.rates.afterReserve != nil {
			err = s.rates.afterReserve()
		}
		switch {
		case err == nil:
			sure = res.MatchedCount == int64(len(updates))
		case answered(err):
			sure = false
		default:
			return false, fmt.Errorf("store: claim: reserve starts of %d rate partitions: %w", len(updates), err)
		}
	}
	if len(inserts) > 0 {
		_, err := coll.InsertMany(ctx, inserts, options.InsertMany().SetOrdered(false))
		if err == nil && len(updates) == 0 && s.rates.afterReserve != nil {
			err = s.rates.afterReserve()
		}
		switch {
		case err == nil:
		case answered(err):
			sure = false // another claim inserted first
		default:
			return false, fmt.Errorf("store: claim: reserve starts of %d new rate partitions: %w", len(inserts), err)
		}
	}
	return sure, nil
}

// readBackReserved reads back which of parts the reservation of nonce
// applied: those still as it wrote them. One written and then changed by
// another claim cannot be told from one not written: it is taken as not
// reserved (the rate runs under).
func (s *Store) readBackReserved(ctx context.Context, parts []*ratePart, nonce string) error {
	ids := make(bson.A, len(parts))
	byID := map[string]*ratePart{}
	for i, rp := range parts {
		ids[i] = rp.id
		byID[rp.id] = rp
	}
	cur, err := s.ratePartsColl().Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "res", Value: nonce}})
	if err != nil {
		return fmt.Errorf("store: claim: read back the reserved rate partitions: %w", err)
	}
	return EachRaw(ctx, cur, func(d bson.Raw) error {
		id, _ := d.Lookup("_id").StringValueOK()
		if rp := byID[id]; rp != nil {
			if tat, ok := d.Lookup("tat").TimeOK(); ok && tat.Equal(rp.newTat) {
				rp.reserved = true
			}
		}
		return nil
	})
}

// giveBackParts gives back the starts of parts reserved and not used
// (take - used), each only when its tat is still the one the reservation
// wrote (one unordered bulkWrite). Best-effort: a give-back that does not
// match is lost (the rate runs under).
func (s *Store) giveBackParts(ctx context.Context, parts []*ratePart) {
	var models []mongo.WriteModel
	for _, rp := range parts {
		n := rp.take - rp.used
		if !rp.reserved || n <= 0 {
			continue
		}
		models = append(models, giveBackPart(rp, n))
	}
	if len(models) == 0 {
		return
	}
	if _, err := s.ratePartsColl().BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
		s.log.Debug("rate partitions: giving back unused starts failed; they are lost (the rate runs under)", zap.Error(err))
	}
}

// giveBackPart is the write that gives back n of the starts reserved in
// rp, when its tat is still the one the reservation wrote. All of them:
// the partition as it was read, exactly (its document deleted when the
// reservation inserted it), since the reservation may have been made under
// a rate changed since, whose interval a tat dated after the change must
// not be in (storedTat). Some of them: tat goes back by n intervals.
func giveBackPart(rp *ratePart, n int) mongo.WriteModel {
	// Fenced on this reservation: its tat and its nonce (a claim that
	// stalled since finds the partition reserved again, or cleaned and
	// inserted anew, and gives nothing back).
	filter := bson.D{{Key: "_id", Value: rp.id}, {Key: "tat", Value: rp.newTat}, {Key: "res", Value: rp.res}}
	if n < rp.take {
		return mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(giveBackUpdate(rp.rate.gcra().giveBack(rp.newTat, n), n))
	}
	if !rp.exists {
		return mongo.NewDeleteOneModel().SetFilter(filter)
	}
	set := bson.D{{Key: "tat", Value: rp.raw}}
	if rp.rawTNs.Type != 0 {
		set = append(set, bson.E{Key: "tNs", Value: rp.rawTNs})
	}
	if rp.badStarts { // the reservation set starts: $inc would fail
		set = append(set, bson.E{Key: "starts", Value: 0})
	}
	update := bson.D{{Key: "$set", Value: set}}
	if !rp.badStarts {
		update = append(update, bson.E{Key: "$inc", Value: bson.D{{Key: "starts", Value: -n}}})
	}
	if rp.rawTNs.Type == 0 {
		update = append(update, bson.E{Key: "$unset", Value: bson.D{{Key: "tNs", Value: ""}}})
	}
	return mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update)
}

// confirmRates adds n starts to each of names' documents, conditioned on
// the rate as read (parted): ok is false when one no longer matched (an
// operator changed or cleared it after this process read it).
func (s *Store) confirmRates(ctx context.Context, names []string, parted map[string]rateState, n int) (bool, error) {
	for _, name := range names {
		s.rates.mu.Lock()
		bad := s.rates.rates[name] != nil && s.rates.rates[name].badStarts
		s.rates.mu.Unlock()
		update := bson.D{{Key: "$inc", Value: bson.D{{Key: "starts", Value: n}}}}
		if bad {
			update = bson.D{{Key: "$set", Value: bson.D{{Key: "starts", Value: n}}}}
		}
		res, err := s.limitsColl().UpdateOne(ctx, rateFilter(name, parted[name].rate, nil), update)
		if err != nil {
			s.limits.forget()
			return false, fmt.Errorf("store: claim: confirm rate %s: %w", name, err)
		}
		if res.MatchedCount == 0 {
			return false, nil
		}
		if bad {
			s.rates.mu.Lock()
			if s := s.rates.rates[name]; s != nil {
				s.badStarts = false
			}
			s.rates.mu.Unlock()
		}
	}
	return true, nil
}

// releaseRateJobs gives claimed back unstarted, attempts not counted.
func (s *Store) releaseRateJobs(ctx context.Context, claimed []*jobs.Job) error {
	for _, j := range claimed {
		if err := s.Release(ctx, LeaseOf(j)); err != nil && !errors.Is(err, jobs.ErrLeaseLost) {
			return fmt.Errorf("store: claim: giving back the jobs of a claim under a rate: %w", err)
		}
	}
	return nil
}

// CleanRatePartitions deletes up to limit documents of partitions of the
// partitioned rates whose tat is RatePartitionIdle in the past: they hold
// nothing a missing document does not. Each delete is conditioned on the
// tat it read, so state that a claim wrote meanwhile is kept. The
// reaper's pass runs it. It returns how many it deleted.
func (s *Store) CleanRatePartitions(ctx context.Context, limit int) (int, error) {
	if limit < 1 {
		return 0, nil
	}
	cutoff := s.Now().Add(-RatePartitionIdle)
	coll := s.ratePartsColl()
	opts := options.Find().SetLimit(int64(limit)).SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "tat", Value: 1}})
	var models []mongo.WriteModel
	err := eachFound(ctx, coll, bson.D{{Key: "tat", Value: bson.D{{Key: "$lt", Value: cutoff}}}}, opts, func(d bson.Raw) error {
		models = append(models, mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: d.Lookup("_id")}, {Key: "tat", Value: AsRead(d.Lookup("tat"))}}))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: clean rate partitions: %w", err)
	}
	if len(models) == 0 {
		return 0, nil
	}
	if s.rates.beforePartClean != nil {
		s.rates.beforePartClean()
	}
	res, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if err != nil {
		return 0, fmt.Errorf("store: clean rate partitions: %w", err)
	}
	return int(res.DeletedCount), nil
}

// ratePartCounts counts the partitions of rate name under r that have a
// document, and those of them that allow no start at t.
func (s *Store) ratePartCounts(ctx context.Context, name string, r Rate, t time.Time) (parts, spent int, err error) {
	coll := s.ratePartsColl()
	n, err := coll.CountDocuments(ctx, bson.D{{Key: "_id", Value: ratePartIDs(name)}})
	if err != nil {
		return 0, 0, err
	}
	// None allowed at t: tat > t + (burst-1)·T.
	g := r.gcra()
	full := t.Add(g.window() - g.t)
	spentN, err := coll.CountDocuments(ctx, bson.D{{Key: "_id", Value: ratePartIDs(name)}, {Key: "tat", Value: bson.D{{Key: "$gt", Value: full}}}})
	if err != nil {
		return 0, 0, err
	}
	return int(n), int(spentN), nil
}
