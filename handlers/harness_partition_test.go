package handlers_test

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// partBeforeClaim partitions the kind of the job under test, 1 running job
// per value of its first args field (customerId, which it lacks, when it
// has none: the partition of null), with no total, before A claims it,
// with the partition slots' unique index.
func (h *harnessEnv) partBeforeClaim(t *testing.T) {
	t.Helper()
	j := h.get(t, h.subject)
	// The world sets a total too, for a while.
	for _, ix := range []string{store.KindPartSlotIndex, store.KindRunSlotIndex} {
		_, err := store.Of(h.q).Collection().Indexes().CreateOne(h.ctx, mongo.IndexModel{
			Keys:    bson.D{{Key: ix, Value: 1}},
			Options: options.Index().SetName(ix).SetUnique(true).SetSparse(true),
		})
		require.NoError(t, err)
	}
	h.partKind, h.partArg, h.partP = j.Kind, "customerId", map[string]string{}
	if els, err := j.Args.Elements(); err == nil && len(els) > 0 {
		h.partArg = els[0].Key()
	}
	h.must(t, "set the partition limit", func() error {
		return h.q.SetPartitionLimit(h.ctx, queue.KindLimit(h.partKind), h.partArg, 1, "harness")
	})
}

// harnessPartOf names the partition of an args value as MongoDB's equality
// sees it: missing and null alike, numbers of one value alike.
func harnessPartOf(v bson.RawValue) string {
	switch v.Type {
	case 0, bson.TypeNull:
		return "null"
	case bson.TypeInt32, bson.TypeInt64, bson.TypeDouble:
		f, _ := v.AsFloat64OK()
		if f == math.Trunc(f) {
			return "number " + strconv.FormatInt(int64(f), 10)
		}
		return "number " + strconv.FormatFloat(f, 'g', -1, 64)
	default:
		return v.String()
	}
}

// checkPartition checks the partition limit of worldPartition (nothing in
// other worlds): at most bound running jobs of the kind per partition,
// each holding a partition slot "<kind>/<p>/<k>" of its own (k below 2,
// the most the world raises it to), no job that is not running holding
// one, and one p per partition and one partition per p, in this read and
// in every one before.
func (h *harnessEnv) checkPartition(t *testing.T, bound int) {
	t.Helper()
	if h.partKind == "" {
		return
	}
	cur, err := store.Of(h.q).Collection().Find(h.ctx, bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "kindPartSlot", Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: "queuePartSlot", Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: "kind", Value: h.partKind}, {Key: "state", Value: jobs.StateRunning}},
	}}})
	require.NoError(t, err)
	var docs []struct {
		ID    string     `bson:"_id"`
		Kind  string     `bson:"kind"`
		State jobs.State `bson:"state"`
		Args  bson.Raw   `bson:"args"`
		Slot  *string    `bson:"kindPartSlot"`
		QSlot *string    `bson:"queuePartSlot"`
	}
	require.NoError(t, cur.All(h.ctx, &docs))
	running := map[string][]string{}
	held := map[string]string{}
	for _, d := range docs {
		require.Nil(t, d.QSlot, "job %s holds a queue partition slot; no queue is partitioned", d.ID)
		v, _ := d.Args.LookupErr(strings.Split(h.partArg, ".")...)
		part := harnessPartOf(v)
		if d.Kind == h.partKind && d.State == jobs.StateRunning {
			require.NotNil(t, d.Slot, "job %s (partition %s) runs without a partition slot", d.ID, part)
			running[part] = append(running[part], d.ID)
		}
		if d.Slot == nil {
			continue
		}
		require.Equal(t, jobs.StateRunning, d.State, "job %s (partition %s) holds partition slot %s", d.ID, part, *d.Slot)
		require.Equal(t, h.partKind, d.Kind, "job %s holds partition slot %s", d.ID, *d.Slot)
		require.Empty(t, held[*d.Slot], "jobs %s and %s hold partition slot %s", held[*d.Slot], d.ID, *d.Slot)
		held[*d.Slot] = d.ID
		f := strings.Split(*d.Slot, "/")
		require.Len(t, f, 3, "partition slot %q", *d.Slot)
		k, err := strconv.Atoi(f[2])
		require.True(t, f[0] == h.partKind && err == nil && k >= 0 && k < 2, "job %s holds partition slot %q", d.ID, *d.Slot)
		if p, ok := h.partP[part]; ok {
			require.Equal(t, p, f[1], "partition %s holds slots of two names", part)
		}
		if other, ok := h.partP["slot "+f[1]]; ok {
			require.Equal(t, other, part, "slots of %s are held by two partitions", f[1])
		}
		h.partP[part], h.partP["slot "+f[1]] = f[1], part
	}
	for part, ids := range running {
		require.LessOrEqual(t, len(ids), bound, "running jobs of %s's partition %s (by %s): %v", h.partKind, part, h.partArg, ids)
	}
}

