package store_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestParseRatePartitioned(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want queue.Rate
		err  string
	}{
		{in: "10/m burst 2 per customerId", want: queue.Rate{N: 10, Per: time.Minute, Burst: 2, By: "customerId"}},
		{in: "3/s per customer.id", want: queue.Rate{N: 3, Per: time.Second, By: "customer.id"}},
		{in: "3/s per $bad", err: "'$'"},
		{in: "3/s per", err: "N/PERIOD"},
		{in: "3/s burst 2 per a b", err: "N/PERIOD"},
	} {
		got, err := queue.ParseRate(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
		back, err := queue.ParseRate(got.String())
		require.NoError(t, err)
		require.Equal(t, got, back)
	}
}

// enqueueFor enqueues n jobs of kind k for each customer, in order: all
// of the first customer's, then the next's.
func enqueueFor(t *testing.T, b bundle, n int, customers ...any) {
	t.Helper()
	var ins []queue.Insert
	for _, cu := range customers {
		for i := range n {
			ins = append(ins, queue.Insert{Kind: "k", Args: bson.M{"customerId": cu, "i": i}})
		}
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
}

// byCustomer counts got by customerId.
func byCustomer(got []*jobs.Job) map[string]int {
	out := map[string]int{}
	for _, j := range got {
		out[customerOf(j)]++
	}
	return out
}

func customerOf(j *jobs.Job) string {
	v := j.Args.Lookup("customerId")
	if s, ok := v.StringValueOK(); ok {
		return s
	}
	return v.String()
}

// TestRatePartitionsHeldAcrossProcesses: two clients (as two processes),
// each with two claim loops taking batches of 3, claim the jobs of three
// customers under 5 per 500 ms with a burst of 2 per customerId for 2.2
// s: no window of 500 ms holds more than 5 + 2 claims of one customer, and
// every customer's rate is used.
func TestRatePartitionsHeldAcrossProcesses(t *testing.T) {
	b := setup(t)
	r := queue.Rate{N: 5, Per: 500 * time.Millisecond, Burst: 2, By: "customerId"}
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), r, "test"))
	// Interleaved, so that claim order favours none of them: the test is
	// of the rate, not of claim order on a slow machine.
	for range 40 {
		enqueueFor(t, b, 1, "a", "b", "c")
	}
	var mu sync.Mutex
	at := map[string][]time.Time{}
	end := time.Now().Add(2200 * time.Millisecond)
	var wg sync.WaitGroup
	for proc := range 2 {
		q, err := queue.New(b.db, queue.Config{})
		require.NoError(t, err)
		s := store.Of(q)
		for loop := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := claimAll
				p.Owner = string(rune('a'+proc)) + string(rune('0'+loop))
				for time.Now().Before(end) {
					got, err := s.ClaimBatch(b.ctx, p, 3)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, j := range got {
						at[customerOf(j)] = append(at[customerOf(j)], *j.HeartbeatAt)
					}
					mu.Unlock()
					if len(got) == 0 {
						wait := 20 * time.Millisecond
						if next := store.Of(q).NextRateStart(); !next.IsZero() {
							wait = min(wait, time.Until(next))
						}
						time.Sleep(max(wait, time.Millisecond))
					}
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("starts: a %d, b %d, c %d", len(at["a"]), len(at["b"]), len(at["c"]))
	for _, cu := range []string{"a", "b", "c"} {
		most := maxInWindow(at[cu], 500*time.Millisecond)
		require.LessOrEqual(t, most, 5+2, "customer %s: at most N + burst starts in any period", cu)
		// 2.2 s allow 2 + 5·2.2/0.5 = 24 each; more than the burst and
		// the first period's shows the partition refilling, even on a
		// loaded machine where a claim takes 200 ms.
		require.GreaterOrEqual(t, len(at[cu]), 6, "customer %s: the rate is used", cu)
	}
	rls, err := b.q.RateLimits(b.ctx)
	require.NoError(t, err)
	require.Len(t, rls, 1)
	require.GreaterOrEqual(t, rls[0].Starts, int64(len(at["a"])+len(at["b"])+len(at["c"])), "starts counts the starts claimed (and those of late claims given back)")
	require.Equal(t, 3, rls[0].Partitions)
}

// TestRatePartitionSpentLeavesOthersClaimable: a customer whose partition
// is spent, first in claim order, does not hold back the others, neither
// for the process that spent it (which leaves it out of its filter) nor
// for another that has not seen it yet (which reads past it); a claim that
// finds only spent partitions says when the earliest allows a start.
func TestRatePartitionSpentLeavesOthersClaimable(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 1, Per: time.Hour, Burst: 2, By: "customerId"}, ""))
	enqueueFor(t, b, 6, "a")
	enqueueFor(t, b, 3, "b", "c")
	s := store.Of(b.q)
	got, err := s.ClaimBatch(b.ctx, claimAll, 3)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"a": 2, "b": 1}, byCustomer(got), "claim order, a's burst")
	got, err = s.ClaimBatch(b.ctx, claimAll, 10)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"b": 1, "c": 2}, byCustomer(got))

	// Another process, which knows nothing of a and b: a's and b's jobs
	// come first in claim order, yet it claims c's... which is spent too.
	enqueueFor(t, b, 2, "d")
	other, err := queue.New(b.db, queue.Config{})
	require.NoError(t, err)
	j, err := store.Of(other).Claim(b.ctx, claimAsW2)
	require.NoError(t, err)
	require.NotNil(t, j)
	require.Equal(t, "d", customerOf(j))

	got, err = s.ClaimBatch(b.ctx, claimAll, 10)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"d": 1}, byCustomer(got))
	got, err = s.ClaimBatch(b.ctx, claimAll, 10)
	require.NoError(t, err)
	require.Empty(t, got)
	require.WithinDuration(t, b.clock.Now().Add(time.Hour), store.Of(b.q).NextRateStart(), 5*time.Second)
	j, err = s.Claim(b.ctx, claimAll)
	require.NoError(t, err)
	require.Nil(t, j)

	rls, err := b.q.RateLimits(b.ctx)
	require.NoError(t, err)
	require.Len(t, rls, 1)
	require.Equal(t, 4, rls[0].Partitions)
	require.Equal(t, 4, rls[0].Spent)
	require.Equal(t, int64(8), rls[0].Starts)

	// An hour on, each allows one more.
	b.clock.Advance(time.Hour)
	got, err = s.ClaimBatch(b.ctx, claimAll, 10)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, byCustomer(got))
}

