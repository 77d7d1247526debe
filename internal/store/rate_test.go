package store_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want queue.Rate
		err  string
	}{
		{in: "14/s", want: queue.Rate{N: 14, Per: time.Second}},
		{in: "600/m burst 20", want: queue.Rate{N: 600, Per: time.Minute, Burst: 20}},
		{in: "5/250ms", want: queue.Rate{N: 5, Per: 250 * time.Millisecond}},
		{in: "3/h", want: queue.Rate{N: 3, Per: time.Hour}},
		{in: "14", err: "N/PERIOD"},
		{in: "x/s", err: "not a whole number"},
		{in: "0/s", err: "from 1"},
		{in: "1/1us", err: "milliseconds"},
		{in: "1/s burst", err: "N/PERIOD"},
		{in: "1/s burst -1", err: "burst"},
		{in: "1/fortnight", err: "period"},
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

// enqueueKinds enqueues n jobs of each kind.
func enqueueKinds(t *testing.T, b bundle, n int, kinds ...string) {
	t.Helper()
	var ins []queue.Insert
	for _, k := range kinds {
		for i := range n {
			ins = append(ins, queue.Insert{Kind: k, Args: bson.M{"i": i}})
		}
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
}

// maxInWindow is the most of times (sorted) in any closed window of w.
func maxInWindow(times []time.Time, w time.Duration) int {
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	most, from := 0, 0
	for to := range times {
		for times[to].Sub(times[from]) > w {
			from++
		}
		most = max(most, to-from+1)
	}
	return most
}

// TestRateHeldAcrossProcesses: two clients (as two processes), each with
// two claim loops taking batches of 3, claim jobs of a kind under 5 per
// 500 ms with a burst of 2 for 2.2 s: no window of 500 ms holds more than
// 5 + 2 claims, and the rate is used (no claim loop starves it).
func TestRateHeldAcrossProcesses(t *testing.T) {
	b := setup(t)
	r := queue.Rate{N: 5, Per: 500 * time.Millisecond, Burst: 2}
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), r, "test"))
	enqueueN(t, b, 100)
	var mu sync.Mutex
	var at []time.Time
	begin := time.Now()
	end := begin.Add(2200 * time.Millisecond)
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
						at = append(at, *j.HeartbeatAt)
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
	most := maxInWindow(at, r.Per)
	t.Logf("%d claims in 2.2 s, at most %d in a window of %s", len(at), most, r.Per)
	require.LessOrEqual(t, most, r.N+r.Burst)
	// 2.2 s allow 2 + 22 starts; the first window has at least its burst.
	require.GreaterOrEqual(t, len(at), 15)
	rls, err := b.q.RateLimits(b.ctx)
	require.NoError(t, err)
	require.Len(t, rls, 1)
	// Starts counts reservations: each claim's, less what it gave back. A
	// give-back that found the rate reserved since, or a claim answered
	// too late (given back unstarted), leaves its starts counted, as the
	// rate then runs under; never more than the rate allowed.
	require.GreaterOrEqual(t, rls[0].Starts, int64(len(at)), "starts counts every start claimed")
	allowed := int64(r.Burst) + int64(time.Since(begin)/(r.Per/time.Duration(r.N))) + 1
	require.LessOrEqual(t, rls[0].Starts, allowed, "starts reserved within what the rate allows")
}

// TestRateLeavesOtherKindsClaimable: a kind whose rate is spent is left
// out of claims until its next start, and the other kinds of the same
// claim are taken meanwhile (no head-of-line blocking).
func TestRateLeavesOtherKindsClaimable(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("slow"), queue.Rate{N: 1, Per: time.Hour}, ""))
	enqueueKinds(t, b, 5, "slow", "fast")
	s := store.Of(b.q)
	p := claimAll
	p.Kinds = []string{"slow", "fast"}
	got, err := s.ClaimBatch(b.ctx, p, 10)
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, j := range got {
		kinds[j.Kind]++
	}
	require.Equal(t, map[string]int{"slow": 1, "fast": 5}, kinds)
	got, err = s.ClaimBatch(b.ctx, p, 10)
	require.NoError(t, err)
	require.Empty(t, got)
	next := store.Of(b.q).NextRateStart()
	require.WithinDuration(t, time.Now().Add(time.Hour), next, 5*time.Second)
	// Single claims too.
	j, err := s.Claim(b.ctx, p)
	require.NoError(t, err)
	require.Nil(t, j)
}

