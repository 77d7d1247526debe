package queue_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// A key held for a period keeps a second job out while its job runs and
// after it finished; the same key without a period is another key.
func TestUniqueForHoldsTheKeyForItsPeriodFinishedOrNot(t *testing.T) {
	b := setup(t)
	opts := queue.InsertOpts{UniqueKey: "report:acme", UniqueFor: time.Hour}
	first, err := b.q.Enqueue(b.ctx, "k", bson.M{"n": 1}, opts)
	require.NoError(t, err)
	require.False(t, first.Duplicate)

	j := b.claim(t, claimAll)
	require.Equal(t, first.ID, j.ID)
	running, err := b.q.Enqueue(b.ctx, "k", bson.M{"n": 1}, opts)
	require.NoError(t, err)
	require.Equal(t, queue.Result{ID: first.ID, Duplicate: true}, running)

	require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(j)))
	done := b.get(t, first.ID)
	require.Equal(t, jobs.StateSucceeded, done.State)
	require.NotEmpty(t, done.UniquePeriodKey, "finishing does not free a period's key")

	again, err := b.q.EnqueueMany(b.ctx, []queue.Insert{
		{Kind: "k", Args: bson.M{"n": 1}, Opts: opts},
		{Kind: "k", Args: bson.M{"n": 2}, Opts: opts},
	})
	require.NoError(t, err)
	require.Equal(t, []queue.Result{{ID: first.ID, Duplicate: true}, {ID: first.ID, Duplicate: true, ArgsDropped: true}}, again)
	n, err := b.db.Collection(b.q.CollectionName()).CountDocuments(b.ctx, bson.M{"kind": "k"})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	plain, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{UniqueKey: "report:acme"})
	require.NoError(t, err)
	require.False(t, plain.Duplicate, "a key without a period is held apart")

	// Into a bounded queue too.
	require.NoError(t, b.q.SetCapacity(b.ctx, "small", 5, "test"))
	bopts := queue.InsertOpts{Queue: "small", UniqueKey: "small:1", UniqueFor: time.Hour}
	bfirst, err := b.q.Enqueue(b.ctx, "k", nil, bopts)
	require.NoError(t, err)
	bdup, err := b.q.Enqueue(b.ctx, "k", nil, bopts)
	require.NoError(t, err)
	require.Equal(t, queue.Result{ID: bfirst.ID, Duplicate: true}, bdup)
}

// Periods are cut on the epoch: the key is the period's start, and the
// job says when its period ends.
func TestUniqueForPeriodsAreAligned(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		return tm
	}
	for _, c := range []struct {
		insertedAt string
		period     time.Duration
		key        string
		until      string
	}{
		{"2026-03-01T10:00:00Z", time.Hour, "k@2026-03-01T10:00:00.000Z", "2026-03-01T11:00:00Z"},
		{"2026-03-01T10:59:59.999Z", time.Hour, "k@2026-03-01T10:00:00.000Z", "2026-03-01T11:00:00Z"},
		{"2026-03-01T11:00:00Z", time.Hour, "k@2026-03-01T11:00:00.000Z", "2026-03-01T12:00:00Z"},
		{"2026-03-01T23:30:00Z", 24 * time.Hour, "k@2026-03-01T00:00:00.000Z", "2026-03-02T00:00:00Z"},
		{"2026-03-01T10:07:30.250Z", 5 * time.Minute, "k@2026-03-01T10:05:00.000Z", "2026-03-01T10:10:00Z"},
	} {
		j, err := queue.NewJob(queue.Insert{Kind: "k", Opts: queue.InsertOpts{UniqueKey: "k", UniqueFor: c.period}}, at(c.insertedAt))
		require.NoError(t, err)
		require.Equal(t, c.key, j.UniquePeriodKey, c.insertedAt)
		require.Empty(t, j.UniqueKey, "a period's key is not held as an unfinished job's")
		require.Equal(t, at(c.until), *j.UniqueUntil, c.insertedAt)
	}
	for _, c := range []struct {
		opts   queue.InsertOpts
		reason string
	}{
		{queue.InsertOpts{UniqueFor: time.Hour}, "needs a uniqueKey"},
		{queue.InsertOpts{UniqueKey: "k", UniqueFor: -time.Hour}, "must not be negative"},
		{queue.InsertOpts{UniqueKey: "k", UniqueFor: time.Microsecond}, "resolution"},
	} {
		_, err := queue.NewJob(queue.Insert{Kind: "k", Opts: c.opts}, time.Now())
		var ve *queue.ValidationError
		require.True(t, errors.As(err, &ve), "%v", err)
		require.Equal(t, "uniqueFor", ve.Field)
		require.Contains(t, ve.Reason, c.reason)
	}
}