// TestRatePartitionValues: numbers of one value are one partition, as are
// a missing field and null.
func TestRatePartitionValues(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 1, Per: time.Hour, By: "customerId"}, ""))
	_, err := b.q.EnqueueMany(b.ctx, []queue.Insert{
		{Kind: "k", Args: bson.M{"customerId": int32(7)}},
		{Kind: "k", Args: bson.M{"customerId": 7.0}},
		{Kind: "k", Args: bson.M{"customerId": int64(7)}},
		{Kind: "k", Args: bson.M{"customerId": nil}},
		{Kind: "k", Args: bson.M{"other": 1}},
		{Kind: "k"},
	})
	require.NoError(t, err)
	got, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 10)
	require.NoError(t, err)
	require.Len(t, got, 2, "one of 7, one of null")
	got, err = store.Of(b.q).ClaimBatch(b.ctx, claimAll, 10)
	require.NoError(t, err)
	require.Empty(t, got)
}

// TestRatePartitionLostReservationReply: a reservation applied whose
// reply is lost fails the claim and counts as taken.
func TestRatePartitionLostReservationReply(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 2, Per: time.Hour, Burst: 2, By: "customerId"}, ""))
	enqueueFor(t, b, 3, "a")
	s := store.Of(b.q)
	lost := true
	store.SetRateHooks(s, func() error {
		if lost {
			lost = false
			return errors.New("connection reset")
		}
		return nil
	}, nil)
	_, err := s.ClaimBatch(b.ctx, claimAll, 2)
	require.ErrorContains(t, err, "connection reset")
	enqueueFor(t, b, 1, "b")
	got, err := s.ClaimBatch(b.ctx, claimAll, 5)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"b": 1}, byCustomer(got), "the lost reservation took a's burst")
	require.Equal(t, int64(1), countState(t, b, jobs.StateRunning))
}

