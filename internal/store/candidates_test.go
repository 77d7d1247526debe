package store_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// candidateFinds returns a client of b's database whose sorted finds on
// the jobs collection (a claim's read of candidates; a read of run slots
// is not sorted) are counted by the returned function.
func candidateFinds(t *testing.T, b bundle) (*store.Store, func() int) {
	t.Helper()
	s, limits := candidateReadLimits(t, b)
	return s, func() int { return len(limits()) }
}

func jobIDs(js []*jobs.Job) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}

// completeAll completes the jobs claimed in js.
func completeAll(t *testing.T, b bundle, s *store.Store, js []*jobs.Job) {
	t.Helper()
	ls := make([]store.Lease, len(js))
	for i, j := range js {
		ls[i] = store.LeaseOf(j)
	}
	lost, err := s.CompleteMany(b.ctx, ls)
	require.NoError(t, err)
	require.Empty(t, lost)
}

// TestCandidateCacheClaimSendsNoFind: under a limit that binds, the claim
// after the first takes its jobs, the next in claim order, from the
// candidates the first read, and sends no read of candidates.
func TestCandidateCacheClaimSendsNoFind(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 2, ""))
	want := enqueueN(t, b, 30)
	s, finds := candidateFinds(t, b)

	got, err := s.ClaimBatch(b.ctx, claimAll, 2)
	require.NoError(t, err)
	require.Equal(t, want[:2], jobIDs(got))
	require.Equal(t, 1, finds())
	completeAll(t, b, s, got)

	for i := 2; i < 10; i += 2 {
		got, err = s.ClaimBatch(b.ctx, claimAll, 2)
		require.NoError(t, err)
		require.Equal(t, want[i:i+2], jobIDs(got))
		completeAll(t, b, s, got)
	}
	require.Equal(t, 1, finds(), "claims from the cache read no candidates")
	hits, fills := store.CandidateHits(s)
	require.Equal(t, 4, hits)
	require.Equal(t, 1, fills)
}

// TestCandidateCacheSkipsTakenCandidates: candidates kept by one client
// that another client claimed since match nothing when stamped; the claim
// drops them and stamps the next ones kept, still with no read, and no
// job is claimed twice.
func TestCandidateCacheSkipsTakenCandidates(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 3, ""))
	want := enqueueN(t, b, 20)
	s, finds := candidateFinds(t, b)

	got, err := s.ClaimBatch(b.ctx, claimAll, 4)
	require.NoError(t, err)
	require.Equal(t, want[:3], jobIDs(got))
	completeAll(t, b, s, got)

	// Another process takes the next three, which s keeps.
	other, err := queue.New(testdb.Client(t).Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	taken, err := store.Of(other).ClaimBatch(b.ctx, claimAsW2, 4)
	require.NoError(t, err)
	require.Equal(t, want[3:6], jobIDs(taken))
	completeAll(t, b, store.Of(other), taken)

	got, err = s.ClaimBatch(b.ctx, claimAll, 4)
	require.NoError(t, err)
	require.Equal(t, want[7:10], jobIDs(got), "the stale candidates are skipped, the next ones claimed")
	require.Equal(t, 1, finds())
	for _, j := range got {
		require.Equal(t, "w1", j.Owner)
	}
}

