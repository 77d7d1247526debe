package store_test

import (
	"context"
	"errors"
	"fmt"
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
	"go.mongodb.org/mongo-driver/v2/mongo"
)

type bundle struct {
	ctx context.Context
	db  *mongo.Database
	q   *queue.Client
	// clock is q's clock: a test moves it past a lease or a backoff
	// rather than sleeping (only for what q alone writes and reads).
	clock *store.ShiftedClock
}

func setup(t *testing.T) bundle {
	t.Helper()
	t.Parallel()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond})
	require.NoError(t, err)
	clock := &store.ShiftedClock{}
	store.Of(q).SetClock(clock.Now)
	ctx := context.Background()
	require.NoError(t, q.EnsureIndexes(ctx))
	return bundle{ctx: ctx, db: db, q: q, clock: clock}
}

var claimAll = store.ClaimParams{Owner: "w1", Queues: []string{"default"}, Kinds: []string{"k"}, Lease: time.Minute}

// claimAsW2 is claimAll by another worker.
var claimAsW2 = func() store.ClaimParams { p := claimAll; p.Owner = "w2"; return p }()

// enqueueN enqueues n jobs of kind k and returns their ids in order.
func enqueueN(t *testing.T, b bundle, n int) []string {
	t.Helper()
	ins := make([]queue.Insert, n)
	for i := range ins {
		ins[i] = queue.Insert{Kind: "k", Args: bson.M{"i": i}}
	}
	res, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	ids := make([]string, n)
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

func (b bundle) claim(t *testing.T, p store.ClaimParams) *jobs.Job {
	t.Helper()
	j, err := store.Of(b.q).Claim(b.ctx, p)
	require.NoError(t, err)
	return j
}

func (b bundle) get(t *testing.T, id string) *jobs.Job {
	t.Helper()
	j, err := b.q.Get(b.ctx, id)
	require.NoError(t, err)
	return j
}

func TestEnqueueRejectsInvalidInput(t *testing.T) {
	b := setup(t)
	big := strings.Repeat("x", jobs.MaxArgsBytes)
	for _, tc := range []struct {
		name  string
		in    queue.Insert
		field string
	}{
		{"empty kind", queue.Insert{Args: bson.M{}}, "kind"},
		{"args a string", queue.Insert{Kind: "k", Args: "hello"}, "args"},
		{"args an array", queue.Insert{Kind: "k", Args: []int{1, 2}}, "args"},
		{"args over 1 MB", queue.Insert{Kind: "k", Args: bson.M{"s": big}}, "args"},
		{"negative delay", queue.Insert{Kind: "k", Opts: queue.InsertOpts{Delay: -time.Second}}, "delay"},
		{"negative maxAttempts", queue.Insert{Kind: "k", Opts: queue.InsertOpts{MaxAttempts: -1}}, "maxAttempts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.q.EnqueueMany(b.ctx, []queue.Insert{{Kind: "k"}, tc.in})
			var ve *queue.ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, tc.field, ve.Field)
			require.Equal(t, 1, ve.Index)
			require.Contains(t, err.Error(), tc.field)
		})
	}
	n, err := store.Of(b.q).Collection().CountDocuments(b.ctx, bson.D{})
	require.NoError(t, err)
	require.Zero(t, n, "an invalid job in a batch must write nothing")
}