// TestRatePartitionStalledClaimGivesItsJobsBack: a claim that stalls past
// RateStartLag between its reservation and its claim gives the jobs back,
// attempts not counted, and keeps the reservation used.
func TestRatePartitionStalledClaimGivesItsJobsBack(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 2, Per: time.Hour, Burst: 2, By: "customerId"}, ""))
	enqueueFor(t, b, 3, "a")
	s := store.Of(b.q)
	store.SetRateHooks(s, nil, func() { b.clock.Advance(queue.RateStartLag + 100*time.Millisecond) })
	got, err := s.ClaimBatch(b.ctx, claimAll, 3)
	require.NoError(t, err)
	require.Empty(t, got)
	require.Zero(t, countState(t, b, jobs.StateRunning))
	n, err := b.db.Collection("jobs").CountDocuments(b.ctx, bson.D{{Key: "attempt", Value: bson.D{{Key: "$ne", Value: 0}}}})
	require.NoError(t, err)
	require.Zero(t, n, "no attempt counted")
	store.SetRateHooks(s, nil, nil)
	got, err = s.ClaimBatch(b.ctx, claimAll, 3)
	require.NoError(t, err)
	require.Empty(t, got, "the stalled claim's reservation stays used")
}

// TestRatePartitionMalformedDocuments: partition documents another app
// wrote badly (a tat that is not a date, a starts that is not a number, an
// _id that is not a string) are taken as no state and rewritten, and a
// partitioned rate whose partitionBy is malformed limits nothing: claims
// of every kind go on.
func TestRatePartitionMalformedDocuments(t *testing.T) {
	b := setup(t)
	core, logs := observer.New(zap.WarnLevel)
	q, err := queue.New(b.db, queue.Config{Logger: zap.New(core)})
	require.NoError(t, err)
	require.NoError(t, q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 1, Per: time.Hour, Burst: 2, By: "customerId"}, ""))
	_, err = b.db.Collection("limits").InsertOne(b.ctx,
		bson.D{{Key: "_id", Value: "rate:kind:other"}, {Key: "rate", Value: 1}, {Key: "periodMs", Value: 1000}, {Key: "burst", Value: 1}, {Key: "partitionBy", Value: 5}})
	require.NoError(t, err)
	_, av, _ := bson.MarshalValue("a")
	_, bv, _ := bson.MarshalValue("b")
	part := func(v []byte) string {
		return "kind:k/" + store.PartKey("customerId", bson.RawValue{Type: bson.TypeString, Value: v})
	}
	_, err = b.db.Collection("rate_partitions").InsertMany(b.ctx, []any{
		bson.D{{Key: "_id", Value: part(av)}, {Key: "tat", Value: "yesterday"}, {Key: "starts", Value: "many"}},
		bson.D{{Key: "_id", Value: part(bv)}, {Key: "tat", Value: bson.A{1}}},
		bson.D{{Key: "_id", Value: 42}, {Key: "tat", Value: time.Now().Add(time.Hour)}},
	})
	require.NoError(t, err)
	enqueueFor(t, b, 3, "a", "b")
	enqueueKinds(t, b, 3, "other", "free")
	// And a job that does not decode, first in claim order: buried.
	_, err = b.db.Collection("jobs").InsertOne(b.ctx, bson.D{{Key: "_id", Value: "bad"}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "default"},
		{Key: "state", Value: "available"}, {Key: "runAt", Value: time.Now().Add(-time.Hour)}, {Key: "priority", Value: "high"}, {Key: "attempt", Value: 0}})
	require.NoError(t, err)
	p := claimAll
	p.Kinds = []string{"k", "other", "free"}
	got, err := store.Of(q).ClaimBatch(b.ctx, p, 20)
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, j := range got {
		kinds[j.Kind]++
	}
	require.Equal(t, map[string]int{"k": 4, "other": 3, "free": 3}, kinds)
	var bad bson.M
	require.NoError(t, b.db.Collection("jobs").FindOne(b.ctx, bson.D{{Key: "_id", Value: "bad"}}).Decode(&bad))
	require.Equal(t, "dead", bad["state"], "the job that does not decode is buried")
	require.Equal(t, map[string]int{"a": 2, "b": 2, "": 6}, func() map[string]int {
		m := byCustomer(got)
		m[""] = m["<nil>"] + m[""]
		delete(m, "<nil>")
		return m
	}())
	require.Equal(t, 1, logs.FilterMessageSnippet("rate limit's document is malformed").Len())
	var doc bson.M
	require.NoError(t, b.db.Collection("rate_partitions").FindOne(b.ctx, bson.D{{Key: "_id", Value: part(av)}}).Decode(&doc))
	require.EqualValues(t, 2, doc["starts"], "a starts that was not a number is counted afresh")
	rls, err := q.RateLimits(b.ctx)
	require.NoError(t, err)
	require.Len(t, rls, 2)
	require.Contains(t, rls[1].Malformed, "partitionBy")
}

