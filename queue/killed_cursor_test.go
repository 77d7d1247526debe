package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// MongoDB kills a cursor (an idle timeout, an operator's killCursors, a
// restart) and answers its next getMore with CursorNotFound (43). These
// tests read more documents than a find's first batch (101) from a devdb
// that answers every getMore so (--faults cursorkill=1): a read cut short
// must come back as an error, never as a shorter answer taken for the
// whole, and a pass it stops must leave its work for the next one.

// manyJobs is more than a find's first batch.
const manyJobs = 150

// killedCursorSetup is setup on a devdb of the test's own that kills every
// cursor at its first getMore.
func killedCursorSetup(t *testing.T) bundle {
	t.Helper()
	db := testdb.CursorKilledDB(t)
	q, err := queue.New(db, queue.Config{RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, q.EnsureIndexes(ctx))
	return bundle{ctx: ctx, db: db, q: q}
}

// TestListCursorKilledIsAnError: a page of jobs longer than a first batch
// whose getMore is refused is an error, not the first batch as the page
// (with "no more" after it).
func TestListCursorKilledIsAnError(t *testing.T) {
	b := killedCursorSetup(t)
	ins := make([]queue.Insert, manyJobs)
	for i := range ins {
		ins[i] = queue.Insert{Kind: "k"}
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)

	got, more, err := b.q.List(b.ctx, queue.JobFilter{}, "", manyJobs)
	testdb.RequireCursorKilled(t, err)
	require.Empty(t, got)
	require.False(t, more)

	stats, err := b.q.Stats(b.ctx)
	testdb.RequireCursorKilled(t, err)
	require.Empty(t, stats)

	// A page that fits the first batch needs no getMore.
	got, more, err = b.q.List(b.ctx, queue.JobFilter{}, "", 50)
	require.NoError(t, err)
	require.Len(t, got, 50)
	require.True(t, more)
}

// TestSettleCursorKilledLeavesTheRestDue: a dead parent with more dependents
// than a first batch, each with a dependent of its own. The worker's settle
// cancels the dependents in one write, then reads them back to carry the
// cancel down; that read is cut. The settle says so (an error), and every
// dependent it cancelled stays due, so the leader's passes, each reading
// fewer than a batch, carry the cancel to every grandchild: none is left
// blocked. (The enqueue's own read of the parents' states is cut too: the
// jobs stay linking, and the leader's pass links them.)
func TestSettleCursorKilledLeavesTheRestDue(t *testing.T) {
	b := killedCursorSetup(t)
	ins := []queue.Insert{{Kind: "k", Opts: queue.InsertOpts{ID: "parent"}}}
	for i := range manyJobs {
		child := fmt.Sprintf("child-%03d", i)
		ins = append(ins,
			queue.Insert{Kind: "k", Opts: queue.InsertOpts{ID: child, After: []string{"parent"}}},
			queue.Insert{Kind: "k", Opts: queue.InsertOpts{ID: "grand-" + child, After: []string{child}}})
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	b.end(t, b.claimID(t, "parent"), jobs.StateDead)

	_, err = b.q.SettleDependentsOf(b.ctx, "parent")
	testdb.RequireCursorKilled(t, err)
	coll := store.Of(b.q).Collection()
	due, err := coll.CountDocuments(b.ctx, bson.D{{Key: "state", Value: jobs.StateCancelled}, {Key: "dependentsDue", Value: bson.D{{Key: "$exists", Value: true}}}})
	require.NoError(t, err)
	require.Positive(t, due, "the cut settle left no cancelled dependent due: its grandchildren would stay blocked")

	for pass := 0; ; pass++ {
		require.Less(t, pass, 10, "the leader's passes did not settle every dependent")
		res, err := b.q.SettleDependents(b.ctx, 0, 100)
		require.NoError(t, err)
		if res.Settled == 0 {
			break
		}
	}
	blocked, err := coll.CountDocuments(b.ctx, bson.D{{Key: "state", Value: jobs.StateBlocked}})
	require.NoError(t, err)
	require.Zero(t, blocked)
	cancelled, err := coll.CountDocuments(b.ctx, bson.D{{Key: "state", Value: jobs.StateCancelled}})
	require.NoError(t, err)
	require.EqualValues(t, 2*manyJobs, cancelled)
}
