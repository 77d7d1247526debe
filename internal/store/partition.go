package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Partitioned concurrency limits: at most N jobs of a kind (or a queue)
// run at once per value of one of their args fields, "each customer gets
// at most 2 at once", across every worker process. A partition limit is
// part of the kind's (or queue's) limits document, {_id: "kind:email",
// partitionBy: "customerId", partitionLimit: 2}, beside its optional
// total, limit: 10, which bounds the jobs running across all partitions.
//
// A running job of a partitioned kind holds a partition run slot,
// kindPartSlot: "<kind>/<p>/<k>" with k in [0, N), where p names its
// partition: a hash of the field's name and value (partKey), so that any
// value another application writes (a number, an ObjectId, bytes that are
// not UTF-8) makes a short slot of fixed form. A job of a partitioned
// queue holds queuePartSlot the same way. The slots are taken by the
// claim's own write under unique sparse indexes and freed by the writes
// that free the other run slots (Finish and requeue, lease.go), so a
// partition is exact under the same failures as a limit.
//
// Finding work when many partitions are saturated: a claim reads the
// running jobs of its partitioned limits (one find, with the limits'
// other running jobs), and leaves out of its filter the partitions with
// no free slot, by their values: {$or: [{kind: {$ne: K}}, {"args.F":
// {$nin: [values]}}]}. Its candidates are then jobs it may run, however
// many jobs of saturated partitions come first in claim order (but for a
// value over maxSkippedValueBytes, or a document whose first key starts
// with "$", which are read and refused by the picker), and a
// partition that frees a slot is claimed from again by the next claim. At
// most maxSkippedPartitions values are left out per limit; past that, a
// claim may read candidates it cannot stamp and takes the others it read.
// A job whose field is missing or null is in the partition of null.
//
// A worker's claims read the partitions from a view younger than
// LimitRefresh when they may (see "Views of partitioned limits" below).

// The job fields holding partition run slots, and their unique sparse
// indexes' names.
const (
	kindPartSlotField  = "kindPartSlot"
	queuePartSlotField = "queuePartSlot"
	// KindPartSlotIndex is the name of the unique sparse index on
	// kindPartSlot.
	KindPartSlotIndex = kindPartSlotField
	// QueuePartSlotIndex is the name of the unique sparse index on
	// queuePartSlot.
	QueuePartSlotIndex = queuePartSlotField
)

// runSlotFields are every job field holding a run slot: the writes that
// end or give back an attempt unset them all.
var runSlotFields = []string{kindRunSlotField, queueRunSlotField, kindPartSlotField, queuePartSlotField}

// maxSkippedPartitions bounds the saturated partitions of one limit that a
// claim's filter leaves out by value.
const maxSkippedPartitions = 1000

// maxSkippedValueBytes bounds a value a claim's filter leaves out: a
// larger one (another app may write a value of up to the args' 1 MB) is
// not sent with every claim; the picker still refuses its partition's
// jobs while it is full.
const maxSkippedValueBytes = 1024

// MaxPartitionArgBytes bounds the name of a partition's args field.
const MaxPartitionArgBytes = 200

// partLimit is a partition limit: at most n running jobs per value of the
// args field arg.
type partLimit struct {
	arg string
	n   int
}

// ValidPartitionArg checks the args field a limit is partitioned by: a
// field name, or a dotted path into nested documents, each part non-empty,
// printable, and not starting with '$'.
func ValidPartitionArg(arg string) error {
	switch {
	case arg == "":
		return fmt.Errorf("a partition's args field is empty")
	case !utf8.ValidString(arg):
		return fmt.Errorf("partition args field %q is not valid UTF-8", arg)
	case len(arg) > MaxPartitionArgBytes:
		return fmt.Errorf("partition args field %.20q… is %d bytes, more than %d", arg, len(arg), MaxPartitionArgBytes)
	case strings.IndexFunc(arg, unicode.IsControl) >= 0:
		return fmt.Errorf("partition args field %q holds a control character", arg)
	}
	for _, part := range strings.Split(arg, ".") {
		if part == "" || strings.HasPrefix(part, "$") {
			return fmt.Errorf("partition args field %q: each dotted part must be non-empty and not start with '$'", arg)
		}
	}
	return nil
}

