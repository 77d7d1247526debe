package recovery_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap/zaptest"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }
func (c *fakeClock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func newClock(t time.Time) *fakeClock    { c := &fakeClock{}; c.ns.Store(t.UnixNano()); return c }
func periodicJobs(t *testing.T, q *queue.Client) []jobs.Job {
	t.Helper()
	cur, err := store.Of(q).Collection().Find(context.Background(), bson.D{}, nil)
	require.NoError(t, err)
	var out []jobs.Job
	require.NoError(t, cur.All(context.Background(), &out))
	return out
}

func periodicSetup(t *testing.T, list ...recovery.PeriodicJob) (*mongo.Database, *queue.Client, *recovery.PeriodicEnqueuer, *fakeClock) {
	t.Helper()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	p, err := recovery.NewPeriodicEnqueuer(db, q, list, zaptest.NewLogger(t))
	require.NoError(t, err)
	clock := newClock(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	p.SetNow(clock.now)
	return db, q, p, clock
}

func TestPeriodicEnqueuesEachTickOnceAndTheLatestMissedOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, q, p, clock := periodicSetup(t, recovery.PeriodicJob{Name: "tick", Schedule: "@every 1s", Kind: "noop", Queue: "q1", Priority: 3})
	n, err := p.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "the first pass starts counting")

	start := clock.now()
	clock.add(1500 * time.Millisecond)
	n, err = p.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = p.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a tick is enqueued once")
	got := periodicJobs(t, q)
	require.Len(t, got, 1)
	require.Equal(t, recovery.PeriodicJobID("tick", start.Add(time.Second)), got[0].ID)
	require.Equal(t, "q1", got[0].Queue)
	require.Equal(t, 3, got[0].Priority)
	require.Equal(t, jobs.StateAvailable, got[0].State)

	// Away for 10 s: the latest missed tick is enqueued, once.
	clock.add(10 * time.Second)
	n, err = p.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got = periodicJobs(t, q)
	require.Len(t, got, 2)
	require.Equal(t, recovery.PeriodicJobID("tick", start.Add(11*time.Second)), got[1].ID)
}

// requireOnePeriodicJob runs passes until one enqueues nothing and
// requires that they enqueued, between them, one job: want's.
func requireOnePeriodicJob(t *testing.T, q *queue.Client, p *recovery.PeriodicEnqueuer, before int, want string) {
	t.Helper()
	total := 0
	for pass := 0; ; pass++ {
		n, err := p.RunOnce(context.Background())
		require.NoError(t, err)
		if n == 0 {
			break
		}
		total += n
		require.Less(t, pass, 5, "passes keep enqueuing")
	}
	got := periodicJobs(t, q)
	ids := make([]string, len(got))
	for i, j := range got {
		ids[i] = j.ID
	}
	require.Equal(t, 1, total, "jobs enqueued: %v", ids[before:])
	require.Len(t, got, before+1)
	require.Contains(t, ids, want)
}

// TestPeriodicAfterAMonthAwayEnqueuesTheLatestTickOnce: thirty days
// without an enqueuer for a one-second schedule (2.6 million ticks) end in
// one job, for the latest tick, not a walk that stops short of it.
func TestPeriodicAfterAMonthAwayEnqueuesTheLatestTickOnce(t *testing.T) {
	t.Parallel()
	_, q, p, clock := periodicSetup(t, recovery.PeriodicJob{Name: "tick", Schedule: "@every 1s", Kind: "noop"})
	_, err := p.RunOnce(context.Background())
	require.NoError(t, err)
	start := clock.now()
	clock.add(30*24*time.Hour + 500*time.Millisecond)
	requireOnePeriodicJob(t, q, p, 0, recovery.PeriodicJobID("tick", start.Add(30*24*time.Hour)))
}

// TestPeriodicDailyAfterAYearAway: a daily spec after a year away enqueues
// that day's tick, once.
func TestPeriodicDailyAfterAYearAway(t *testing.T) {
	t.Parallel()
	_, q, p, clock := periodicSetup(t, recovery.PeriodicJob{Name: "daily", Schedule: "0 0 * * *", Kind: "noop"})
	_, err := p.RunOnce(context.Background())
	require.NoError(t, err)
	clock.add(365 * 24 * time.Hour) // 2027-11-23 10:00
	requireOnePeriodicJob(t, q, p, 0, recovery.PeriodicJobID("daily", time.Date(2027, 11, 23, 0, 0, 0, 0, time.UTC)))
}

// TestPeriodicFebruary29: a spec whose latest tick is years ago enqueues
// it once, nothing in the years without one, then the next.
func TestPeriodicFebruary29(t *testing.T) {
	t.Parallel()
	_, q, p, clock := periodicSetup(t, recovery.PeriodicJob{Name: "leap", Schedule: "0 0 29 2 *", Kind: "noop"})
	_, err := p.RunOnce(context.Background())
	require.NoError(t, err)
	clock.set(time.Date(2028, 2, 28, 23, 59, 59, 0, time.UTC))
	n, err := p.RunOnce(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
	clock.set(time.Date(2029, 6, 1, 0, 0, 0, 0, time.UTC)) // away across February 2029
	requireOnePeriodicJob(t, q, p, 0, recovery.PeriodicJobID("leap", time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC)))
	for _, now := range []time.Time{
		time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2031, 12, 31, 0, 0, 0, 0, time.UTC),
	} {
		clock.set(now)
		n, err := p.RunOnce(context.Background())
		require.NoError(t, err)
		require.Zero(t, n, "no February 29 before %s", now)
	}
	clock.set(time.Date(2033, 1, 1, 0, 0, 0, 0, time.UTC))
	requireOnePeriodicJob(t, q, p, 1, recovery.PeriodicJobID("leap", time.Date(2032, 2, 29, 0, 0, 0, 0, time.UTC)))
}