// TestRatePartitionFollowsAChangedRate: a process whose cached rate
// another process lowered since reserves under the new one: the rate is
// confirmed after the partitions' reservations.
func TestRatePartitionFollowsAChangedRate(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 100, Per: time.Hour, Burst: 100, By: "customerId"}, ""))
	s := store.Of(b.q)
	got, err := s.ClaimBatch(b.ctx, claimAll, 5) // caches the rate
	require.NoError(t, err)
	require.Empty(t, got)
	other, err := queue.New(b.db, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, other.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 1, Per: time.Hour, Burst: 1, By: "customerId"}, "operator"))
	enqueueFor(t, b, 5, "a")
	got, err = s.ClaimBatch(b.ctx, claimAll, 5)
	require.NoError(t, err)
	require.Len(t, got, 1, "the reservation is made under the rate stored now")
	require.Equal(t, int64(1), countState(t, b, jobs.StateRunning), "the jobs claimed under the old rate were given back")
	got, err = s.ClaimBatch(b.ctx, claimAll, 5)
	require.NoError(t, err)
	require.Empty(t, got)

	// Plain to partitioned: a plain reservation is conditioned on
	// partitionBy too, and made on no partitioned rate's document (its
	// starts would not count in the partitions').
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 100, Per: time.Hour, Burst: 100}, ""))
	got, err = s.ClaimBatch(b.ctx, claimAll, 5) // caches the plain rate
	require.NoError(t, err)
	require.Len(t, got, 4, "a's other jobs")
	enqueueFor(t, b, 3, "b")
	require.NoError(t, other.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 1, Per: time.Hour, Burst: 1, By: "customerId"}, "operator"))
	got, err = s.ClaimBatch(b.ctx, claimAll, 5)
	require.NoError(t, err)
	require.Empty(t, got, "the stale plain rate reserves nothing")
	got, err = s.ClaimBatch(b.ctx, claimAll, 5)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"b": 1}, byCustomer(got))
}

// TestCleanRatePartitions: the documents of idle partitions are deleted,
// at most limit a pass, each conditioned on the tat read: a partition a
// claim wrote between the read and the delete is kept.
func TestCleanRatePartitions(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 1, Per: time.Hour, By: "customerId"}, ""))
	enqueueFor(t, b, 1, "a", "b", "c")
	s := store.Of(b.q)
	got, err := s.ClaimBatch(b.ctx, claimAll, 10)
	require.NoError(t, err)
	require.Len(t, got, 3)
	parts := b.db.Collection("rate_partitions")
	n, err := s.CleanRatePartitions(b.ctx, 10)
	require.NoError(t, err)
	require.Zero(t, n, "tat in the future: kept")

	b.clock.Advance(time.Hour + store.RatePartitionIdle)
	enqueueFor(t, b, 1, "a")
	store.SetRatePartCleanHook(s, func() {
		got, err := s.ClaimBatch(b.ctx, claimAll, 10)
		require.NoError(t, err)
		require.Len(t, got, 1)
	})
	n, err = s.CleanRatePartitions(b.ctx, 2)
	require.NoError(t, err)
	store.SetRatePartCleanHook(s, nil)
	left, err := parts.CountDocuments(b.ctx, bson.D{})
	require.NoError(t, err)
	require.Equal(t, int64(3-n), left)
	require.LessOrEqual(t, n, 1, "at most limit read, and a's, written meanwhile, kept")
	n2, err := s.CleanRatePartitions(b.ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 2-n, n2, "the other idle one")
	left, err = parts.CountDocuments(b.ctx, bson.D{})
	require.NoError(t, err)
	require.Equal(t, int64(1), left, "a's state, written by the claim, is kept")
	// And it still holds: a's next job waits.
	enqueueFor(t, b, 1, "a")
	got, err = s.ClaimBatch(b.ctx, claimAll, 10)
	require.NoError(t, err)
	require.Empty(t, got)
}