// TestRateCostsNothingUnset: with no rate set, a claim sends no command it
// did not send before (the rates come with the limits read).
func TestRateCostsNothingUnset(t *testing.T) {
	b := setup(t)
	enqueueN(t, b, 20)
	mc, cmds := testdb.Monitored(t)
	q, err := queue.New(mc.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	s := store.Of(q)
	for range 20 {
		j, err := s.Claim(b.ctx, claimAll)
		require.NoError(t, err)
		require.NotNil(t, j)
	}
	n := 0
	for _, c := range cmds() {
		if strings.HasSuffix(c, " limits") {
			n++
		}
	}
	require.LessOrEqual(t, n, 2, "the limits (and rates) are read once per LimitRefresh: %v", cmds())
}

// TestRateMalformedDocument: a rate document another app wrote badly
// limits nothing, is reported, and does not stop claims.
func TestRateMalformedDocument(t *testing.T) {
	b := setup(t)
	core, logs := observer.New(zap.WarnLevel)
	q, err := queue.New(b.db, queue.Config{Logger: zap.New(core)})
	require.NoError(t, err)
	_, err = b.db.Collection("limits").InsertMany(b.ctx, []any{
		bson.D{{Key: "_id", Value: "rate:kind:k"}, {Key: "rate", Value: "lots"}, {Key: "periodMs", Value: 1000}, {Key: "burst", Value: 1}},
		bson.D{{Key: "_id", Value: "rate:kind:other"}, {Key: "rate", Value: 2}, {Key: "periodMs", Value: 1000}, {Key: "burst", Value: 1}, {Key: "tat", Value: "yesterday"}},
	})
	require.NoError(t, err)
	enqueueN(t, b, 3)
	enqueueKinds(t, b, 3, "other")
	s := store.Of(q)
	p := claimAll
	p.Kinds = []string{"k", "other"}
	got, err := s.ClaimBatch(b.ctx, p, 10)
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, j := range got {
		kinds[j.Kind]++
	}
	// k's rate limits nothing; other's malformed tat is taken as none.
	require.Equal(t, map[string]int{"k": 3, "other": 1}, kinds)
	require.Equal(t, 1, logs.FilterMessageSnippet("rate limit's document is malformed").Len())
	rls, err := q.RateLimits(b.ctx)
	require.NoError(t, err)
	require.Len(t, rls, 2)
	require.Contains(t, rls[0].Malformed, "rate is string")
	lims, err := q.RunLimits(b.ctx)
	require.NoError(t, err)
	require.Empty(t, lims, "rates are not listed as malformed concurrency limits")
}

// TestRateLostReservationReply: a reservation applied whose reply is lost
// fails the claim and counts as taken: the rate runs under, never over.
func TestRateLostReservationReply(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 2, Per: time.Hour, Burst: 2}, ""))
	enqueueN(t, b, 5)
	lost := true
	store.SetRateHooks(store.Of(b.q), func() error {
		if lost {
			lost = false
			return errors.New("connection reset")
		}
		return nil
	}, nil)
	s := store.Of(b.q)
	_, err := s.ClaimBatch(b.ctx, claimAll, 2)
	require.ErrorContains(t, err, "connection reset")
	got, err := s.ClaimBatch(b.ctx, claimAll, 5)
	require.NoError(t, err)
	require.Empty(t, got, "the lost reservation took the burst")
	require.Zero(t, countState(t, b, jobs.StateRunning))
}

// TestRateStalledClaimGivesItsJobsBack: a claim that stalls past
// RateStartLag between its reservation and its claim gives the jobs back,
// attempts not counted, and keeps the reservation used.
func TestRateStalledClaimGivesItsJobsBack(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 3, Per: time.Hour, Burst: 3}, ""))
	enqueueN(t, b, 5)
	store.SetRateHooks(store.Of(b.q), nil, func() { b.clock.Advance(queue.RateStartLag + 100*time.Millisecond) })
	s := store.Of(b.q)
	got, err := s.ClaimBatch(b.ctx, claimAll, 3)
	require.NoError(t, err)
	require.Empty(t, got)
	require.Zero(t, countState(t, b, jobs.StateRunning))
	cur, err := b.db.Collection("jobs").Find(b.ctx, bson.D{{Key: "attempt", Value: bson.D{{Key: "$ne", Value: 0}}}})
	require.NoError(t, err)
	var counted []bson.Raw
	require.NoError(t, cur.All(b.ctx, &counted))
	require.Empty(t, counted, "no attempt counted")
	store.SetRateHooks(store.Of(b.q), nil, nil)
	got, err = s.ClaimBatch(b.ctx, claimAll, 3)
	require.NoError(t, err)
	require.Empty(t, got, "the stalled claim's reservation stays used")
}