// TestPeriodicManyEnqueuersOneJobPerTick: enqueuers in several processes
// (or a deposed leader that has not noticed yet) racing on every tick
// enqueue each tick once.
func TestPeriodicManyEnqueuersOneJobPerTick(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	spec := recovery.PeriodicJob{Name: "race", Schedule: "* * * * * *", Kind: "noop"}
	db, q, first, clock := periodicSetup(t, spec)
	enqueuers := []*recovery.PeriodicEnqueuer{first}
	for range 3 {
		p, err := recovery.NewPeriodicEnqueuer(db, q, []recovery.PeriodicJob{spec}, zaptest.NewLogger(t))
		require.NoError(t, err)
		p.SetNow(clock.now)
		enqueuers = append(enqueuers, p)
	}
	_, err := first.RunOnce(ctx)
	require.NoError(t, err)
	const ticks = 30
	var total atomic.Int64
	for range ticks {
		clock.add(time.Second)
		var wg sync.WaitGroup
		for _, p := range enqueuers {
			wg.Go(func() {
				n, err := p.RunOnce(ctx)
				require.NoError(t, err)
				total.Add(int64(n))
			})
		}
		wg.Wait()
	}
	got := periodicJobs(t, q)
	require.Len(t, got, ticks, "one job per tick")
	require.EqualValues(t, ticks, total.Load(), "each enqueuer counts only what it inserted")
}

// TestPeriodicResumesATickTakenButNotEnqueued: an enqueuer that died
// between taking a tick and inserting its job leaves pending set; the next
// pass enqueues that tick.
func TestPeriodicResumesATickTakenButNotEnqueued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, q, p, clock := periodicSetup(t, recovery.PeriodicJob{Name: "p", Schedule: "@every 1m", Kind: "noop"})
	tick := clock.now().Add(-30 * time.Second).Truncate(time.Millisecond)
	_, err := db.Collection(recovery.DefaultPeriodicCollection).InsertOne(ctx,
		bson.D{{Key: "_id", Value: "p"}, {Key: "lastTick", Value: tick}, {Key: "pending", Value: tick}})
	require.NoError(t, err)
	n, err := p.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got := periodicJobs(t, q)
	require.Len(t, got, 1)
	require.Equal(t, recovery.PeriodicJobID("p", tick), got[0].ID)
	var st bson.M
	require.NoError(t, db.Collection(recovery.DefaultPeriodicCollection).FindOne(ctx, bson.D{{Key: "_id", Value: "p"}}).Decode(&st))
	require.NotContains(t, st, "pending")
}

// TestPeriodicStateWrittenBadly: a state document another program wrote
// with a lastTick of another type (a string; a regex, which a filter
// given it as it is reads as a pattern, an invalid one failing the write)
// is replaced, and the job ticks from then on.
func TestPeriodicStateWrittenBadly(t *testing.T) {
	t.Parallel()
	for name, lastTick := range map[string]any{"string": "yesterday", "regex": bson.Regex{Pattern: "^y"}, "invalid regex": bson.Regex{Pattern: "a["}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, q, p, clock := periodicSetup(t, recovery.PeriodicJob{Name: "p", Schedule: "@every 1s", Kind: "noop"})
			_, err := db.Collection(recovery.DefaultPeriodicCollection).InsertOne(ctx, bson.D{{Key: "_id", Value: "p"}, {Key: "lastTick", Value: lastTick}})
			require.NoError(t, err)
			_, err = p.RunOnce(ctx)
			require.NoError(t, err, "a bad state document is replaced, not an error forever")
			clock.add(time.Second)
			n, err := p.RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Len(t, periodicJobs(t, q), 1)
		})
	}
}

func TestPeriodicConfigErrorsNameTheJob(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	for _, tc := range []struct {
		list []recovery.PeriodicJob
		want string
	}{
		{[]recovery.PeriodicJob{{Name: "a", Schedule: "every minute", Kind: "k"}}, `periodic job 0 ("a"): schedule "every minute"`},
		{[]recovery.PeriodicJob{{Name: "", Schedule: "@hourly", Kind: "k"}}, "name must be 1 to 100 bytes"},
		{[]recovery.PeriodicJob{{Name: "a", Schedule: "@hourly"}}, `periodic job 0 ("a"): kind must not be empty`},
		{[]recovery.PeriodicJob{{Name: "a", Schedule: "@hourly", Kind: "k"}, {Name: "a", Schedule: "@daily", Kind: "k"}}, `periodic job 1 ("a"): a second job with the same name`},
		{[]recovery.PeriodicJob{{Name: "a", Schedule: "@hourly", Kind: "k", MaxAttempts: -1}}, "maxAttempts"},
	} {
		_, err := recovery.NewPeriodicEnqueuer(db, nil, tc.list, nil)
		require.ErrorContains(t, err, tc.want)
	}
}