func TestEnqueueWritesTheDocumentedSchema(t *testing.T) {
	b := setup(t)
	before := time.Now().Add(-time.Second)
	res, err := b.q.Enqueue(b.ctx, "k", bson.M{"n": 1}, queue.InsertOpts{})
	require.NoError(t, err)
	var doc bson.M
	require.NoError(t, store.Of(b.q).Collection().FindOne(b.ctx, bson.M{"_id": res.ID}).Decode(&doc))
	require.Equal(t, "k", doc["kind"])
	require.Equal(t, "default", doc["queue"])
	require.Equal(t, "available", doc["state"])
	require.EqualValues(t, 0, doc["priority"])
	require.EqualValues(t, 0, doc["attempt"])
	require.EqualValues(t, 25, doc["maxAttempts"])
	require.Equal(t, bson.D{{Key: "n", Value: int32(1)}}, doc["args"])
	require.Equal(t, bson.A{}, doc["errors"])
	for _, f := range []string{"runAt", "createdAt", "updatedAt"} {
		ts, ok := doc[f].(bson.DateTime)
		require.True(t, ok, "%s is a date", f)
		require.True(t, ts.Time().After(before), "%s is now", f)
	}
	for _, f := range []string{"owner", "leaseToken", "leaseExpiresAt", "uniqueKey", "finishedAt"} {
		require.NotContains(t, doc, f)
	}
	// ids are UUIDv7 strings: they sort by creation time.
	res2, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	require.Len(t, res.ID, 36)
	require.Equal(t, byte('7'), res.ID[14])
	require.Less(t, res.ID, res2.ID)
}

func TestUniqueKeyReturnsTheHolderUntilItFinishes(t *testing.T) {
	b := setup(t)
	opts := queue.InsertOpts{UniqueKey: "sync:u1"}
	first, err := b.q.Enqueue(b.ctx, "k", nil, opts)
	require.NoError(t, err)
	require.False(t, first.Duplicate)

	again, err := b.q.EnqueueMany(b.ctx, []queue.Insert{{Kind: "k", Opts: opts}, {Kind: "k", Opts: opts}, {Kind: "k"}})
	require.NoError(t, err)
	require.Equal(t, first.ID, again[0].ID)
	require.True(t, again[0].Duplicate)
	require.Equal(t, first.ID, again[1].ID)
	require.False(t, again[2].Duplicate)

	// Running still holds the key.
	j := b.claim(t, claimAll)
	require.Equal(t, first.ID, j.ID)
	dup, err := b.q.Enqueue(b.ctx, "k", nil, opts)
	require.NoError(t, err)
	require.Equal(t, first.ID, dup.ID)

	require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(j)))
	done := b.get(t, first.ID)
	require.Empty(t, done.UniqueKey)
	require.Equal(t, "sync:u1", done.FinishedUniqueKey)

	fresh, err := b.q.Enqueue(b.ctx, "k", nil, opts)
	require.NoError(t, err)
	require.False(t, fresh.Duplicate)
	require.NotEqual(t, first.ID, fresh.ID)

	// A dead job frees its key too.
	j = b.claim(t, claimAll) // the keyless job or the fresh one
	_, err = store.Of(b.q).Fail(b.ctx, store.LeaseOf(j), j, jobs.Permanent(errors.New("bad")))
	require.NoError(t, err)
	j = b.claim(t, claimAll)
	_, err = store.Of(b.q).Fail(b.ctx, store.LeaseOf(j), j, jobs.Permanent(errors.New("bad")))
	require.NoError(t, err)
	again2, err := b.q.Enqueue(b.ctx, "k", nil, opts)
	require.NoError(t, err)
	require.False(t, again2.Duplicate)
}

func TestClaimOrderAndFilters(t *testing.T) {
	b := setup(t)
	now := time.Now()
	ins := []queue.Insert{
		{Kind: "k", Args: bson.M{"name": "old-low"}, Opts: queue.InsertOpts{RunAt: now.Add(-time.Hour)}},
		{Kind: "k", Args: bson.M{"name": "new-high"}, Opts: queue.InsertOpts{Priority: 5, RunAt: now.Add(-time.Minute)}},
		{Kind: "k", Args: bson.M{"name": "old-high"}, Opts: queue.InsertOpts{Priority: 5, RunAt: now.Add(-2 * time.Minute)}},
		{Kind: "k", Args: bson.M{"name": "future"}, Opts: queue.InsertOpts{Priority: 9, Delay: time.Hour}},
		{Kind: "other", Args: bson.M{"name": "other-kind"}, Opts: queue.InsertOpts{Priority: 9}},
		{Kind: "k", Args: bson.M{"name": "other-queue"}, Opts: queue.InsertOpts{Priority: 9, Queue: "q2"}},
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	var got []string
	for {
		j := b.claim(t, claimAll)
		if j == nil {
			break
		}
		require.Equal(t, jobs.StateRunning, j.State)
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, "w1", j.Owner)
		require.NotEmpty(t, j.LeaseToken)
		require.WithinDuration(t, time.Now().Add(time.Minute), *j.LeaseExpiresAt, 5*time.Second)
		got = append(got, j.Args.Lookup("name").StringValue())
	}
	require.Equal(t, []string{"old-high", "new-high", "old-low"}, got)

	p := claimAll
	p.Queues = []string{"q2"}
	j := b.claim(t, p)
	require.NotNil(t, j)
	require.Equal(t, "other-queue", j.Args.Lookup("name").StringValue())
	p.Kinds = []string{"other"}
	p.Queues = []string{"default"}
	j = b.claim(t, p)
	require.NotNil(t, j)
	require.Equal(t, "other-kind", j.Args.Lookup("name").StringValue())
}

