package dashboard_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/cmd/internal/dashboard"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap/zaptest"
)

// cardCount reads a state's card from the overview's HTML.
func cardCount(t *testing.T, body, state string) string {
	t.Helper()
	m := regexp.MustCompile(`data-state="` + state + `">(\d+)<`).FindStringSubmatch(body)
	require.NotNil(t, m, "no %s card in %s", state, body)
	return m[1]
}

// TestOverviewShowsTheLeadersCounts: the overview shows the counts the
// leader stored (not the collection's, which differ here), with how old
// they are and who counted, and the chart from the stored per-minute
// counts; ?exact=1 counts now; counts far older than their leader's pace
// are flagged stale; a malformed stored document is counted over, and
// said so.
func TestOverviewShowsTheLeadersCounts(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	at := store.Of(b.q).ServerTime(b.ctx).Add(-12 * time.Second).Truncate(time.Millisecond)
	stored := queue.StoredStats{CountedAt: at, By: "w1", Every: 15 * time.Second,
		Queues:   []queue.QueueStats{{Queue: "mail", Counts: map[string]map[jobs.State]int64{"mail": {"available": 42}}}},
		Finished: map[jobs.State]map[time.Time]int64{jobs.StateSucceeded: {at.Truncate(time.Minute): 17}}}
	ok, err := b.q.StoreStats(b.ctx, stored)
	require.NoError(t, err)
	require.True(t, ok)

	code, body := b.get(t, "/")
	require.Equal(t, 200, code, body)
	require.Regexp(t, `id="freshness">Counts as of 1[2-9]s ago, counted by w1, the elected leader, every 15s · <a href="/\?exact=1">count now</a>`, body)
	require.Equal(t, "42", cardCount(t, body, "available"))
	require.Contains(t, body, "17 succeeded, 0 dead in the hour")
	require.NotContains(t, body, "stale")

	code, body = b.get(t, "/?exact=1")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, `id="freshness">Counted now, exactly</p>`)
	require.Equal(t, "3", cardCount(t, body, "available"))
	require.Contains(t, body, "4 succeeded, 1 dead in the hour")

	_, err = b.db.Collection(queue.DefaultStatsCollection).DeleteMany(b.ctx, bson.M{})
	require.NoError(t, err)
	stored.CountedAt = store.Of(b.q).ServerTime(b.ctx).Add(-10 * time.Minute)
	_, err = b.q.StoreStats(b.ctx, stored)
	require.NoError(t, err)
	_, body = b.get(t, "/")
	require.Contains(t, body, "stale: no leader has counted since; is a worker running?")

	_, err = b.db.Collection(queue.DefaultStatsCollection).UpdateOne(b.ctx, bson.M{"_id": "counts"}, bson.M{"$set": bson.M{"countedAt": 12, "queues": "x"}})
	require.NoError(t, err)
	code, body = b.get(t, "/")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, "Counted now, exactly: the stored counts are malformed: countedAt is a 32-bit integer, not a time")
	require.Equal(t, "3", cardCount(t, body, "available"))
}

// TestOverviewWorkIsBounded: over stored counts, the overview sends no
// command to the jobs collection however many jobs it holds.
func TestOverviewWorkIsBounded(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	ctx := context.Background()
	const n = 5000
	docs := make([]any, 0, 1000)
	for i := range n {
		docs = append(docs, bson.M{"_id": fmt.Sprintf("j%05d", i), "kind": "k", "queue": "q", "state": "available", "runAt": time.Now()})
		if len(docs) == cap(docs) {
			_, err := db.Collection(queue.DefaultCollection).InsertMany(ctx, docs)
			require.NoError(t, err)
			docs = docs[:0]
		}
	}
	plain, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	counted, err := plain.CountStats(ctx)
	require.NoError(t, err)
	_, err = plain.StoreStats(ctx, counted)
	require.NoError(t, err)

	client, cmdsOf := testdb.Monitored(t)
	mdb := client.Database(db.Name())
	q, err := queue.New(mdb, queue.Config{})
	require.NoError(t, err)
	srv, err := dashboard.New(mdb, q, dashboard.Config{Addr: "127.0.0.1:0", Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	b := &bundle{ctx: ctx, db: db, q: q, srv: hs}
	code, body := b.get(t, "/")
	require.Equal(t, 200, code, body)
	require.Equal(t, fmt.Sprint(n), cardCount(t, body, "available"))

	cmds := cmdsOf()
	finds := 0
	for _, c := range cmds {
		name, coll, _ := strings.Cut(c, " ")
		require.NotEqual(t, queue.DefaultCollection, coll, "a command on the jobs collection: %v", cmds)
		require.NotEqual(t, "aggregate", name, cmds)
		if c == "find "+queue.DefaultStatsCollection {
			finds++
		}
	}
	require.Equal(t, 1, finds, cmds)
}