// TestRatePartitionCost measures the commands a claim under a partitioned
// rate sends: a single claim and batches of 10, of partitions new, known,
// and both: 5 commands, 6 when partitions are both new and known (a batch
// stamps the candidates it read).
func TestRatePartitionCost(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 100, Per: time.Second, Burst: 100, By: "customerId"}, ""))
	var customers []any
	for i := range 20 {
		customers = append(customers, i)
	}
	for range 3 { // customer 0, 1, … 19, then again
		enqueueFor(t, b, 1, customers...)
	}
	mc, cmds := testdb.Monitored(t)
	q, err := queue.New(mc.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	s := store.Of(q)
	count := func(k int) []string {
		before := len(cmds())
		got, err := s.ClaimBatch(b.ctx, claimAll, k)
		require.NoError(t, err)
		require.Len(t, got, k)
		return cmds()[before:]
	}
	first := count(1) // reads the limits too
	single := count(1)
	batchNew := count(10)   // customers 2 to 11
	batchMixed := count(10) // 12 to 19, then 0 and 1 again
	batchKnown := count(10) // 2 to 11 again
	t.Logf("first single claim: %d commands %v", len(first), first)
	t.Logf("single claim, new partition: %d commands %v", len(single), single)
	t.Logf("batch of 10, new partitions: %d commands %v", len(batchNew), batchNew)
	t.Logf("batch of 10, new and known partitions: %d commands %v", len(batchMixed), batchMixed)
	t.Logf("batch of 10, known partitions: %d commands %v", len(batchKnown), batchKnown)
	require.Len(t, single, 5)
	require.Len(t, batchNew, 5)
	require.Len(t, batchMixed, 6)
	require.Len(t, batchKnown, 5)
	for _, c := range append(append(append(single, batchNew...), batchMixed...), batchKnown...) {
		require.False(t, strings.HasSuffix(c, " limits") && strings.HasPrefix(c, "find"), "the limits are read once per LimitRefresh: %v", c)
	}
}

// TestRatePartitionAndConcurrencyLimitTogether: a kind under a
// partitioned rate and a concurrency limit takes the smaller; the starts
// reserved and not used are given back.
func TestRatePartitionAndConcurrencyLimitTogether(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 10, Per: time.Hour, Burst: 10, By: "customerId"}, ""))
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 2, ""))
	enqueueFor(t, b, 5, "a")
	s := store.Of(b.q)
	got, err := s.ClaimBatch(b.ctx, claimAll, 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	var doc bson.M
	require.NoError(t, b.db.Collection("rate_partitions").FindOne(b.ctx, bson.D{}).Decode(&doc))
	require.EqualValues(t, 2, doc["starts"], "the unused starts were given back")
	rls, err := b.q.RateLimits(b.ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), rls[0].Starts)
	require.Zero(t, rls[0].Spent)
}

// TestRatePartitionLostStampReply: a claim whose stamp's reply is lost
// fails; its jobs carry the token and ReleaseClaim gives them back; the
// starts it reserved stay taken.
func TestRatePartitionLostStampReply(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 2, Per: time.Hour, Burst: 2, By: "customerId"}, ""))
	enqueueFor(t, b, 3, "a")
	s := store.WithLostStampReply(store.Of(b.q), errors.New("connection reset"))
	p := claimAll
	p.Token = "t1"
	_, err := s.ClaimBatch(b.ctx, p, 2)
	require.ErrorContains(t, err, "connection reset")
	n, err := store.Of(b.q).ReleaseClaim(b.ctx, "t1")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	got, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 3)
	require.NoError(t, err)
	require.Empty(t, got, "the burst stays taken")
}