func TestClaimsAreFreshLeases(t *testing.T) {
	b := setup(t)
	_, err := b.q.EnqueueMany(b.ctx, []queue.Insert{{Kind: "k"}, {Kind: "k"}})
	require.NoError(t, err)
	a, c := b.claim(t, claimAll), b.claim(t, claimAll)
	require.NotEqual(t, a.ID, c.ID)
	require.NotEqual(t, a.LeaseToken, c.LeaseToken)
}

// TestNoDoubleClaim: 300 jobs, 16 goroutines claiming and completing at
// once; every job must be claimed exactly once. (300, not more: devdb scans
// the collection for every claim, so the cost grows with n squared, and
// without its one-command-at-a-time front 497 of 500 jobs were claimed twice
// at this concurrency: a few hundred show any lapse.)
func TestNoDoubleClaim(t *testing.T) {
	b := setup(t)
	const n = 300
	enqueueN(t, b, n)

	var mu sync.Mutex
	claims := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := claimAll
			p.Owner = fmt.Sprintf("g%d", g)
			for {
				j, err := store.Of(b.q).Claim(b.ctx, p)
				if err != nil {
					errs <- err
					return
				}
				if j == nil {
					return
				}
				mu.Lock()
				claims[j.ID]++
				mu.Unlock()
				if err := store.Of(b.q).Complete(b.ctx, store.LeaseOf(j)); err != nil {
					errs <- fmt.Errorf("complete %s by %s: %w", j.ID, p.Owner, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, claims, n)
	for id, c := range claims {
		require.Equal(t, 1, c, "job %s claimed %d times", id, c)
	}
	left, err := store.Of(b.q).Collection().CountDocuments(b.ctx, bson.M{"state": bson.M{"$ne": "succeeded"}})
	require.NoError(t, err)
	require.Zero(t, left)
}

// takeOver expires the lease of j, reaps it and claims it again as w2,
// as happens when j's worker stalls past its lease.
func (b bundle) takeOver(t *testing.T, j *jobs.Job) *jobs.Job {
	t.Helper()
	_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": j.ID},
		bson.M{"$set": bson.M{"leaseExpiresAt": time.Now().Add(-time.Minute)}})
	require.NoError(t, err)
	res, err := store.Of(b.q).Reap(b.ctx, time.Second, 100)
	require.NoError(t, err)
	require.Equal(t, 1, res.Requeued)
	j2 := b.claim(t, claimAsW2)
	require.NotNil(t, j2)
	require.Equal(t, j.ID, j2.ID)
	require.Equal(t, 2, j2.Attempt)
	return j2
}

func TestLostLeaseCannotWrite(t *testing.T) {
	b := setup(t)
	_, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	old := b.claim(t, claimAll)
	cur := b.takeOver(t, old)
	before := b.get(t, old.ID)
	l := store.LeaseOf(old)

	_, err = heartbeat(b.ctx, store.Of(b.q), l, time.Hour)
	require.ErrorIs(t, err, jobs.ErrLeaseLost)
	require.ErrorIs(t, store.Of(b.q).Complete(b.ctx, l), jobs.ErrLeaseLost)
	_, err = store.Of(b.q).Fail(b.ctx, l, old, errors.New("late"))
	require.ErrorIs(t, err, jobs.ErrLeaseLost)
	require.ErrorIs(t, store.Of(b.q).Release(b.ctx, l), jobs.ErrLeaseLost)
	require.ErrorIs(t, store.Of(b.q).Cancelled(b.ctx, l, old, "late"), jobs.ErrLeaseLost)
	require.Equal(t, before, b.get(t, old.ID), "the old holder changed the job")

	// The new holder still can.
	_, err = heartbeat(b.ctx, store.Of(b.q), store.LeaseOf(cur), time.Hour)
	require.NoError(t, err)
	require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(cur)))
	done := b.get(t, old.ID)
	require.Equal(t, jobs.StateSucceeded, done.State)
	require.Equal(t, "w2", done.Owner)
	require.NotNil(t, done.FinishedAt)
}

