package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// rawValue marshals v as a BSON value.
func rawValue(t *testing.T, v any) bson.RawValue {
	t.Helper()
	typ, data, err := bson.MarshalValue(v)
	require.NoError(t, err)
	return bson.RawValue{Type: typ, Value: data}
}

// TestPartKeyMakesOneOfWhatMongoDBEqualityMakesOne: numbers of one value
// are one partition whatever their type, as are a missing field and null;
// a string of the same digits, another number and another field are not.
func TestPartKeyMakesOneOfWhatMongoDBEqualityMakesOne(t *testing.T) {
	one := store.PartKey("c", rawValue(t, int32(1)))
	require.Equal(t, one, store.PartKey("c", rawValue(t, int64(1))))
	require.Equal(t, one, store.PartKey("c", rawValue(t, 1.0)))
	require.NotEqual(t, one, store.PartKey("c", rawValue(t, "1")))
	require.NotEqual(t, one, store.PartKey("c", rawValue(t, 1.5)))
	require.NotEqual(t, one, store.PartKey("d", rawValue(t, int32(1))), "the field is part of the key")
	require.Equal(t, store.PartKey("c", bson.RawValue{}), store.PartKey("c", bson.RawValue{Type: bson.TypeNull}))
	require.Len(t, store.PartKey("c", rawValue(t, string([]byte{0xff, '/', 0}))), 16, "any bytes make a short key")
}

// partSlots counts the running jobs of kind k by the value of their args
// field c, as the database holds them, and checks each holds a partition
// slot of its own.
func partRunning(t *testing.T, b bundle) map[string]int {
	t.Helper()
	cur, err := b.db.Collection("jobs").Find(b.ctx, bson.D{{Key: "state", Value: "running"}, {Key: "kind", Value: "k"}})
	require.NoError(t, err)
	var docs []bson.Raw
	require.NoError(t, cur.All(b.ctx, &docs))
	out := map[string]int{}
	slots := map[string]bool{}
	for _, d := range docs {
		v := d.Lookup("args", "c")
		key := v.String()
		if v.Type == 0 || v.Type == bson.TypeNull {
			key = "null"
		} else if f, ok := v.AsFloat64OK(); ok {
			key = fmt.Sprint(f)
		}
		out[key]++
		slot, ok := d.Lookup("kindPartSlot").StringValueOK()
		require.True(t, ok, "a running job of a partitioned kind holds a partition slot")
		require.False(t, slots[slot], "two running jobs hold slot %s", slot)
		slots[slot] = true
	}
	return out
}

// TestPartitionLimitPerValue: under 2 per value of args.c, a claim of many
// takes 2 of each value, the numbers 1, 1.0 and int64 1 being one value,
// and a missing c and a null one another; a second claim finds nothing;
// a job's end lets the next claim take one more of its value only.
func TestPartitionLimitPerValue(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetPartitionLimit(b.ctx, queue.KindLimit("k"), "c", 2, "test"))
	var ins []queue.Insert
	for i := range 4 {
		ins = append(ins,
			queue.Insert{Kind: "k", Args: bson.M{"c": "a", "i": i}},
			queue.Insert{Kind: "k", Args: bson.M{"c": "b", "i": i}},
			queue.Insert{Kind: "k", Args: bson.M{"c": []any{int32(1), int64(1), 1.0, int32(1)}[i], "i": i}},
			queue.Insert{Kind: "k", Args: bson.M{"c": []any{nil, nil, nil, nil}[i], "i": i}},
			queue.Insert{Kind: "k", Args: bson.M{"i": i}},
		)
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	s := store.Of(b.q)
	got, err := s.ClaimBatch(b.ctx, claimAll, 50)
	require.NoError(t, err)
	require.Len(t, got, 8)
	require.Equal(t, map[string]int{`"a"`: 2, `"b"`: 2, "1": 2, "null": 2}, partRunning(t, b))
	more, err := s.ClaimBatch(b.ctx, claimAsW2, 50)
	require.NoError(t, err)
	require.Empty(t, more, "every partition with jobs is saturated")

	var a *jobs.Job
	for _, j := range got {
		if c, _ := j.Args.Lookup("c").StringValueOK(); c == "a" {
			a = j
		}
	}
	require.NoError(t, s.Complete(b.ctx, store.LeaseOf(a)))
	more, err = s.ClaimBatch(b.ctx, claimAsW2, 50)
	require.NoError(t, err)
	require.Len(t, more, 1)
	c, _ := more[0].Args.Lookup("c").StringValueOK()
	require.Equal(t, "a", c)

	ls, err := b.q.RunLimits(b.ctx)
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, "c", ls[0].PartitionBy)
	require.True(t, ls[0].NoTotal)
	require.Equal(t, 8, ls[0].Running)
	require.Equal(t, 4, ls[0].Partitions)
	require.Equal(t, 4, ls[0].Saturated)
}