// partValue returns the value of the args field arg (a dotted path) in
// args: the zero RawValue when args or the field is missing.
func partValue(args bson.Raw, arg string) bson.RawValue {
	if len(args) == 0 {
		return bson.RawValue{}
	}
	v, err := args.LookupErr(strings.Split(arg, ".")...)
	if err != nil {
		return bson.RawValue{}
	}
	return v
}

// partKey names the partition of a job whose args field arg holds v: a
// hash of arg and of v, with the values MongoDB's equality takes as one
// (numbers of one value, whatever their type; a missing field and null)
// made one, as the claim's filter, which leaves partitions out by value,
// sees them.
func partKey(arg string, v bson.RawValue) string {
	h := sha256.New()
	h.Write([]byte(arg))
	h.Write([]byte{0})
	var b [9]byte
	switch v.Type {
	case 0, bson.TypeNull, bson.TypeUndefined:
		h.Write([]byte{'0'})
	case bson.TypeInt32, bson.TypeInt64:
		i, _ := v.AsInt64OK()
		b[0] = 'i'
		binary.BigEndian.PutUint64(b[1:], uint64(i))
		h.Write(b[:])
	case bson.TypeDouble:
		f := v.Double()
		if f == math.Trunc(f) && math.Abs(f) < 1<<63 {
			b[0] = 'i'
			binary.BigEndian.PutUint64(b[1:], uint64(int64(f)))
		} else {
			if math.IsNaN(f) {
				f = math.NaN()
			}
			b[0] = 'd'
			binary.BigEndian.PutUint64(b[1:], math.Float64bits(f))
		}
		h.Write(b[:])
	default:
		h.Write([]byte{byte(v.Type)})
		h.Write(v.Value)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// partSlotTarget is the prefix of the partition run slots of target's
// partition p: "<target>/<p>", the slot then "<target>/<p>/<k>".
func partSlotTarget(target, p string) string { return target + "/" + p }

// partName is the key of the free slots of limit name's partition p in a
// slotPicker.
func partName(name, p string) string { return name + "\x00" + p }

// partLoad is what a claim read of one partition: its load and a value of
// its field, by which a claim's filter leaves it out when it is full.
type partLoad struct {
	QueueLoad
	value bson.RawValue
	// known: value was read (a partition this client's own claim added
	// to a view has none).
	known bool
}

// partSkip leaves the jobs of saturated partitions of one limit out of a
// claim's filter.
type partSkip struct {
	field  string // "kind" or "queue"
	target string
	arg    string
	values bson.A
	regex  bool // a saturated partition's value is a regex: leave out every regex
}

// filter is the condition matching every job but those of s's partitions.
func (s partSkip) filter() bson.D {
	cond := bson.D{{Key: "$nin", Value: s.values}}
	if s.regex {
		cond = append(cond, bson.E{Key: "$not", Value: bson.D{{Key: "$type", Value: "regex"}}})
	}
	return bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: s.field, Value: bson.D{{Key: "$ne", Value: s.target}}}},
		bson.D{{Key: "args." + s.arg, Value: cond}},
	}}}
}

// SetPartitionLimit limits the jobs of name ("kind:KIND", "queue:QUEUE")
// that run at once to n per value of their args field arg (a dotted path
// for a nested field), across every worker process (0: none runs). It
// leaves the limit's total (SetLimit), if any, as it is. by, when set,
// records who set it.
func (s *Store) SetPartitionLimit(ctx context.Context, name, arg string, n int, by string) error {
	_, err := limitsWrite("set partition limit", name, cmp.Or(ValidPartitionArg(arg), limitProblem(n)), func() (bool, error) {
		return true, s.setLimitsDoc(ctx, name, bson.D{{Key: "partitionBy", Value: arg}, {Key: "partitionLimit", Value: n}}, "partition", by)
	})
	return err
}

// ClearPartitionLimit removes the partition limit of name, leaving its
// total, and reports whether there was one.
func (s *Store) ClearPartitionLimit(ctx context.Context, name string) (bool, error) {
	return limitsWrite("clear partition limit", name, nil, func() (bool, error) {
		return s.unsetLimitsFields(ctx, name, "partitionBy", "partitionLimit", "partitionSetAt", "partitionSetBy")
	})
}