// TestRatePartitionReservationRace: another process reserves a partition
// between this claim's read of it and its reservation, and inserts one
// this claim found missing, taking other jobs of them (of a higher
// priority, enqueued meanwhile), at the same instant (both clocks
// stopped, so that its tats are the very ones this claim computes): the
// compare-and-set and the insert miss, the claim reads back which of its
// writes were applied (by its nonce, not by tat alone) and claims only
// the jobs of those; no partition passes its burst.
func TestRatePartitionReservationRace(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 1, Per: time.Hour, Burst: 2, By: "customerId"}, ""))
	enqueueFor(t, b, 1, "a")
	s := store.Of(b.q)
	got, err := s.ClaimBatch(b.ctx, claimAll, 1) // a's partition exists, one start left
	require.NoError(t, err)
	require.Len(t, got, 1)
	enqueueFor(t, b, 3, "a", "b", "c")
	stopped := b.clock.Now()
	s.SetClock(func() time.Time { return stopped })
	other, err := queue.New(b.db, queue.Config{})
	require.NoError(t, err)
	store.Of(other).SetClock(func() time.Time { return stopped })
	once := true
	store.SetRatePartReserveHook(s, func() {
		if !once {
			return
		}
		once = false
		_, err := b.q.EnqueueMany(b.ctx, []queue.Insert{
			{Kind: "k", Args: bson.M{"customerId": "a", "first": true}, Opts: queue.InsertOpts{Priority: 10}},
			{Kind: "k", Args: bson.M{"customerId": "b", "first": true}, Opts: queue.InsertOpts{Priority: 10}},
			{Kind: "k", Args: bson.M{"customerId": "b", "first": true}, Opts: queue.InsertOpts{Priority: 10}},
		})
		require.NoError(t, err)
		got, err := store.Of(other).ClaimBatch(b.ctx, claimAsW2, 3) // a's last start, b's burst
		require.NoError(t, err)
		require.Equal(t, map[string]int{"a": 1, "b": 2}, byCustomer(got))
		for _, j := range got {
			require.Equal(t, 10, j.Priority)
		}
	})
	got, err = s.ClaimBatch(b.ctx, claimAll, 6)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"c": 2}, byCustomer(got), "a's and b's starts were taken meanwhile")
	store.SetRatePartReserveHook(s, nil)
	running, err := b.db.Collection("jobs").Find(b.ctx, bson.D{{Key: "state", Value: jobs.StateRunning}})
	require.NoError(t, err)
	var all []*jobs.Job
	require.NoError(t, running.All(b.ctx, &all))
	require.Equal(t, map[string]int{"a": 2, "b": 2, "c": 2}, byCustomer(all), "no partition past its burst")
	got, err = s.ClaimBatch(b.ctx, claimAll, 6)
	require.NoError(t, err)
	require.Empty(t, got)
}

// TestRatePartitionSpentSkippedByValue: a process that found a partition
// spent leaves its jobs out of its next claims' filter by value until its
// next start: one read of candidates finds the others, however many jobs
// of the spent one come first in claim order.
func TestRatePartitionSpentSkippedByValue(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 1, Per: time.Hour, By: "customerId"}, ""))
	enqueueFor(t, b, 10, "a")
	enqueueFor(t, b, 1, "b", "c")
	mc, cmds := testdb.Monitored(t)
	q, err := queue.New(mc.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	s := store.Of(q)
	for _, want := range []string{"a", "b", "c"} {
		before := len(cmds())
		j, err := s.Claim(b.ctx, claimAll)
		require.NoError(t, err)
		require.NotNil(t, j)
		require.Equal(t, want, customerOf(j))
		finds := 0
		for _, c := range cmds()[before:] {
			if c == "find jobs" {
				finds++
			}
		}
		require.Equal(t, 1, finds, "one read of candidates: %v", cmds()[before:])
	}
}