// TestPartitionSaturatedIsLeftOutOfTheClaim: 300 jobs of one customer come
// first in claim order, then 3 of others; under 1 per customer, claims of
// 2 (which read 4 candidates) take one of the first customer, then two of
// the others, then the last: the saturated partitions are left out of
// their filter, not read and rejected.
func TestPartitionSaturatedIsLeftOutOfTheClaim(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetPartitionLimit(b.ctx, queue.KindLimit("k"), "customer.id", 1, ""))
	var ins []queue.Insert
	for i := range 300 {
		ins = append(ins, queue.Insert{Kind: "k", Args: bson.M{"customer": bson.M{"id": 7}, "i": i}})
	}
	for i := range 3 {
		ins = append(ins, queue.Insert{Kind: "k", Args: bson.M{"customer": bson.M{"id": 100 + i}}})
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	s := store.Of(b.q)
	seen := map[int64]int{}
	for range 3 {
		got, err := s.ClaimBatch(b.ctx, claimAll, 2)
		require.NoError(t, err)
		require.NotEmpty(t, got, "a claim finds a partition with room")
		for _, j := range got {
			id, _ := j.Args.Lookup("customer", "id").AsInt64OK()
			seen[id]++
		}
	}
	require.Equal(t, map[int64]int{7: 1, 100: 1, 101: 1, 102: 1}, seen)
	got, err := s.ClaimBatch(b.ctx, claimAll, 2)
	require.NoError(t, err)
	require.Empty(t, got)
}

// TestPartitionWithTotal: 2 per customer and 3 in all: a claim of many
// takes 3.
func TestPartitionWithTotal(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetPartitionLimit(b.ctx, queue.KindLimit("k"), "c", 2, ""))
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 3, ""))
	var ins []queue.Insert
	for i := range 5 {
		ins = append(ins, queue.Insert{Kind: "k", Args: bson.M{"c": "a", "i": i}}, queue.Insert{Kind: "k", Args: bson.M{"c": "b", "i": i}})
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	got, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 10)
	require.NoError(t, err)
	require.Len(t, got, 3)
	for _, n := range partRunning(t, b) {
		require.LessOrEqual(t, n, 2)
	}
	ls, err := b.q.RunLimits(b.ctx)
	require.NoError(t, err)
	require.False(t, ls[0].NoTotal)
	require.Equal(t, 3, ls[0].Limit)
	require.Equal(t, 3, ls[0].Running)

	// Clearing the partition keeps the total; clearing the limit removes
	// both.
	had, err := b.q.ClearPartitionLimit(b.ctx, queue.KindLimit("k"))
	require.NoError(t, err)
	require.True(t, had)
	ls, err = b.q.RunLimits(b.ctx)
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, 3, ls[0].Limit)
	require.Empty(t, ls[0].PartitionBy)
	had, err = b.q.ClearPartitionLimit(b.ctx, queue.KindLimit("k"))
	require.NoError(t, err)
	require.False(t, had)
	require.NoError(t, b.q.SetPartitionLimit(b.ctx, queue.KindLimit("k"), "c", 2, ""))
	had, err = b.q.ClearLimit(b.ctx, queue.KindLimit("k"))
	require.NoError(t, err)
	require.True(t, had)
	ls, err = b.q.RunLimits(b.ctx)
	require.NoError(t, err)
	require.Empty(t, ls)
}