// TestRateAndConcurrencyLimitTogether: a kind under both a rate and a
// concurrency limit takes the smaller; unused starts are given back.
func TestRateAndConcurrencyLimitTogether(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 10, Per: time.Hour, Burst: 10}, ""))
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 2, ""))
	require.NoError(t, b.q.SetRate(b.ctx, queue.QueueLimit("default"), queue.Rate{N: 3, Per: time.Hour, Burst: 3}, ""))
	enqueueN(t, b, 10)
	s := store.Of(b.q)
	got, err := s.ClaimBatch(b.ctx, claimAll, 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	rls, err := b.q.RateLimits(b.ctx)
	require.NoError(t, err)
	for _, rl := range rls {
		require.Equal(t, int64(2), rl.Starts, rl.Name)
	}
	for _, j := range got {
		require.NoError(t, s.Complete(b.ctx, store.LeaseOf(j)))
	}
	got, err = s.ClaimBatch(b.ctx, claimAll, 10)
	require.NoError(t, err)
	require.Len(t, got, 1, "the queue's rate has one start left")
	require.NoError(t, b.q.SetRate(context.Background(), queue.QueueLimit("default"), queue.Rate{N: 3, Per: time.Hour, Burst: 3}, ""))
	cleared, err := b.q.ClearRate(b.ctx, queue.QueueLimit("default"))
	require.NoError(t, err)
	require.True(t, cleared)
}

// countState counts the jobs in state s.
func countState(t *testing.T, b bundle, s jobs.State) int64 {
	t.Helper()
	n, err := b.db.Collection("jobs").CountDocuments(b.ctx, bson.D{{Key: "state", Value: s}})
	require.NoError(t, err)
	return n
}

// TestRateReservationFollowsAChangedRate: a reservation is a
// compare-and-set on the rate as read, not only on tat: a process whose
// cached rate another process lowered since (within LimitRefresh, or
// after a stall) reads it again and reserves under the new one.
func TestRateReservationFollowsAChangedRate(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 100, Per: time.Hour, Burst: 100}, ""))
	s := store.Of(b.q)
	got, err := s.ClaimBatch(b.ctx, claimAll, 5) // caches the rate
	require.NoError(t, err)
	require.Empty(t, got)
	other, err := queue.New(b.db, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, other.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 1, Per: time.Hour, Burst: 1}, "operator"))
	enqueueN(t, b, 5)
	got, err = s.ClaimBatch(b.ctx, claimAll, 5)
	require.NoError(t, err)
	require.Len(t, got, 1, "the reservation is made under the rate stored now")
}

// TestRateNonNumericStarts: a rate whose starts another application wrote
// as something other than a number (null, a string) still limits; the
// first reservation restarts the count rather than failing every claim
// with "$inc of a non-numeric value".
func TestRateNonNumericStarts(t *testing.T) {
	b := setup(t)
	_, err := b.db.Collection("limits").InsertMany(b.ctx, []any{
		bson.D{{Key: "_id", Value: "rate:kind:k"}, {Key: "rate", Value: 2}, {Key: "periodMs", Value: 3600000}, {Key: "burst", Value: 2}, {Key: "starts", Value: "many"}},
		bson.D{{Key: "_id", Value: "rate:kind:other"}, {Key: "rate", Value: 1}, {Key: "periodMs", Value: 3600000}, {Key: "burst", Value: 1}, {Key: "starts", Value: nil}},
	})
	require.NoError(t, err)
	enqueueN(t, b, 3)
	enqueueKinds(t, b, 3, "other")
	p := claimAll
	p.Kinds = []string{"k", "other"}
	got, err := store.Of(b.q).ClaimBatch(b.ctx, p, 10)
	require.NoError(t, err)
	require.Len(t, got, 3, "2 of k, 1 of other")
	rls, err := b.q.RateLimits(b.ctx)
	require.NoError(t, err)
	require.Len(t, rls, 2)
	require.Equal(t, int64(2), rls[0].Starts)
	require.Equal(t, int64(1), rls[1].Starts)
}