// TestCandidateCacheKeepsToTheClaimsFilter: candidates kept for a claim
// of two queues are not stamped for a claim once one of them is paused,
// nor those of a kind whose limit is full: the claim takes the others,
// and the candidates of the paused queue wait in the cache, claimed with
// no read once it is resumed.
func TestCandidateCacheKeepsToTheClaimsFilter(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 1, ""))
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("u"), 100, ""))
	var ins []queue.Insert
	for i := range 12 {
		// In claim order: k in a, u in a, u in b, by priority.
		o := queue.InsertOpts{Queue: "a", Priority: 3}
		kind := "k"
		switch {
		case i >= 8:
			o, kind = queue.InsertOpts{Queue: "b", Priority: 1}, "u"
		case i >= 4:
			o, kind = queue.InsertOpts{Queue: "a", Priority: 2}, "u"
		}
		ins = append(ins, queue.Insert{Kind: kind, Args: bson.M{"i": i}, Opts: o})
	}
	res, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	want := make([]string, len(res))
	for i, r := range res {
		want[i] = r.ID
	}
	s, finds := candidateFinds(t, b)
	store.SetPauseRefresh(s, 0)
	p := store.ClaimParams{Owner: "w1", Queues: []string{"a", "b"}, Kinds: []string{"k", "u"}, Lease: time.Minute}

	got, err := s.ClaimBatch(b.ctx, p, 1)
	require.NoError(t, err)
	require.Equal(t, want[:1], jobIDs(got))
	require.Equal(t, 1, finds())

	// k is full: the claim takes a u of a, not the k kept before it.
	got, err = s.ClaimBatch(b.ctx, p, 1)
	require.NoError(t, err)
	require.Equal(t, want[4:5], jobIDs(got))

	// a paused: the claim takes a u of b, not those of a kept before it.
	_, err = s.Pause(b.ctx, "a", "")
	require.NoError(t, err)
	got, err = s.ClaimBatch(b.ctx, p, 1)
	require.NoError(t, err)
	require.Equal(t, want[8:9], jobIDs(got))
	require.Equal(t, 1, finds())

	// Resumed: those of a were kept, not dropped, and come first.
	_, err = s.Resume(b.ctx, "a", "")
	require.NoError(t, err)
	got, err = s.ClaimBatch(b.ctx, p, 1)
	require.NoError(t, err)
	require.Equal(t, want[5:6], jobIDs(got))
	require.Equal(t, 1, finds())

	n, err := b.db.Collection("jobs").CountDocuments(b.ctx, bson.D{{Key: "state", Value: "running"}, {Key: "kind", Value: "k"}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// TestCandidateCacheAgesOut: a job of a higher priority enqueued after the
// cache was filled waits behind the candidates kept, at most until the
// cache ages out; the claim then reads again and takes it first.
func TestCandidateCacheAgesOut(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 1, ""))
	want := enqueueN(t, b, 10)
	s, finds := candidateFinds(t, b)

	got, err := s.ClaimBatch(b.ctx, claimAll, 1)
	require.NoError(t, err)
	require.Equal(t, want[:1], jobIDs(got))
	completeAll(t, b, s, got)

	urgent, err := b.q.Enqueue(b.ctx, "k", bson.M{"urgent": true}, queue.InsertOpts{Priority: 10})
	require.NoError(t, err)
	got, err = s.ClaimBatch(b.ctx, claimAll, 1)
	require.NoError(t, err)
	require.Equal(t, want[1:2], jobIDs(got), "within the cache's age, claims take what it keeps")
	require.Equal(t, 1, finds())
	completeAll(t, b, s, got)

	store.AgeCandidates(s, time.Minute)
	got, err = s.ClaimBatch(b.ctx, claimAll, 1)
	require.NoError(t, err)
	require.Equal(t, []string{urgent.ID}, jobIDs(got), "aged out, the cache is read again")
	require.Equal(t, 2, finds())
}

// candidateReadLimits returns a client of b's database, and a function
// listing the limits of its sorted finds on the jobs collection (its
// reads of candidates), in the order sent.
func candidateReadLimits(t *testing.T, b bundle) (*store.Store, func() []int64) {
	t.Helper()
	var mu sync.Mutex
	var limits []int64
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if coll, _ := e.Command.Lookup("find").StringValueOK(); coll != "jobs" || e.Command.Lookup("sort").Type == 0 {
			return
		}
		n, _ := e.Command.Lookup("limit").AsInt64OK()
		mu.Lock()
		limits = append(limits, n)
		mu.Unlock()
	}}
	mc, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(mon))
	require.NoError(t, err)
	t.Cleanup(func() { _ = mc.Disconnect(context.Background()) })
	q, err := queue.New(mc.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	return store.Of(q), func() []int64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(limits)
	}
}

