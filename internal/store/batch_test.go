package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestClaimBatchTakesTheBestInClaimOrder(t *testing.T) {
	b := setup(t)
	low, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	high, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{Priority: 5})
	require.NoError(t, err)
	_, err = b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{Delay: time.Hour})
	require.NoError(t, err)
	_, err = b.q.Enqueue(b.ctx, "other", nil, queue.InsertOpts{})
	require.NoError(t, err)

	got, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, high.ID, got[0].ID)
	require.Equal(t, low.ID, got[1].ID)
	for _, j := range got {
		// The returned job is the stored one.
		stored := b.get(t, j.ID)
		require.Equal(t, jobs.StateRunning, stored.State)
		require.Equal(t, 1, stored.Attempt)
		require.Equal(t, stored.Attempt, j.Attempt)
		require.Equal(t, "w1", stored.Owner)
		require.Equal(t, stored.LeaseToken, j.LeaseToken)
		require.True(t, stored.LeaseExpiresAt.Equal(*j.LeaseExpiresAt))
	}
	none, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 10)
	require.NoError(t, err)
	require.Empty(t, none)
}

func TestClaimBatchLeasesAreFencedPerJob(t *testing.T) {
	b := setup(t)
	_, err := b.q.EnqueueMany(b.ctx, []queue.Insert{{Kind: "k"}, {Kind: "k"}, {Kind: "k"}})
	require.NoError(t, err)
	got, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 3)
	require.NoError(t, err)
	require.Len(t, got, 3)

	// Another worker takes the second job over; the batch's lease on it is
	// lost, and on the others it holds.
	j2 := b.takeOver(t, got[1])
	require.NotEqual(t, got[1].LeaseToken, j2.LeaseToken)
	require.ErrorIs(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(got[1])), jobs.ErrLeaseLost)

	lost, err := store.Of(b.q).CompleteMany(b.ctx, []store.Lease{store.LeaseOf(got[0]), store.LeaseOf(got[1]), store.LeaseOf(got[2])})
	require.NoError(t, err)
	require.Equal(t, []store.Lease{store.LeaseOf(got[1])}, lost)
	require.Equal(t, jobs.StateSucceeded, b.get(t, got[0].ID).State)
	require.Equal(t, jobs.StateSucceeded, b.get(t, got[2].ID).State)
	require.Equal(t, jobs.StateRunning, b.get(t, got[1].ID).State, "the new holder's job is untouched")
	require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(j2)))
}

// A batched completion whose updateMany used up the caller's time (here:
// the caller's context ends right after it) still reads which fences
// matched, with a deadline of its own; a read that fails says the outcome
// is unknown, not that the leases were lost.
func TestCompleteManyReadsBackWithTimeOfItsOwn(t *testing.T) {
	b := setup(t)
	_, err := b.q.EnqueueMany(b.ctx, []queue.Insert{{Kind: "k"}, {Kind: "k"}, {Kind: "k"}, {Kind: "k"}})
	require.NoError(t, err)
	got, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 4)
	require.NoError(t, err)
	require.Len(t, got, 4)
	b.takeOver(t, got[1])
	b.takeOver(t, got[3])

	ctx, cancel := context.WithCancel(b.ctx)
	q := store.WithCompleteReadBackHook(store.Of(b.q), cancel)
	lost, err := store.Of(q).CompleteMany(ctx, []store.Lease{store.LeaseOf(got[0]), store.LeaseOf(got[1])})
	require.NoError(t, err)
	require.Equal(t, []store.Lease{store.LeaseOf(got[1])}, lost)
	require.Equal(t, jobs.StateSucceeded, b.get(t, got[0].ID).State)

	q = store.WithReadBackTimeout(store.Of(b.q), 0)
	_, err = store.Of(q).CompleteMany(b.ctx, []store.Lease{store.LeaseOf(got[2]), store.LeaseOf(got[3])})
	require.ErrorIs(t, err, queue.ErrOutcomeUnknown)
	require.NotErrorIs(t, err, jobs.ErrLeaseLost)
	require.Equal(t, jobs.StateSucceeded, b.get(t, got[2].ID).State)
}

func TestClaimBatchJobsAreReleasedAndReapedLikeSingleClaims(t *testing.T) {
	b := setup(t)
	_, err := b.q.EnqueueMany(b.ctx, []queue.Insert{{Kind: "k"}, {Kind: "k"}})
	require.NoError(t, err)
	got, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 2)
	require.NoError(t, err)
	require.Len(t, got, 2)

	require.NoError(t, store.Of(b.q).Release(b.ctx, store.LeaseOf(got[0])))
	released := b.get(t, got[0].ID)
	require.Equal(t, jobs.StateAvailable, released.State)
	require.Zero(t, released.Attempt)

	_, err = store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": got[1].ID},
		bson.M{"$set": bson.M{"leaseExpiresAt": time.Now().Add(-time.Minute)}})
	require.NoError(t, err)
	res, err := store.Of(b.q).Reap(b.ctx, time.Second, 100)
	require.NoError(t, err)
	require.Equal(t, 1, res.Requeued)
	require.Equal(t, jobs.StateAvailable, b.get(t, got[1].ID).State)

	again, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 5)
	require.NoError(t, err)
	require.Len(t, again, 2)
}