// TestRatePacesTheClaimsOfOtherKinds: under a rate that is spent, a
// worker wakes at each start the rate allows; the part of its claim that
// no rate applies to, once it found nothing, is claimed again only after
// a wait that grows from RestPollMin to RestPollMax, as an idle worker
// polls, not at every wake (an empty claim each); a job of that part
// enqueued meanwhile is claimed once the wait is over, and a claim whose
// other kinds differ claims them at once.
func TestRatePacesTheClaimsOfOtherKinds(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("slow"), queue.Rate{N: 1, Per: time.Hour}, ""))
	enqueueKinds(t, b, 2, "slow")
	jobCommands := func(paced bool) int {
		t.Helper()
		mc, cmds := testdb.Monitored(t)
		q, err := queue.New(mc.Database(b.db.Name()), queue.Config{})
		require.NoError(t, err)
		s := store.Of(q)
		p := claimAll
		p.Kinds = []string{"slow", "fast"}
		if paced {
			p.RestPollMin, p.RestPollMax = time.Minute, time.Minute
		}
		for range 10 {
			_, err := s.ClaimBatch(b.ctx, p, 5)
			require.NoError(t, err)
		}
		n := 0
		for _, c := range cmds() {
			if strings.HasSuffix(c, " jobs") {
				n++
			}
		}
		return n
	}
	// The first client takes the rate's one start; each of its ten claims
	// claims "fast" too, finding nothing.
	require.GreaterOrEqual(t, jobCommands(false), 10, "unpaced: the other kinds at every claim")
	// Paced: the first claim finds no "fast" job, and the next nine within
	// the minute send nothing on the jobs (the rate is spent, as read).
	require.LessOrEqual(t, jobCommands(true), 2, "paced: the other kinds once")

	// A job of the other kind is claimed once the wait is over.
	q, err := queue.New(b.db, queue.Config{})
	require.NoError(t, err)
	s := store.Of(q)
	p := claimAll
	p.Kinds = []string{"slow", "fast"}
	p.RestPollMin, p.RestPollMax = 100*time.Millisecond, 200*time.Millisecond
	got, err := s.ClaimBatch(b.ctx, p, 5)
	require.NoError(t, err)
	require.Empty(t, got)
	enqueueKinds(t, b, 1, "fast")
	got, err = s.ClaimBatch(b.ctx, p, 5)
	require.NoError(t, err)
	require.Empty(t, got, "within the wait: not claimed yet")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := s.ClaimBatch(b.ctx, p, 5)
		require.NoError(c, err)
		require.Len(c, got, 1)
		assert.Equal(c, "fast", got[0].Kind)
	}, 10*time.Second, 10*time.Millisecond)

	// A claim whose other kinds are not those that found nothing (a kind
	// back under its process limit) claims them at once.
	p.RestPollMin, p.RestPollMax = time.Minute, time.Minute
	got, err = s.ClaimBatch(b.ctx, p, 5)
	require.NoError(t, err)
	require.Empty(t, got, "fast, found empty: paced for a minute")
	enqueueKinds(t, b, 1, "other")
	p.Kinds = []string{"slow", "fast", "other"}
	got, err = s.ClaimBatch(b.ctx, p, 5)
	require.NoError(t, err)
	require.Len(t, got, 1, "another set of kinds is claimed at once")
	require.Equal(t, "other", got[0].Kind)
}