// unsetLimitsFields unsets fields (the first one must exist) of the limits
// document id, deletes it when it then limits nothing (neither a limit
// nor a partitionBy left), and reports whether the first field was there.
func (s *Store) unsetLimitsFields(ctx context.Context, id string, fields ...string) (bool, error) {
	res, err := s.limitsColl().UpdateOne(ctx,
		bson.D{{Key: "_id", Value: id}, {Key: fields[0], Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: "$unset", Value: unsetFields(fields...)}})
	if err != nil {
		return false, err
	}
	// Conditioned on nothing left: a limit set meanwhile by another
	// client is kept.
	if _, err := s.limitsColl().DeleteOne(ctx, bson.D{
		{Key: "_id", Value: id},
		{Key: "limit", Value: bson.D{{Key: "$exists", Value: false}}},
		{Key: "partitionBy", Value: bson.D{{Key: "$exists", Value: false}}},
	}); err != nil {
		return false, err
	}
	s.limits.forget()
	return res.MatchedCount > 0, nil
}

// partSpecs are partitioned limits by limit name.
type partSpecs map[string]partLimit

// add records l's partition limit, if it has one.
func (ps partSpecs) add(l RunLimit) {
	if l.PartitionBy != "" {
		ps[l.Name] = partLimit{arg: l.PartitionBy, n: l.PartitionLimit}
	}
}