func TestFailRetriesWithBackoffThenDead(t *testing.T) {
	b := setup(t)
	db := b.db
	q, err := queue.New(db, queue.Config{RetryBase: time.Hour, RetryMax: 4 * time.Hour})
	require.NoError(t, err)
	res, err := q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{MaxAttempts: 3})
	require.NoError(t, err)

	j := b.claim(t, claimAll)
	f, err := store.Of(q).Fail(b.ctx, store.LeaseOf(j), j, errors.New("boom 1"))
	require.NoError(t, err)
	require.Equal(t, jobs.StateAvailable, f.State)
	require.WithinDuration(t, time.Now().Add(time.Hour), f.RunAt, 16*time.Minute)
	got := b.get(t, res.ID)
	require.Equal(t, jobs.StateAvailable, got.State)
	require.Empty(t, got.LeaseToken)
	require.Nil(t, got.LeaseExpiresAt)
	require.Len(t, got.Errors, 1)
	require.Equal(t, "boom 1", got.Errors[0].Message)
	require.Equal(t, 1, got.Errors[0].Attempt)
	require.Equal(t, "w1", got.Errors[0].Owner)
	require.Nil(t, b.claim(t, claimAll), "a job in backoff is not claimable")

	for attempt := 2; attempt <= 3; attempt++ {
		_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": res.ID}, bson.M{"$set": bson.M{"runAt": time.Now()}})
		require.NoError(t, err)
		j = b.claim(t, claimAll)
		require.Equal(t, attempt, j.Attempt)
		f, err = store.Of(q).Fail(b.ctx, store.LeaseOf(j), j, fmt.Errorf("boom %d", attempt))
		require.NoError(t, err)
	}
	require.Equal(t, jobs.StateDead, f.State)
	got = b.get(t, res.ID)
	require.Equal(t, jobs.StateDead, got.State)
	require.NotNil(t, got.FinishedAt)
	require.Len(t, got.Errors, 3)
	require.Equal(t, "boom 3", got.Errors[2].Message)
}

func TestPermanentErrorIsDeadAtOnce(t *testing.T) {
	b := setup(t)
	res, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	j := b.claim(t, claimAll)
	f, err := store.Of(b.q).Fail(b.ctx, store.LeaseOf(j), j, fmt.Errorf("handler: %w", jobs.InvalidArgs("userA", "must not be empty")))
	require.NoError(t, err)
	require.Equal(t, jobs.StateDead, f.State)
	got := b.get(t, res.ID)
	require.Equal(t, jobs.StateDead, got.State)
	require.Equal(t, 1, got.Attempt)
	require.Contains(t, got.Errors[0].Message, "invalid args: userA: must not be empty")
}