// TestRatePartitionBesideAPlainRate: a queue's partitioned rate and a
// kind's plain rate on the same jobs: the claim takes what both allow.
func TestRatePartitionBesideAPlainRate(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 3, Per: time.Hour, Burst: 3}, ""))
	require.NoError(t, b.q.SetRate(b.ctx, queue.QueueLimit("default"), queue.Rate{N: 1, Per: time.Hour, Burst: 2, By: "customerId"}, ""))
	enqueueFor(t, b, 3, "a", "b")
	s := store.Of(b.q)
	got, err := s.ClaimBatch(b.ctx, claimAll, 10)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"a": 2, "b": 1}, byCustomer(got), "the kind's 3, a's burst of 2")
	rls, err := b.q.RateLimits(b.ctx)
	require.NoError(t, err)
	require.Len(t, rls, 2)
	for _, rl := range rls {
		require.Equal(t, int64(3), rl.Starts, rl.Name)
	}
	require.Equal(t, 2, rls[1].Partitions)
	require.Equal(t, 1, rls[1].Spent)
	got, err = s.ClaimBatch(b.ctx, claimAll, 10)
	require.NoError(t, err)
	require.Empty(t, got, "the kind's rate is spent")
}

// TestRatePartitionCountsOfKindsNamedAlike: the partitions counted for
// kind k are k's, not those of a kind whose name is k and a slash on.
func TestRatePartitionCountsOfKindsNamedAlike(t *testing.T) {
	b := setup(t)
	r := queue.Rate{N: 1, Per: time.Hour, By: "customerId"}
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), r, ""))
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k/x"), r, ""))
	enqueueFor(t, b, 1, "a")
	_, err := b.q.EnqueueMany(b.ctx, []queue.Insert{
		{Kind: "k/x", Args: bson.M{"customerId": "a"}}, {Kind: "k/x", Args: bson.M{"customerId": "b"}},
	})
	require.NoError(t, err)
	p := claimAll
	p.Kinds = []string{"k", "k/x"}
	got, err := store.Of(b.q).ClaimBatch(b.ctx, p, 10)
	require.NoError(t, err)
	require.Len(t, got, 3)
	rls, err := b.q.RateLimits(b.ctx)
	require.NoError(t, err)
	require.Len(t, rls, 2)
	require.Equal(t, "kind:k", rls[0].Name)
	require.Equal(t, 1, rls[0].Partitions)
	require.Equal(t, 2, rls[1].Partitions)
}

// TestRatePartGiveBackIsFencedOnItsReservation: a claim that reserved a
// start in a new partition, then stalled while the partition's document was
// cleaned and inserted anew by another claim with the same tat, and then
// found no job to claim, gives back nothing: its give-back is fenced on its
// reservation's nonce, not on tat alone, so it neither deletes nor rewrites
// the other claim's state.
func TestRatePartGiveBackIsFencedOnItsReservation(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 1, Per: time.Hour, By: "customerId"}, ""))
	enqueueFor(t, b, 1, "a")
	s := store.Of(b.q)
	parts := b.db.Collection(store.DefaultRatePartsCollection)
	var once sync.Once
	store.SetRateHooks(s, nil, func() {
		once.Do(func() {
			var d bson.M
			require.NoError(t, parts.FindOneAndDelete(b.ctx, bson.D{}).Decode(&d))
			d["res"], d["starts"] = "another claim", 7
			_, err := parts.InsertOne(b.ctx, d)
			require.NoError(t, err)
			_, err = b.db.Collection("jobs").UpdateMany(b.ctx, bson.M{"kind": "k"}, bson.M{"$set": bson.M{"state": jobs.StateCancelled}})
			require.NoError(t, err)
		})
	})
	got, err := s.ClaimBatch(b.ctx, claimAll, 1)
	require.NoError(t, err)
	require.Empty(t, got)
	var d bson.M
	require.NoError(t, parts.FindOne(b.ctx, bson.D{}).Decode(&d), "the other claim's partition is kept")
	require.Equal(t, "another claim", d["res"])
	require.EqualValues(t, 7, d["starts"])
}