func TestClaimBatchReadsBackAfterALostRace(t *testing.T) {
	b := setup(t)
	_, err := b.q.EnqueueMany(b.ctx, []queue.Insert{{Kind: "k"}, {Kind: "k"}, {Kind: "k"}})
	require.NoError(t, err)
	// A job changed after it was read but still available (claimed and
	// released) must not be taken as read: bump its updatedAt the way a
	// release does, between the candidates' read and the claim, by making
	// the stored document differ from any read.
	first := b.claim(t, claimAll)
	require.NoError(t, store.Of(b.q).Release(b.ctx, store.LeaseOf(first)))
	got, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 3)
	require.NoError(t, err)
	require.Len(t, got, 3)
	for _, j := range got {
		stored := b.get(t, j.ID)
		require.Equal(t, stored.Attempt, j.Attempt)
		require.Equal(t, stored.LeaseToken, j.LeaseToken)
	}
}

func TestBatchedCompletionReportsEachOutcome(t *testing.T) {
	b := setup(t)
	_, err := b.q.EnqueueMany(b.ctx, []queue.Insert{{Kind: "k"}, {Kind: "k"}, {Kind: "k"}, {Kind: "k"}})
	require.NoError(t, err)
	got, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 4)
	require.NoError(t, err)
	require.Len(t, got, 4)
	b.takeOver(t, got[3])

	bq := store.Of(b.q).WithBatchedCompletion(5 * time.Millisecond)
	errs := make([]error, len(got))
	var wg sync.WaitGroup
	for i, j := range got {
		wg.Go(func() { errs[i] = bq.Complete(b.ctx, store.LeaseOf(j)) })
	}
	wg.Wait()
	for i := range 3 {
		require.NoError(t, errs[i])
		require.Equal(t, jobs.StateSucceeded, b.get(t, got[i].ID).State)
	}
	require.ErrorIs(t, errs[3], jobs.ErrLeaseLost)
}

// TestNoDoubleClaimInBatches is TestNoDoubleClaim with batch claims and
// batched completions: 300 jobs, 16 goroutines claiming up to 8 at a
// time; every job must be claimed exactly once.
func TestNoDoubleClaimInBatches(t *testing.T) {
	b := setup(t)
	const n = 300
	enqueueN(t, b, n)

	var mu sync.Mutex
	claims := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			p := claimAll
			p.Owner = fmt.Sprintf("g%d", g)
			for {
				js, err := store.Of(b.q).ClaimBatch(b.ctx, p, 8)
				if err != nil {
					errs <- err
					return
				}
				if len(js) == 0 {
					return
				}
				ls := make([]store.Lease, len(js))
				mu.Lock()
				for i, j := range js {
					claims[j.ID]++
					ls[i] = store.LeaseOf(j)
				}
				mu.Unlock()
				lost, err := store.Of(b.q).CompleteMany(b.ctx, ls)
				if err == nil && len(lost) > 0 {
					err = fmt.Errorf("%d leases lost", len(lost))
				}
				if err != nil {
					errs <- fmt.Errorf("complete by %s: %w", p.Owner, err)
					return
				}
			}
		})
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

func TestClaimBatchBuriesMalformedJobsAndGoesOn(t *testing.T) {
	b := setup(t)
	res, err := b.q.EnqueueMany(b.ctx, []queue.Insert{{Kind: "k"}, {Kind: "k"}})
	require.NoError(t, err)
	now := time.Now()
	for _, doc := range []bson.M{
		{"_id": "bad-attempt", "kind": "k", "queue": "default", "state": "available", "runAt": now.Add(-time.Hour), "attempt": "one", "args": bson.M{}},
		{"_id": "bad-args", "kind": "k", "queue": "default", "state": "available", "runAt": now.Add(-time.Hour), "args": "a string"},
	} {
		_, err := store.Of(b.q).Collection().InsertOne(b.ctx, doc)
		require.NoError(t, err)
	}
	got := map[string]bool{}
	for range 6 {
		js, err := store.Of(b.q).ClaimBatch(b.ctx, claimAll, 4)
		require.NoError(t, err)
		for _, j := range js {
			got[j.ID] = true
		}
	}
	require.Equal(t, map[string]bool{res[0].ID: true, res[1].ID: true}, got)
	for _, id := range []string{"bad-attempt", "bad-args"} {
		var doc bson.M
		require.NoError(t, store.Of(b.q).Collection().FindOne(b.ctx, bson.M{"_id": id}).Decode(&doc))
		require.Equal(t, "dead", doc["state"], id)
	}
}

