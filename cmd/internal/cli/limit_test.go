package cli

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestLimitCommands: `docketctl limit kind:k 2` limits kind k; bad input
// exits 2; `limit` alone and stats show the slots taken over the limit
// while a job runs; `limit kind:k off` lifts it; a worker's configured
// limits are set at start, recorded as the configuration's.
func TestLimitCommands(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	ctx := context.Background()

	out, errs, code := runCtl(t, uri, db, "limit", "kind:k", "2")
	require.Zero(t, code, errs)
	require.Contains(t, out, "kind:k\tlimit 2")
	for _, bad := range [][]string{{"limit", "k", "2"}, {"limit", "kind:k", "-1"}, {"limit", "kind:k", "two"}, {"limit", "kind:k"}} {
		_, errs, code = runCtl(t, uri, db, bad...)
		require.Equal(t, 2, code, "%v: %s", bad, errs)
	}

	q, got := enqueueAndClaim(t, db, 3)
	require.Len(t, got, 2, "the limit holds")

	out, errs, code = runCtl(t, uri, db, "limit")
	require.Zero(t, code, errs)
	require.Regexp(t, `kind:k\s+2 / 2\s+\S+ by `, out)
	out, errs, code = runCtl(t, uri, db, "stats", "--exact")
	require.Zero(t, code, errs)
	require.Contains(t, out, "limit kind:k: 2 / 2 running, 1 waiting")
	out, errs, code = runCtl(t, uri, db, "stats", "--exact", "--json")
	require.Zero(t, code, errs)
	require.Contains(t, out, `"limits": [`)
	require.Contains(t, out, `"running": 2`)

	out, errs, code = runCtl(t, uri, db, "limit", "kind:k", "off")
	require.Zero(t, code, errs)
	require.Contains(t, out, "kind:k\tunlimited")
	out, _, _ = runCtl(t, uri, db, "limit")
	require.Contains(t, out, "no limit is set")

	require.NoError(t, q.SetLimit(ctx, "kind:k", 1, "config:w1"))
	require.NoError(t, q.SetLimit(ctx, "queue:bulk", 4, "config:w1"))
	ls, err := q.RunLimits(ctx)
	require.NoError(t, err)
	require.Len(t, ls, 2)
	require.Equal(t, "kind:k", ls[0].Name)
	require.Equal(t, 1, ls[0].Limit)
	require.Equal(t, 2, ls[0].Running, "jobs running over a lowered limit count")
	require.Equal(t, "config:w1", ls[0].SetBy)
	require.Equal(t, "queue:bulk", ls[1].Name)
}

// TestLimitPerCommands: `limit kind:k 1 --per c` limits each value of
// args.c, beside no total; `limit` and stats show the partitions running
// full; `limit kind:k off --per c` clears the partition only; a bad field
// exits 2 naming it.
func TestLimitPerCommands(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	ctx := context.Background()

	out, errs, code := runCtl(t, uri, db, "limit", "kind:k", "1", "--per", "c")
	require.Zero(t, code, errs)
	require.Contains(t, out, "kind:k\tlimit 1 per c")
	for _, bad := range [][]string{{"limit", "kind:k", "1", "--per", "$c"}, {"limit", "kind:k", "1", "--per"}, {"limit", "--per", "c"}, {"limit", "kind:k", "x", "--per", "c"}} {
		_, errs, code = runCtl(t, uri, db, bad...)
		require.Equal(t, 2, code, "%v: %s", bad, errs)
	}
	_, errs, _ = runCtl(t, uri, db, "limit", "kind:k", "1", "--per", "a\x1b[2Jb")
	require.NotContains(t, errs, "\x1b")

	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(ctx))
	for _, c := range []any{"a", "a", "b", nil} {
		_, err := q.Enqueue(ctx, "k", map[string]any{"c": c}, queue.InsertOpts{})
		require.NoError(t, err)
	}
	got, err := store.Of(q).ClaimBatch(ctx, store.ClaimParams{Owner: "w", Queues: []string{"default"}, Kinds: []string{"k"}, Lease: time.Minute}, 4)
	require.NoError(t, err)
	require.Len(t, got, 3, "one of each value of c")

	out, errs, code = runCtl(t, uri, db, "limit")
	require.Zero(t, code, errs)
	require.Regexp(t, `kind:k\s+3, 1 per c \(3 of 3 partitions running full\)\s+\S+ by `, out)
	out, errs, code = runCtl(t, uri, db, "stats", "--exact")
	require.Zero(t, code, errs)
	require.Contains(t, out, "limit kind:k: 3 running; 1 per c: 3 of 3 partitions running full, 1 waiting")
	out, errs, code = runCtl(t, uri, db, "stats", "--exact", "--json")
	require.Zero(t, code, errs)
	require.Contains(t, out, `"partitionBy": "c"`)
	require.Contains(t, out, `"partitionsFull": 3`)
	require.NotContains(t, out, `"limit": `, "no total")

	require.NoError(t, q.SetLimit(ctx, "kind:k", 5, "test"))
	out, errs, code = runCtl(t, uri, db, "limit", "kind:k", "off", "--per", "c")
	require.Zero(t, code, errs)
	require.Contains(t, out, "kind:k\tno partition limit")
	out, _, _ = runCtl(t, uri, db, "limit")
	require.Regexp(t, `kind:k\s+3 / 5\s`, out)
}

// enqueueAndClaim enqueues n jobs of kind k and claims as many as the
// limits and rates on k allow, up to n: what the limit and rate tests
// start from.
func enqueueAndClaim(t *testing.T, db *mongo.Database, n int) (*queue.Client, []*jobs.Job) {
	t.Helper()
	ctx := context.Background()
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(ctx))
	for range n {
		_, err := q.Enqueue(ctx, "k", nil, queue.InsertOpts{})
		require.NoError(t, err)
	}
	got, err := store.Of(q).ClaimBatch(ctx, store.ClaimParams{Owner: "w", Queues: []string{"default"}, Kinds: []string{"k"}, Lease: time.Minute}, n)
	require.NoError(t, err)
	return q, got
}