// TestPartitionLimitMalformedAndRefused: a partition's bad field names are
// refused, and a partitionBy or partitionLimit another application wrote
// wrong makes the limit malformed, which limits nothing and fails no claim.
func TestPartitionLimitMalformedAndRefused(t *testing.T) {
	b := setup(t)
	for _, arg := range []string{"", "$x", "a..b", "a.$b", "a\nb", string([]byte{0xff})} {
		require.Error(t, b.q.SetPartitionLimit(b.ctx, queue.KindLimit("k"), arg, 1, ""), "%q", arg)
	}
	require.Error(t, b.q.SetPartitionLimit(b.ctx, queue.KindLimit("k"), "c", -1, ""))
	require.Error(t, b.q.SetPartitionLimit(b.ctx, "k", "c", 1, ""))
	limits := b.db.Collection("limits")
	_, err := limits.InsertMany(b.ctx, []any{
		bson.D{{Key: "_id", Value: "kind:k"}, {Key: "partitionBy", Value: 5}, {Key: "partitionLimit", Value: 1}},
		bson.D{{Key: "_id", Value: "kind:u"}, {Key: "partitionBy", Value: "c"}, {Key: "partitionLimit", Value: "two"}},
	})
	require.NoError(t, err)
	_, err = b.q.EnqueueMany(b.ctx, []queue.Insert{{Kind: "k", Args: bson.M{"c": 1}}, {Kind: "k", Args: bson.M{"c": 1}}, {Kind: "u", Args: bson.M{"c": 1}}, {Kind: "u", Args: bson.M{"c": 1}}})
	require.NoError(t, err)
	p := claimAll
	p.Kinds = []string{"k", "u"}
	got, err := store.Of(b.q).ClaimBatch(b.ctx, p, 10)
	require.NoError(t, err)
	require.Len(t, got, 4, "a malformed limit limits nothing")
	ls, err := b.q.RunLimits(b.ctx)
	require.NoError(t, err)
	require.Len(t, ls, 2)
	require.Contains(t, ls[0].Malformed, "partitionBy")
	require.Contains(t, ls[1].Malformed, "partitionLimit")
}