// Periods are cut from the Unix epoch, not from year 1: a week starts on a
// Thursday (1970-01-01 was one) and 7h periods on multiples of 7h since
// 1970, before 1970 and near the ends of time.Time's range too.
func TestUniqueForPeriodsAreCutFromTheUnixEpoch(t *testing.T) {
	t.Parallel()
	const week = 7 * 24 * time.Hour
	for _, c := range []struct {
		insertedAt string
		period     time.Duration
		start      string
	}{
		{"2026-03-04T12:00:00Z", week, "2026-02-26T00:00:00.000Z"}, // a Wednesday: the week began the Thursday before
		{"2026-03-05T00:00:00Z", week, "2026-03-05T00:00:00.000Z"},
		{"2026-03-01T10:00:00Z", 7 * time.Hour, "2026-03-01T05:00:00.000Z"},
		{"1969-12-31T20:00:00Z", 7 * time.Hour, "1969-12-31T17:00:00.000Z"},
		{"1960-06-15T00:00:00Z", week, "1960-06-09T00:00:00.000Z"},
		{"0001-01-09T00:00:00Z", week, "0001-01-04T00:00:00.000Z"},
		{"9999-12-31T23:59:59Z", 7 * time.Hour, "9999-12-31T18:00:00.000Z"},
		{"2026-03-01T10:00:00Z", 100 * 52 * week, "1970-01-01T00:00:00.000Z"},
		{"1960-03-01T10:00:00Z", 100 * 52 * week, "1870-05-05T00:00:00.000Z"},
	} {
		in, err := time.Parse(time.RFC3339, c.insertedAt)
		require.NoError(t, err)
		j, err := queue.NewJob(queue.Insert{Kind: "k", Opts: queue.InsertOpts{UniqueKey: "k", UniqueFor: c.period}}, in)
		require.NoError(t, err)
		require.Equal(t, "k@"+c.start, j.UniquePeriodKey, "%s, %s", c.insertedAt, c.period)
		start, err := time.Parse("2006-01-02T15:04:05.000Z", c.start)
		require.NoError(t, err)
		require.Equal(t, start.Add(c.period), *j.UniqueUntil, "%s, %s", c.insertedAt, c.period)
	}
}

// Many enqueues of one key from two clients at once add exactly one job;
// every other is told it is a duplicate of that one, and that its args
// were dropped.
func TestUniqueForIsExactAcrossClients(t *testing.T) {
	b := setup(t)
	other, err := queue.New(b.db, queue.Config{})
	require.NoError(t, err)
	clients := []*queue.Client{b.q, other}
	var wg sync.WaitGroup
	results := make([]queue.Result, 20)
	errs := make([]error, len(results))
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = clients[i%2].Enqueue(b.ctx, "k", bson.M{"i": i},
				queue.InsertOpts{UniqueKey: "race", UniqueFor: 24 * time.Hour})
		}()
	}
	wg.Wait()
	var added []string
	for i, r := range results {
		require.NoError(t, errs[i])
		if !r.Duplicate {
			added = append(added, r.ID)
		}
	}
	require.Len(t, added, 1, "exactly one job added")
	for _, r := range results {
		require.Equal(t, added[0], r.ID)
		require.Equal(t, r.Duplicate, r.ArgsDropped, "each insert's args differ")
	}
	n, err := b.db.Collection(b.q.CollectionName()).CountDocuments(b.ctx, bson.M{})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// A duplicate says whether the args it carried are lost.
func TestDuplicateSaysWhenItsArgsWereDropped(t *testing.T) {
	b := setup(t)
	opts := queue.InsertOpts{UniqueKey: "sync:u1"}
	first, err := b.q.Enqueue(b.ctx, "k", bson.M{"to": "a"}, opts)
	require.NoError(t, err)
	same, err := b.q.Enqueue(b.ctx, "k", bson.M{"to": "a"}, opts)
	require.NoError(t, err)
	require.Equal(t, queue.Result{ID: first.ID, Duplicate: true}, same)
	other, err := b.q.Enqueue(b.ctx, "k", bson.M{"to": "b"}, opts)
	require.NoError(t, err)
	require.Equal(t, queue.Result{ID: first.ID, Duplicate: true, ArgsDropped: true}, other)
}