// argPaths returns the args fields ps's limits are partitioned by, for a
// projection of the running jobs: each once, and none that another of
// them holds (a projection refuses a path and one inside it; the outer
// one brings both).
func (ps partSpecs) argPaths() []string {
	set := map[string]bool{}
	for _, pl := range ps {
		set[pl.arg] = true
	}
	var out []string
	for f := range set {
		inside := false
		for g := range set {
			if g != f && strings.HasPrefix(f, g+".") {
				inside = true
				break
			}
		}
		if !inside {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

// any reports whether ps holds a partitioned limit.
func (ps partSpecs) any() bool { return len(ps) > 0 }

// partFree returns the key in s.pfree of the free slots of partition p of
// the partitioned limit name (pl), reading them from its load the first
// time a job of the claim needs them.
func (s *slotPicker) partFree(name, p string, pl partLimit) string {
	key := partName(name, p)
	if _, ok := s.pfree[key]; !ok {
		load := QueueLoad{Slots: map[int]bool{}}
		if l := s.pload[name][p]; l != nil {
			load = l.QueueLoad
		}
		s.pfree[key] = load.FreeSlots(pl.n)
	}
	return key
}

// saturated returns what leaves out of the filter of a claim by p the
// saturated partitions of its partitioned limits, by value, at most
// maxSkippedPartitions per limit.
func (s *slotPicker) saturated(p ClaimParams) []partSkip {
	var out []partSkip
	for _, name := range claimLimits(p) {
		pl, ok := s.parts[name]
		if !ok {
			continue
		}
		var values bson.A
		for _, l := range s.pload[name] {
			if l.known && len(l.value.Value) <= maxSkippedValueBytes && l.Count() >= pl.n { // no free slot (QueueLoad.FreeSlots)
				values = append(values, skipValue(l.value))
			}
		}
		out = appendSkip(out, name, pl.arg, values)
	}
	return out
}

// appendSkip appends to skips what leaves out of a claim's filter the
// jobs of limit or rate name whose args field arg holds one of values,
// the first maxSkippedPartitions of them; none when values is empty. A
// $nin would not take a regex or an operator-shaped document as itself
// (literal): a regex (another app's) leaves out every regex value of arg
// instead, and such a document is not left out (its jobs are read, and
// the picker refuses them while their partition is full).
func appendSkip(skips []partSkip, name, arg string, values bson.A) []partSkip {
	regex := slices.ContainsFunc(values, func(v any) bool { rv, ok := v.(bson.RawValue); return ok && rv.Type == bson.TypeRegex })
	values = slices.DeleteFunc(values, func(v any) bool { rv, ok := v.(bson.RawValue); return ok && !literal(rv) })
	if len(values) == 0 && !regex {
		return skips
	}
	field, target := limitScope(name)
	return append(skips, partSkip{field: field, target: target, arg: arg, values: append(bson.A{}, values[:min(len(values), maxSkippedPartitions)]...), regex: regex})
}

// PartitionLimit is a partition limit as configured: at most N jobs
// running at once per value of the args field By (see SetPartitionLimit).
// It reads and prints as "N per FIELD", such as "2 per customerId".
type PartitionLimit struct {
	N  int
	By string
}

// String is the limit as ParsePartitionLimit reads it.
func (p PartitionLimit) String() string { return strconv.Itoa(p.N) + " per " + p.By }

// Validate reports what is wrong with p: N from 1 to MaxLimit (0 would
// run none, which is an operator's decision, not a configuration's), and a
// valid field.
func (p PartitionLimit) Validate() error {
	if p.N < 1 || p.N > MaxLimit {
		return fmt.Errorf("%d per %s: N must be from 1 to %d", p.N, p.By, MaxLimit)
	}
	return ValidPartitionArg(p.By)
}

// ParsePartitionLimit reads "N per FIELD", such as "2 per customerId" or
// "1 per customer.id".
func ParsePartitionLimit(s string) (PartitionLimit, error) {
	f := strings.Fields(s)
	if len(f) != 3 || f[1] != "per" {
		return PartitionLimit{}, fmt.Errorf("partition limit %q: write N per FIELD, such as 2 per customerId", s)
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return PartitionLimit{}, fmt.Errorf("partition limit %q: %q is not a whole number", s, f[0])
	}
	p := PartitionLimit{N: n, By: f[2]}
	if err := p.Validate(); err != nil {
		return PartitionLimit{}, fmt.Errorf("partition limit %q: %w", s, err)
	}
	return p, nil
}

// Views of partitioned limits: a worker's claims under a partitioned
// limit trust, for LimitRefresh, what the last read of its running jobs
// showed, kept up to date with the client's own claims and finished runs,
// as the views of a limit's total are (runload.go): only when the read
// found every running job of the limit holding a partition slot and came
// two LimitRefresh after the partition limit was set, and, unlike totals,
// only in a client told of its own frees (RunEnded): a client that ends
// attempts without telling would trust views of full partitions it freed.
// A wrong view
// costs a refused stamp (the unique index on the partition's slots),
// which drops every view, or a partition left out of claims for at most
// LimitRefresh, never a job over the limit.

// partSetAtKey suffixes a limit's name in runLimits.setAt for when its
// partition limit was set.
const partSetAtKey = "\x00partition"

// partView is one partitioned limit's partitions as a claim of this client
// last read them.
type partView struct {
	arg    string
	n      int
	readAt time.Time
	loads  map[string]*partLoad // by partition
}

// copyPartLoads returns a copy of loads that the caller may keep while
// the original changes.
func copyPartLoads(loads map[string]*partLoad) map[string]*partLoad {
	out := make(map[string]*partLoad, len(loads))
	for p, l := range loads {
		out[p] = &partLoad{QueueLoad: QueueLoad{Slots: copySet(l.Slots), Unslotted: l.Unslotted}, value: l.value, known: l.known}
	}
	return out
}

// partsFromViews returns the partitions' loads of the partitioned limits
// parts from the views, or nil when one of them may not be trusted. r.mu
// is not held.
func (r *runLoads) partsFromViews(parts partSpecs, setAt map[string]time.Time) map[string]map[string]*partLoad {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.told {
		return nil
	}
	out := map[string]map[string]*partLoad{}
	for name, pl := range parts {
		v := r.parts[name]
		if v == nil || v.arg != pl.arg || v.n != pl.n || time.Since(v.readAt) >= LimitRefresh ||
			!v.readAt.After(setAt[name+partSetAtKey].Add(2*LimitRefresh)) {
			return nil
		}
		out[name] = copyPartLoads(v.loads)
	}
	return out
}

// storePartViews keeps a read of the partitioned limits parts, sent at
// sent, as their views: none for a limit with a running job holding no
// partition slot. r.mu is held.
func (r *runLoads) storePartViews(parts partSpecs, pload map[string]map[string]*partLoad, sent time.Time) {
	for name, pl := range parts {
		r.parts[name] = &partView{arg: pl.arg, n: pl.n, readAt: sent, loads: copyPartLoads(pload[name])}
		for _, l := range pload[name] {
			if l.Unslotted > 0 {
				delete(r.parts, name)
				break
			}
		}
	}
}