func TestErrorsKeepTheLast20(t *testing.T) {
	b := setup(t)
	res, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{MaxAttempts: 30})
	require.NoError(t, err)
	for i := 1; i <= 23; i++ {
		_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": res.ID}, bson.M{"$set": bson.M{"runAt": time.Now()}})
		require.NoError(t, err)
		j := b.claim(t, claimAll)
		require.NotNil(t, j, "attempt %d", i)
		_, err = store.Of(b.q).Fail(b.ctx, store.LeaseOf(j), j, fmt.Errorf("boom %d", i))
		require.NoError(t, err)
	}
	got := b.get(t, res.ID)
	require.Len(t, got.Errors, jobs.MaxErrors)
	require.Equal(t, "boom 4", got.Errors[0].Message)
	require.Equal(t, "boom 23", got.Errors[19].Message)
}

func TestCancel(t *testing.T) {
	b := setup(t)
	res, err := b.q.EnqueueMany(b.ctx, []queue.Insert{
		{Kind: "k", Opts: queue.InsertOpts{Priority: 1, UniqueKey: "c"}},
		{Kind: "k"},
	})
	require.NoError(t, err)
	running := b.claim(t, claimAll)
	require.Equal(t, res[0].ID, running.ID)

	out, err := b.q.Cancel(b.ctx, res[1].ID)
	require.NoError(t, err)
	require.Equal(t, queue.Cancelled, out)
	got := b.get(t, res[1].ID)
	require.Equal(t, jobs.StateCancelled, got.State)
	require.NotNil(t, got.FinishedAt)
	require.Nil(t, b.claim(t, claimAll), "a cancelled job is not claimable")

	out, err = b.q.Cancel(b.ctx, running.ID)
	require.NoError(t, err)
	require.Equal(t, queue.CancelRequested, out)
	ren, err := heartbeat(b.ctx, store.Of(b.q), store.LeaseOf(running), time.Minute)
	require.NoError(t, err)
	require.True(t, ren.CancelRequested)
	require.NoError(t, store.Of(b.q).Cancelled(b.ctx, store.LeaseOf(running), running, "cancelled while running"))
	got = b.get(t, running.ID)
	require.Equal(t, jobs.StateCancelled, got.State)
	require.Equal(t, "c", got.FinishedUniqueKey)

	_, err = b.q.Cancel(b.ctx, running.ID)
	require.ErrorIs(t, err, queue.ErrFinished)
	_, err = b.q.Cancel(b.ctx, "no-such-job")
	require.ErrorIs(t, err, queue.ErrNotFound)
}

func TestReleaseGivesTheJobBackAtOnce(t *testing.T) {
	b := setup(t)
	res, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	j := b.claim(t, claimAll)
	require.NoError(t, store.Of(b.q).Release(b.ctx, store.LeaseOf(j)))
	got := b.get(t, res.ID)
	require.Equal(t, jobs.StateAvailable, got.State)
	require.Equal(t, 0, got.Attempt, "a released attempt does not count")
	require.Empty(t, got.LeaseToken)
	j2 := b.claim(t, claimAll)
	require.NotNil(t, j2)
	require.Equal(t, 1, j2.Attempt)
}

func TestReapRequeuesOnlyExpiredLeases(t *testing.T) {
	b := setup(t)
	res, err := b.q.EnqueueMany(b.ctx, []queue.Insert{
		{Kind: "k", Opts: queue.InsertOpts{Priority: 3}},
		{Kind: "k", Opts: queue.InsertOpts{Priority: 2, MaxAttempts: 1}},
		{Kind: "k", Opts: queue.InsertOpts{Priority: 1}},
	})
	require.NoError(t, err)
	expired, lastTry, live := b.claim(t, claimAll), b.claim(t, claimAll), b.claim(t, claimAll)
	_, err = store.Of(b.q).Collection().UpdateMany(b.ctx, bson.M{"_id": bson.M{"$in": bson.A{expired.ID, lastTry.ID}}},
		bson.M{"$set": bson.M{"leaseExpiresAt": time.Now().Add(-10 * time.Second)}})
	require.NoError(t, err)

	// Inside the grace period nothing is reaped.
	r, err := store.Of(b.q).Reap(b.ctx, time.Minute, 100)
	require.NoError(t, err)
	require.Equal(t, store.ReapResult{}, r)

	r, err = store.Of(b.q).Reap(b.ctx, time.Second, 100)
	require.NoError(t, err)
	require.Equal(t, store.ReapResult{Requeued: 1, Dead: 1}, r)
	got := b.get(t, res[0].ID)
	require.Equal(t, jobs.StateAvailable, got.State)
	require.Len(t, got.Errors, 1)
	require.Contains(t, got.Errors[0].Message, "lease expired")
	require.Contains(t, got.Errors[0].Message, "w1")
	require.Equal(t, jobs.StateDead, b.get(t, res[1].ID).State)
	require.Equal(t, jobs.StateRunning, b.get(t, live.ID).State)
	require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(live)))
}