// TestPartitionConcurrentClaimersNeverExceedIt: 6 claimers with clients
// of their own claim and end attempts of jobs spread over 4 customers and
// a missing field, under 2 per customer and 6 in all; a sampler of the
// database never sees more than 2 running of one customer or 6 in all, and
// every job ends.
func TestPartitionConcurrentClaimersNeverExceedIt(t *testing.T) {
	b := setup(t)
	const per, total = 2, 6
	require.NoError(t, b.q.SetPartitionLimit(b.ctx, queue.KindLimit("k"), "c", per, ""))
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), total, ""))
	var ins []queue.Insert
	for i := range 100 {
		args := bson.M{"i": i}
		if i%5 != 4 {
			args["c"] = []any{"a", int32(2), 2.5, "d"}[i%5]
		}
		ins = append(ins, queue.Insert{Kind: "k", Args: args, Opts: queue.InsertOpts{MaxAttempts: 100}})
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	var maxPart, maxAll atomic.Int32
	bump := func(m *atomic.Int32, v int32) {
		for {
			old := m.Load()
			if v <= old || m.CompareAndSwap(old, v) {
				return
			}
		}
	}
	done := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			counts := partRunning(t, b)
			all := 0
			for _, n := range counts {
				bump(&maxPart, int32(n))
				all += n
			}
			bump(&maxAll, int32(all))
			time.Sleep(time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q, err := queue.New(testdb.Client(t).Database(b.db.Name()), queue.Config{RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})
			if err != nil {
				t.Error(err)
				return
			}
			s := store.Of(q)
			p := store.ClaimParams{Owner: fmt.Sprintf("w%d", w), Queues: []string{"default"}, Kinds: []string{"k"}, Lease: time.Minute}
			for ctx.Err() == nil {
				got, err := s.ClaimBatch(ctx, p, 1+rand.IntN(3))
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if len(got) == 0 {
					n, _ := b.db.Collection("jobs").CountDocuments(ctx, bson.D{{Key: "state", Value: bson.D{{Key: "$ne", Value: "succeeded"}}}})
					if n == 0 {
						return
					}
					time.Sleep(2 * time.Millisecond)
					continue
				}
				time.Sleep(time.Duration(10+rand.IntN(20)) * time.Millisecond)
				for _, j := range got {
					switch rand.IntN(4) {
					case 0:
						_, err = s.Fail(ctx, store.LeaseOf(j), j, errors.New("flaky"))
					case 1:
						err = s.Release(ctx, store.LeaseOf(j))
					default:
						err = s.Complete(ctx, store.LeaseOf(j))
					}
					if err != nil {
						t.Errorf("end attempt of %s: %v", j.ID, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	sampler.Wait()
	require.NoError(t, ctx.Err(), "every job ended in time")
	require.LessOrEqual(t, maxPart.Load(), int32(per), "running jobs of one customer sampled in the database")
	require.LessOrEqual(t, maxAll.Load(), int32(total), "running jobs of the kind sampled in the database")
	require.GreaterOrEqual(t, maxAll.Load(), int32(per+1), "partitions ran side by side (the test can fail)")
	n, err := b.db.Collection("jobs").CountDocuments(b.ctx, bson.D{{Key: "kindPartSlot", Value: bson.D{{Key: "$exists", Value: true}}}})
	require.NoError(t, err)
	require.Zero(t, n, "no partition slot is left held")
}

// setPartitionLongAgo sets a partition limit of n per args.c on kind k,
// set an hour ago as far as the views can tell.
func setPartitionLongAgo(t *testing.T, b bundle, n int) {
	t.Helper()
	require.NoError(t, b.q.SetPartitionLimit(b.ctx, queue.KindLimit("k"), "c", n, "test"))
	_, err := b.db.Collection(store.DefaultLimitsCollection).UpdateOne(b.ctx, bson.D{{Key: "_id", Value: "kind:k"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "partitionSetAt", Value: time.Now().Add(-time.Hour)}}}})
	require.NoError(t, err)
}

// finds counts the finds on the jobs in cmds: a claim's candidates, and a
// read of a limit's running jobs.
func finds(cmds []string) int {
	n := 0
	for _, c := range cmds {
		if c == "find jobs" {
			n++
		}
	}
	return n
}

// TestPartitionViews: a worker's client (told of its own frees) claims
// under a partition limit from a view of its partitions younger than
// LimitRefresh: its second claim sends one find (its candidates, the
// candidates kept by the first aged out), not two;
// a slot its own finished run freed goes to its next claim without a
// read; a slot another client took meanwhile is refused by the index,
// which drops the views, and the limit holds throughout.
func TestPartitionViews(t *testing.T) {
	b := setup(t)
	setPartitionLongAgo(t, b, 1)
	var ins []queue.Insert
	for i := range 9 {
		ins = append(ins, queue.Insert{Kind: "k", Args: bson.M{"c": []string{"a", "b", "c"}[i%3], "i": i}})
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	_, s, cmds := monitoredStore(t, b)
	s.RunEnded("none") // a worker's client: told of its own frees

	got, err := s.ClaimBatch(b.ctx, claimAll, 2)
	require.NoError(t, err)
	require.Len(t, got, 2)
	before := finds(cmds())
	require.Equal(t, 2, before, "the first claim reads the running jobs, then its candidates")

	noCache := func() { store.AgeCandidates(s, time.Hour) } // what is counted here is the read of the running jobs
	noCache()
	more, err := s.ClaimBatch(b.ctx, claimAll, 2)
	require.NoError(t, err)
	require.Len(t, more, 1, "the third customer's, the others full")
	require.Equal(t, 1, finds(cmds())-before, "from the view: the candidates' find only")

	// Its own run ends: the slot goes to its next claim, read from the
	// view.
	require.NoError(t, s.Complete(b.ctx, store.LeaseOf(got[0])))
	s.RunEnded(got[0].ID)
	before = finds(cmds())
	noCache()
	next, err := s.ClaimBatch(b.ctx, claimAll, 2)
	require.NoError(t, err)
	require.Len(t, next, 1)
	require.Equal(t, got[0].Args.Lookup("c").StringValue(), next[0].Args.Lookup("c").StringValue())
	require.Equal(t, 1, finds(cmds())-before)

	// Its own run ends, and another client takes the freed slot before
	// it: its stamp from the view is refused by the index, which drops
	// the views; the claim reads the running jobs again (more finds than
	// a claim from a view), and the limit holds throughout.
	other := store.Of(b.q)
	require.NoError(t, s.Complete(b.ctx, store.LeaseOf(more[0])))
	s.RunEnded(more[0].ID)
	taken, err := other.ClaimBatch(b.ctx, claimAsW2, 1)
	require.NoError(t, err)
	require.Len(t, taken, 1, "the freed partition's next job, taken by another client")
	require.Equal(t, "c", taken[0].Args.Lookup("c").StringValue())
	before = finds(cmds())
	noCache()
	stale, err := s.ClaimBatch(b.ctx, claimAll, 2)
	require.NoError(t, err)
	require.Empty(t, stale, "its view's free slot is taken: the stamp is refused")
	require.Greater(t, finds(cmds())-before, 1, "the refused stamp sent the claim back to a read")
	for _, n := range partRunning(t, b) {
		require.LessOrEqual(t, n, 1)
	}
	// Every partition is full now: the next claim takes nothing.
	noCache()
	none, err := s.ClaimBatch(b.ctx, claimAll, 2)
	require.NoError(t, err)
	require.Empty(t, none)
}

// TestPartitionFieldsOneInsideAnother: a kind partitioned by
// customer.id and its queue by customer: the read of the running jobs
// projects the outer field only (a projection refuses both), and each
// limit holds.
func TestPartitionFieldsOneInsideAnother(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetPartitionLimit(b.ctx, queue.KindLimit("k"), "customer.id", 1, ""))
	require.NoError(t, b.q.SetPartitionLimit(b.ctx, queue.QueueLimit("default"), "customer", 2, ""))
	var ins []queue.Insert
	for i := range 6 {
		ins = append(ins, queue.Insert{Kind: "k", Args: bson.M{"customer": bson.M{"id": i % 2}, "i": i}})
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	s := store.Of(b.q)
	got, err := s.ClaimBatch(b.ctx, claimAll, 6)
	require.NoError(t, err)
	require.Len(t, got, 2, "one per customer.id")
	more, err := s.ClaimBatch(b.ctx, claimAll, 6)
	require.NoError(t, err)
	require.Empty(t, more, "read back from the running jobs: both values full")
}

// TestPartitionLargeValueIsNotSentWithClaims: a full partition whose
// value is large (another app's 100 KB string) is not left out of the
// claim's filter by value, so claims stay small; its jobs are still not
// claimed while it is full.
func TestPartitionLargeValueIsNotSentWithClaims(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetPartitionLimit(b.ctx, queue.KindLimit("k"), "c", 1, ""))
	big := strings.Repeat("x", 100_000)
	_, err := b.q.EnqueueMany(b.ctx, []queue.Insert{
		{Kind: "k", Args: bson.M{"c": big, "i": 0}}, {Kind: "k", Args: bson.M{"c": big, "i": 1}},
		{Kind: "k", Args: bson.M{"c": "small", "i": 2}},
	})
	require.NoError(t, err)
	s := store.Of(b.q)
	got, err := s.ClaimBatch(b.ctx, claimAll, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, big, got[0].Args.Lookup("c").StringValue())
	more, err := s.ClaimBatch(b.ctx, claimAll, 5)
	require.NoError(t, err)
	require.Len(t, more, 1, "the small customer's; the big one is full")
	require.Equal(t, "small", more[0].Args.Lookup("c").StringValue())
	require.Equal(t, []int{1}, store.SkippedPartitionValues(map[string]int{"small": 1, big: 1}, 1),
		"a full partition's large value is not sent with the claims")
}

// TestPartitionOfARegexValueLeavesOthersClaimable: a running job whose
// partition value is a regex (an invalid pattern, or one that matches
// other values) fills its partition; a claim's filter cannot leave it out
// by value ($nin would read the regex as a pattern: an invalid one failed
// every claim, a valid one left out "alice"): every regex value is left
// out while it is full, and the other partitions' jobs are claimed, past
// more of its jobs than a claim reads at once.
func TestPartitionOfARegexValueLeavesOthersClaimable(t *testing.T) {
	for name, re := range map[string]bson.Regex{"invalid": {Pattern: "a["}, "matching": {Pattern: "^a"}} {
		t.Run(name, func(t *testing.T) {
			b := setup(t)
			require.NoError(t, b.q.SetPartitionLimit(b.ctx, queue.KindLimit("k"), "c", 1, ""))
			var ins []queue.Insert
			for i := range 200 { // more than a claim's window of candidates
				ins = append(ins, queue.Insert{Kind: "k", Args: bson.D{{Key: "c", Value: re}, {Key: "i", Value: i}}})
			}
			_, err := b.q.EnqueueMany(b.ctx, ins)
			require.NoError(t, err)
			s := store.Of(b.q)
			got, err := s.ClaimBatch(b.ctx, claimAll, 1)
			require.NoError(t, err)
			require.Len(t, got, 1, "the first regex job")
			_, err = b.q.EnqueueMany(b.ctx, []queue.Insert{{Kind: "k", Args: bson.M{"c": "alice"}}, {Kind: "k", Args: bson.M{"c": "bob"}}})
			require.NoError(t, err)
			got, err = s.ClaimBatch(b.ctx, claimAll, 5)
			require.NoError(t, err, "a claim beside a full regex partition")
			var cs []string
			for _, j := range got {
				cs = append(cs, j.Args.Lookup("c").StringValue())
			}
			require.ElementsMatch(t, []string{"alice", "bob"}, cs, "the regex partition is full; the others run")
		})
	}
}