// TestRateLoserYields: a client whose reservation found the rate taken by
// another process since it read it counts the loss, and then waits for a
// start past the rate's next, by up to one interval per loss in a row and
// never more than (burst-1) intervals; a reservation it wins resets the
// count. The winner's next start is the rate's own.
func TestRateLoserYields(t *testing.T) {
	b := setup(t)
	name := queue.KindLimit("k")
	r := queue.Rate{N: 1, Per: time.Minute, Burst: 3}
	require.NoError(t, b.q.SetRate(b.ctx, name, r, ""))
	enqueueN(t, b, 10)
	open := func() (*queue.Client, *store.Store) {
		q, err := queue.New(b.db, queue.Config{})
		require.NoError(t, err)
		return q, store.Of(q)
	}
	q1, s1 := open()
	q2, s2 := open()
	claim := func(s *store.Store, owner string, k int) int {
		p := claimAll
		p.Owner = owner
		got, err := s.ClaimBatch(b.ctx, p, k)
		require.NoError(t, err)
		return len(got)
	}
	require.Equal(t, 1, claim(s2, "w2", 1), "w2 reads the rate and takes a start")
	require.Equal(t, 2, claim(s1, "w1", 2), "w1 takes the rest of the burst")
	require.Zero(t, store.RateLosses(s1, name))
	require.Zero(t, claim(s2, "w2", 1), "w2's view is stale: its reservation is refused, then it reads the rate spent")
	require.Equal(t, 1, store.RateLosses(s2, name))
	rls, err := q1.RateLimits(b.ctx)
	require.NoError(t, err)
	require.Len(t, rls, 1)
	next := rls[0].NextStart
	require.Zero(t, claim(s1, "w1", 1))
	require.Equal(t, next, store.Of(q1).NextRateStart(), "the winner waits for the rate's next start")
	w2Next := store.Of(q2).NextRateStart()
	require.True(t, w2Next.After(next), "the loser waits longer: %s, the rate's next start %s", w2Next, next)
	require.True(t, w2Next.Before(next.Add(r.Per)), "by less than one interval after one loss: %s", w2Next.Sub(next))

	// Up to one interval per loss in a row, at most burst-1 of them; none
	// for a burst of 1 or before a loss.
	sr := store.Rate(r)
	var longest time.Duration
	for range 200 {
		y := store.RateYield(s2, name, sr, 5)
		require.GreaterOrEqual(t, y, time.Duration(0))
		require.Less(t, y, 2*r.Per, "at most burst-1 intervals")
		longest = max(longest, y)
	}
	require.Greater(t, longest, r.Per, "more than one interval after losses in a row")
	require.Zero(t, store.RateYield(s2, name, sr, 0))
	require.Zero(t, store.RateYield(s2, name, store.Rate{N: 1, Per: time.Minute, Burst: 1}, 4))

	// A reservation w2 wins resets its count.
	_, err = q2.ClearRate(b.ctx, name)
	require.NoError(t, err)
	require.NoError(t, q2.SetRate(b.ctx, name, queue.Rate{N: 100, Per: time.Second, Burst: 3}, ""))
	require.Eventually(t, func() bool { return claim(s2, "w2", 1) == 1 }, 10*time.Second, 20*time.Millisecond)
	require.Zero(t, store.RateLosses(s2, name))
}

// TestRateLongPeriodLimits: a period past 24.8 days (an int32 of
// milliseconds) is stored and read as any other, and limits: 1/720h lets
// one of six jobs start, where every reader once took it as malformed
// and let all six run.
func TestRateLongPeriodLimits(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("k"), queue.Rate{N: 1, Per: 720 * time.Hour}, ""))
	enqueueN(t, b, 6)
	started := 0
	for range 6 {
		got, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 1)
		require.NoError(t, err)
		started += len(got)
	}
	require.Equal(t, 1, started)
	rls, err := b.q.RateLimits(b.ctx)
	require.NoError(t, err)
	require.Len(t, rls, 1)
	require.Empty(t, rls[0].Malformed)
	require.Equal(t, 720*time.Hour, rls[0].Rate.Per)
	require.Equal(t, 1, rls[0].Used)
}

// TestRateRaisedAppliesAtOnce: after 1/h → 2/s, plain or partitioned,
// the next start comes within the new rate's interval, not when the old
// rate's state (tat, in its own units) would have allowed it, an hour
// later; lowered back, the start just taken counts in the new units.
func TestRateRaisedAppliesAtOnce(t *testing.T) {
	for _, by := range []string{"", "c"} {
		t.Run("by="+by, func(t *testing.T) {
			b := setup(t)
			s := store.Of(b.q)
			name := queue.KindLimit("k")
			ins := make([]queue.Insert, 6)
			for i := range ins {
				ins[i] = queue.Insert{Kind: "k", Args: bson.M{"c": 1}}
			}
			_, err := b.q.EnqueueMany(b.ctx, ins)
			require.NoError(t, err)
			claim := func() int {
				got, err := s.ClaimBatch(b.ctx, claimAll, 1)
				require.NoError(t, err)
				return len(got)
			}
			require.NoError(t, b.q.SetRate(b.ctx, name, queue.Rate{N: 1, Per: time.Hour, By: by}, ""))
			require.Equal(t, 1, claim())
			require.Equal(t, 0, claim())
			require.NoError(t, b.q.SetRate(b.ctx, name, queue.Rate{N: 2, Per: time.Second, By: by}, ""))
			time.Sleep(600 * time.Millisecond)
			require.Equal(t, 1, claim(), "raised: the next start within 500ms")
			require.NoError(t, b.q.SetRate(b.ctx, name, queue.Rate{N: 1, Per: time.Hour, By: by}, ""))
			b.clock.Advance(20 * time.Minute)
			require.Equal(t, 0, claim(), "lowered: the start just taken is a whole interval of the new rate")
		})
	}
}