// TestCandidateCacheRefillsInTheBackground: after a slow read of
// candidates (a server sorting a big backlog), claims that drain the
// cache to half start the next read in the background, for more
// candidates, and go on taking from the cache while it runs; the
// candidates it read replace the cache's, less those stamped meanwhile,
// so no claim sent a stamp that could only miss.
func TestCandidateCacheRefillsInTheBackground(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 1, ""))
	want := enqueueN(t, b, 41)
	plain, limits := candidateReadLimits(t, b)

	readDone := make(chan struct{})
	release := make(chan struct{})
	s := store.WithRefillHook(plain, func() {
		close(readDone)
		<-release
	})
	claimOne := func() string {
		t.Helper()
		got, err := s.ClaimBatch(b.ctx, claimAll, 1)
		require.NoError(t, err)
		require.Len(t, got, 1)
		completeAll(t, b, s, got)
		return got[0].ID
	}

	var claimed []string
	claimed = append(claimed, claimOne())
	require.Equal(t, []int64{64}, limits(), "a fast read asks for the usual window")
	store.SlowCandidateReads(s, time.Second)

	// 40 kept: the claims take from the cache until it is half drained.
	for len(limits()) == 1 {
		require.Less(t, len(claimed), 41, "no read in the background")
		claimed = append(claimed, claimOne())
	}
	select {
	case <-readDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the read in the background did not end")
	}
	require.Equal(t, []int64{64, 640 / 10 * 8}, limits(), "after a slow read, a read asks for more")

	// While it waits to fill the cache, claims go on from the cache: the
	// read returned the jobs they take.
	during := []string{claimOne(), claimOne(), claimOne()}
	claimed = append(claimed, during...)
	require.Len(t, limits(), 2, "the claims sent no read")
	close(release)
	require.Eventually(t, func() bool { _, fills := store.CandidateHits(s); return fills == 2 },
		10*time.Second, time.Millisecond, "the read fills the cache")
	// However slow the machine, the rest are claimed within its age.
	store.AgeCandidates(s, -time.Minute)

	var rest []any
	for _, id := range want {
		if !slices.Contains(claimed, id) {
			rest = append(rest, id)
		}
	}
	require.Equal(t, rest, store.CandidateIDs(s), "the cache holds what is left, in claim order, none stamped meanwhile")
	for len(claimed) < len(want) {
		claimed = append(claimed, claimOne())
	}
	require.ElementsMatch(t, want, claimed)
	require.Len(t, limits(), 2, "the rest came from the cache")
}

// TestCandidateCacheSpreadClaimsKeepPriority: spread claims (as workers
// make) take kept candidates at random among the first priority, so that
// two processes holding the same candidates seldom race for one; every
// job of the higher priority still starts before any of the lower.
func TestCandidateCacheSpreadClaimsKeepPriority(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), 1, ""))
	low := enqueueN(t, b, 20)
	var high []string
	for i := range 20 {
		j, err := b.q.Enqueue(b.ctx, "k", bson.M{"high": i}, queue.InsertOpts{Priority: 5})
		require.NoError(t, err)
		high = append(high, j.ID)
	}
	s, _ := candidateFinds(t, b)
	p := claimAll
	p.Spread = true

	var got []string
	for range 40 {
		js, err := s.ClaimBatch(b.ctx, p, 1)
		require.NoError(t, err)
		require.Len(t, js, 1)
		completeAll(t, b, s, js)
		got = append(got, js[0].ID)
	}
	require.ElementsMatch(t, high, got[:20], "the higher priority first")
	require.ElementsMatch(t, low, got[20:])
	// A claim's own window is shuffled anyway (stampOrder): picked among
	// all kept, some job starts far from its place in claim order.
	far := 0
	for i, id := range got[:20] {
		far = max(far, abs(i-slices.Index(high, id)))
	}
	require.GreaterOrEqual(t, far, 8, "picked at random among the kept candidates of the first priority")
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// TestCandidateReadIsOneCommand: a read of more candidates than a first
// batch holds by default (101) asks for them all in its first batch, so a
// claim sends no getMore (on MongoDB as on devdb): one command fewer per
// batch claim.
func TestCandidateReadIsOneCommand(t *testing.T) {
	b := setup(t)
	enqueueN(t, b, 300)
	var mu sync.Mutex
	var batchSizes, limits []int64
	getMores := 0
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		mu.Lock()
		defer mu.Unlock()
		if e.CommandName == "getMore" {
			getMores++
		}
		if coll, _ := e.Command.Lookup("find").StringValueOK(); coll == "jobs" && e.Command.Lookup("sort").Type != 0 {
			n, _ := e.Command.Lookup("batchSize").AsInt64OK()
			l, _ := e.Command.Lookup("limit").AsInt64OK()
			batchSizes, limits = append(batchSizes, n), append(limits, l)
		}
	}}
	mc, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(mon))
	require.NoError(t, err)
	t.Cleanup(func() { _ = mc.Disconnect(context.Background()) })
	q, err := queue.New(mc.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)

	got, err := store.Of(q).ClaimBatch(b.ctx, claimAll, 150)
	require.NoError(t, err)
	require.Len(t, got, 150)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, limits)
	require.Greater(t, limits[0], int64(101), "the claim reads more candidates than a default first batch")
	require.Equal(t, limits, batchSizes, "each read asks for its limit in its first batch")
	require.Zero(t, getMores)
}