// TestConcurrentReapersReapEachJobOnce: several reapers at once must not
// re-queue a job twice (each would add an error and could race a claim).
func TestConcurrentReapersReapEachJobOnce(t *testing.T) {
	b := setup(t)
	const n = 40
	ins := make([]queue.Insert, n)
	for i := range ins {
		ins[i] = queue.Insert{Kind: "k"}
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	for range n {
		require.NotNil(t, b.claim(t, claimAll))
	}
	_, err = store.Of(b.q).Collection().UpdateMany(b.ctx, bson.M{}, bson.M{"$set": bson.M{"leaseExpiresAt": time.Now().Add(-time.Minute)}})
	require.NoError(t, err)
	var mu sync.Mutex
	total := 0
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := store.Of(b.q).Reap(b.ctx, 0, 100)
			if !assertNoError(t, err) {
				return
			}
			mu.Lock()
			total += r.Requeued
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Equal(t, n, total)
	cur, err := store.Of(b.q).Collection().Find(b.ctx, bson.M{})
	require.NoError(t, err)
	var all []jobs.Job
	require.NoError(t, cur.All(b.ctx, &all))
	for _, j := range all {
		require.Equal(t, jobs.StateAvailable, j.State)
		require.Len(t, j.Errors, 1, "job %s reaped more than once", j.ID)
	}
}

// TestReapSkipsARenewedLease: a reaper that read an expired lease must not
// re-queue it if the holder renewed it in between.
func TestReapSkipsARenewedLease(t *testing.T) {
	b := setup(t)
	_, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	j := b.claim(t, claimAll)
	// The same fence the reaper uses, on a stale expiry: a renewal changed it.
	_, err = heartbeat(b.ctx, store.Of(b.q), store.LeaseOf(j), time.Minute)
	require.NoError(t, err)
	_, err = store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": j.ID}, bson.M{"$set": bson.M{"leaseExpiresAt": time.Now().Add(-time.Minute)}})
	require.NoError(t, err)
	_, err = heartbeat(b.ctx, store.Of(b.q), store.LeaseOf(j), time.Minute)
	require.NoError(t, err)
	r, err := store.Of(b.q).Reap(b.ctx, 0, 100)
	require.NoError(t, err)
	require.Zero(t, r.Requeued)
	require.Equal(t, jobs.StateRunning, b.get(t, j.ID).State)
}

func TestCleanDeletesOnlyOldFinishedJobs(t *testing.T) {
	b := setup(t)
	res, err := b.q.EnqueueMany(b.ctx, []queue.Insert{{Kind: "k"}, {Kind: "k"}, {Kind: "k"}})
	require.NoError(t, err)
	for range 2 {
		j := b.claim(t, claimAll)
		require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(j)))
	}
	_, err = store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": res[0].ID}, bson.M{"$set": bson.M{"finishedAt": time.Now().Add(-48 * time.Hour)}})
	require.NoError(t, err)
	n, err := store.Of(b.q).Clean(b.ctx, jobs.StateSucceeded, 24*time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = b.q.Get(b.ctx, res[0].ID)
	require.ErrorIs(t, err, queue.ErrNotFound)
	require.Equal(t, jobs.StateSucceeded, b.get(t, res[1].ID).State)
	require.Equal(t, jobs.StateAvailable, b.get(t, res[2].ID).State)
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}
