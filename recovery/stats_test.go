package recovery_test

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

type termLeader struct {
	term    leadership.Term
	leading bool
}

func (l *termLeader) Leading() (leadership.Term, bool) { return l.term, l.leading }

// TestStatsCounterStoresTheLeadersCounts: the leader counts and stores,
// naming itself and its term; a follower does not; the counter counts
// again only once its interval has passed, or at once in a new term; a
// process that no longer leads stores nothing over the leader's counts
// (the countedAt fence against one that stalled mid-count is
// queue's TestStoredStatsNewerWins).
func TestStatsCounterStoresTheLeadersCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, "k", bson.M{}, queue.InsertOpts{})
	require.NoError(t, err)

	l := &termLeader{term: leadership.Term{Number: 3, Token: "t3"}}
	c, err := recovery.NewStatsCounter(q, l, "w1", recovery.StatsCounterConfig{Interval: time.Hour})
	require.NoError(t, err)
	c.Run()
	_, err = q.StoredStats(ctx)
	require.ErrorIs(t, err, queue.ErrNoStoredStats, "a follower counts nothing")

	l.leading = true
	c.Run()
	first, err := q.StoredStats(ctx)
	require.NoError(t, err)
	require.Equal(t, "w1", first.By)
	require.EqualValues(t, 3, first.Term)
	require.Equal(t, "t3", first.TermToken)
	require.Equal(t, time.Hour, first.Every)
	require.EqualValues(t, 1, first.Queues[0].Counts["k"]["available"])

	time.Sleep(5 * time.Millisecond) // a later count would have a later countedAt
	c.Run()
	again, err := q.StoredStats(ctx)
	require.NoError(t, err)
	require.True(t, again.CountedAt.Equal(first.CountedAt), "not due again within its interval")

	l.term = leadership.Term{Number: 4, Token: "t4"}
	c.Run()
	next, err := q.StoredStats(ctx)
	require.NoError(t, err)
	require.Equal(t, "t4", next.TermToken, "a new term counts at once")

	// A former leader (its term over: it no longer leads) stores nothing.
	stale := &termLeader{term: leadership.Term{Number: 3, Token: "t3"}}
	old, err := recovery.NewStatsCounter(q, stale, "w0", recovery.StatsCounterConfig{})
	require.NoError(t, err)
	stored, err := old.CountOnce(ctx)
	require.NoError(t, err)
	require.False(t, stored)
	got, err := q.StoredStats(ctx)
	require.NoError(t, err)
	require.Equal(t, "t4", got.TermToken)
}