// raceOnce returns a client whose next batch claim, between reading its
// candidates and stamping them, lets other run first (once), and counts
// the candidate reads of its claims in reads.
func raceOnce(b bundle, other func()) (c *store.Store, reads *int) {
	var once sync.Once
	reads = new(int)
	return store.WithRaceBeforeStamp(store.Of(b.q), func() { *reads++; once.Do(other) }), reads
}

func ids(js []*jobs.Job) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}

// requireStored checks that each claimed job is what the collection holds.
func requireStored(t *testing.T, b bundle, got []*jobs.Job) {
	t.Helper()
	for _, j := range got {
		stored := b.get(t, j.ID)
		require.Equal(t, jobs.StateRunning, stored.State)
		require.Equal(t, stored.Attempt, j.Attempt)
		require.Equal(t, stored.LeaseToken, j.LeaseToken)
		require.Equal(t, stored.Owner, j.Owner)
	}
}

func TestClaimBatchTakesTheNextBlockWhenAnotherWorkerStampedTheFirst(t *testing.T) {
	b := setup(t)
	all := enqueueN(t, b, 6)
	var theirs []*jobs.Job
	racer, reads := raceOnce(b, func() {
		var err error
		theirs, err = store.Of(b.q).ClaimBatch(b.ctx, claimAsW2, 3)
		require.NoError(t, err)
	})
	got, err := store.Of(racer).ClaimBatch(b.ctx, claimAll, 3)
	require.NoError(t, err)
	require.Equal(t, 1, *reads, "the claim read the candidates again")
	require.Equal(t, all[:3], ids(theirs))
	require.Equal(t, all[3:], ids(got), "the second block of the candidates read")
	requireStored(t, b, got)
	requireStored(t, b, theirs)
}

func TestClaimBatchReadsBackWhenAnotherWorkerTookPartOfTheBlock(t *testing.T) {
	b := setup(t)
	all := enqueueN(t, b, 6)
	var theirs *jobs.Job
	racer, _ := raceOnce(b, func() { theirs = b.claim(t, claimAsW2) })
	got, err := store.Of(racer).ClaimBatch(b.ctx, claimAll, 3)
	require.NoError(t, err)
	require.Equal(t, all[0], theirs.ID)
	require.Equal(t, all[1:3], ids(got), "what is left of the first block")
	requireStored(t, b, got)
	require.Equal(t, "w2", b.get(t, all[0]).Owner)
}

func TestClaimBatchReadsAgainWhenEveryCandidateWasTaken(t *testing.T) {
	b := setup(t)
	all := enqueueN(t, b, 9)
	racer, reads := raceOnce(b, func() {
		theirs, err := store.Of(b.q).ClaimBatch(b.ctx, claimAsW2, 6)
		require.NoError(t, err)
		require.Len(t, theirs, 6)
	})
	got, err := store.Of(racer).ClaimBatch(b.ctx, claimAll, 3)
	require.NoError(t, err)
	require.Equal(t, 2, *reads, "both blocks were taken: the claim reads again")
	require.Equal(t, all[6:], ids(got))
	requireStored(t, b, got)
}

// TestClaimBatchDoesNotReadAgainWhenItSawEveryJob: a claim whose read came
// back short of its limit saw every runnable job; when others took them
// all before its stamp, it returns empty after that one read (a trickle's
// batch claim racing another worker) rather than reading again for jobs
// enqueued since, which its next claim finds.
func TestClaimBatchDoesNotReadAgainWhenItSawEveryJob(t *testing.T) {
	b := setup(t)
	enqueueN(t, b, 3)
	racer, reads := raceOnce(b, func() {
		theirs, err := store.Of(b.q).ClaimBatch(b.ctx, claimAsW2, 3)
		require.NoError(t, err)
		require.Len(t, theirs, 3)
		enqueueN(t, b, 1)
	})
	got, err := store.Of(racer).ClaimBatch(b.ctx, claimAll, 4)
	require.NoError(t, err)
	require.Empty(t, got)
	require.Equal(t, 1, *reads, "the read saw every job, and all were taken: no second read")
}

func TestClaimBatchDoesNotTakeAJobChangedSinceItWasRead(t *testing.T) {
	b := setup(t)
	all := enqueueN(t, b, 3)
	// Between the read and the stamp, another worker claims the first job
	// and releases it: it is available again, but not as read.
	racer, _ := raceOnce(b, func() {
		j := b.claim(t, claimAsW2)
		require.NoError(t, store.Of(b.q).Release(b.ctx, store.LeaseOf(j)))
	})
	got, err := store.Of(racer).ClaimBatch(b.ctx, claimAll, 3)
	require.NoError(t, err)
	require.Equal(t, all[1:], ids(got))
	requireStored(t, b, got)
	require.Equal(t, jobs.StateAvailable, b.get(t, all[0]).State)
}