// partitionWorld runs while A holds the job and its partition's only slot
// (1 per value, no total): copies of the job, each with its partition
// field set (or not) to name a partition, are claimed around changes to
// the limit, each claim and step checked (checkPartition). A claim skips
// the copy of A's full partition for one of another partition; the
// numbers 7 (int32) and 7.0 (double) are one partition; the partition
// limit lowered to 0, raised to 2 under a total of 2 that still stops a
// claim, the total raised to 3, the partition limit lowered back to 1, and
// cleared. The copies are claimed, given back and completed here without
// running their handler; the partition limit is 1, with no total, when it
// returns.
func (h *harnessEnv) partitionWorld(t *testing.T) {
	t.Helper()
	s := store.Of(h.q)
	name := queue.KindLimit(h.partKind)
	subject := h.get(t, h.subject)
	// copyWith enqueues a copy of the job with its partition field set to
	// v, or as the job's when v is nil.
	copyWith := func(v any) string {
		t.Helper()
		var args bson.D
		require.NoError(t, bson.Unmarshal(subject.Args, &args))
		if v != nil {
			set := false
			for i := range args {
				if args[i].Key == h.partArg {
					args[i].Value, set = v, true
				}
			}
			if !set {
				args = append(args, bson.E{Key: h.partArg, Value: v})
			}
		}
		res, err := h.enqueueJob(t, subject.Kind, args, queue.InsertOpts{})
		require.NoError(t, err)
		return res.ID
	}
	claim := func() *jobs.Job {
		t.Helper()
		return h.claim(t, store.ClaimParams{
			Owner: "partition-world", Queues: []string{jobs.DefaultQueue}, Kinds: []string{h.partKind}, Lease: time.Minute,
		})
	}
	complete := func(x *jobs.Job) {
		t.Helper()
		h.must(t, "complete", func() error { return s.Complete(h.ctx, store.LeaseOf(x)) })
	}
	setLimit := func(n int) {
		t.Helper()
		h.must(t, "set the total", func() error { return h.q.SetLimit(h.ctx, name, n, "harness") })
	}
	// claimed claims id, or one of alt when a claim whose reply failed
	// gave jobs back meanwhile, which moved them behind alt in claim
	// order.
	claimed := func(id, what string, alt ...string) *jobs.Job {
		t.Helper()
		before := h.givenBack
		x := claim()
		require.NotNil(t, x, what)
		if h.givenBack > before && slices.Contains(alt, x.ID) {
			return x
		}
		require.Equal(t, id, x.ID, what)
		return x
	}
	setPart := func(n int) {
		t.Helper()
		h.must(t, "set the partition limit", func() error { return h.q.SetPartitionLimit(h.ctx, name, h.partArg, n, "harness") })
	}
	h.checkPartition(t, 1)
	same := copyWith(nil) // first in claim order
	other := copyWith("harness-other")
	x := claimed(other, "a claim past the copy of A's full partition, of another partition")
	h.checkPartition(t, 1)
	seven := copyWith(int32(7))
	sevenDouble := copyWith(7.0)
	y := claimed(seven, "the copy of the partition of 7", sevenDouble)
	require.Nil(t, claim(), "a claim of 7.0 while 7's partition is full")
	h.checkPartition(t, 1)
	complete(y)
	next := sevenDouble
	if y.ID == sevenDouble {
		next = seven
	}
	y = claimed(next, "7.0, once 7 ended")
	h.checkPartition(t, 1)
	complete(y)
	setPart(0)
	require.Nil(t, claim(), "a claim under a partition limit of 0")
	h.checkPartition(t, 1) // lowering stops none
	setPart(2)
	setLimit(2)
	require.Nil(t, claim(), "a claim under a total of 2 with A and the other partition's copy running")
	h.checkPartition(t, 2)
	setLimit(3)
	z := claimed(same, "the copy of A's partition, raised to 2 under a total of 3")
	h.checkPartition(t, 2)
	setPart(1)
	h.checkPartition(t, 2) // lowering stops none
	h.must(t, "release", func() error { return s.Release(h.ctx, store.LeaseOf(z)) })
	h.checkPartition(t, 1)
	require.Nil(t, claim(), "a claim of A's partition, full again")
	h.must(t, "clear the partition limit", func() error { _, err := h.q.ClearPartitionLimit(h.ctx, name); return err })
	z = claimed(same, "the copy of A's partition, the partition limit cleared")
	complete(z)
	complete(x)
	h.must(t, "clear the total", func() error { _, err := h.q.ClearLimit(h.ctx, name); return err })
	setPart(1)
	h.checkPartition(t, 1)
}
