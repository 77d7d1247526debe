package queue_test

import (
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestStatsAndOverview: Stats counts per queue, kind and state and finds
// each queue's longest-waiting runnable job (not one due later); Overview
// adds when the jobs that ended since a time ended, from the same pass on
// devdb. A job another app wrote with a queue of another type is counted
// under the type's name.
func TestStatsAndOverview(t *testing.T) {
	b := setup(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	docs := []any{
		bson.M{"_id": "a1", "kind": "k", "queue": "a", "state": "available", "runAt": now.Add(-time.Minute)},
		bson.M{"_id": "a2", "kind": "k", "queue": "a", "state": "available", "runAt": now.Add(-2 * time.Minute)},
		bson.M{"_id": "a3", "kind": "k", "queue": "a", "state": "available", "runAt": now.Add(-time.Hour).Add(2 * time.Hour)},
		bson.M{"_id": "a4", "kind": "j", "queue": "a", "state": "succeeded", "runAt": now, "finishedAt": now.Add(-10 * time.Minute)},
		bson.M{"_id": "a5", "kind": "j", "queue": "a", "state": "succeeded", "runAt": now, "finishedAt": now.Add(-2 * time.Hour)},
		bson.M{"_id": "b1", "kind": "k", "queue": "b", "state": "dead", "runAt": now, "finishedAt": now.Add(-5 * time.Minute)},
		bson.M{"_id": "b2", "kind": "k", "queue": "b", "state": "available", "runAt": now.Add(time.Hour)},
		bson.M{"_id": "x1", "kind": "k", "queue": 7, "state": "available", "runAt": "soon"},
	}
	_, err := store.Of(b.q).Collection().InsertMany(b.ctx, docs)
	require.NoError(t, err)
	for round := range 2 { // the first round may find out that the server lacks $min
		stats, finished, err := b.q.Overview(b.ctx, now.Add(-time.Hour), jobs.StateSucceeded, jobs.StateDead)
		require.NoError(t, err, "round %d", round)
		plain, err := b.q.Stats(b.ctx)
		require.NoError(t, err)
		for _, got := range [][]queue.QueueStats{stats, plain} {
			by := map[string]queue.QueueStats{}
			for _, s := range got {
				by[s.Queue] = s
			}
			require.Len(t, by, 3)
			require.Equal(t, map[string]map[jobs.State]int64{"k": {"available": 3}, "j": {"succeeded": 2}}, by["a"].Counts)
			require.Equal(t, now.Add(-2*time.Minute), by["a"].OldestAvailable)
			require.Equal(t, map[string]map[jobs.State]int64{"k": {"dead": 1, "available": 1}}, by["b"].Counts)
			require.True(t, by["b"].OldestAvailable.IsZero(), "b's only available job is due later")
			require.Contains(t, by, "(32-bit integer)")
		}
		require.Len(t, finished[jobs.StateSucceeded], 1)
		require.True(t, finished[jobs.StateSucceeded][0].Equal(now.Add(-10*time.Minute)))
		require.Len(t, finished[jobs.StateDead], 1)
	}
}

// TestStatsStatesAreJobStates: Stats's counts are keyed by jobs.State, so
// a caller indexes them with the constants, no conversion.
func TestStatsStatesAreJobStates(t *testing.T) {
	b := setup(t)
	_, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{Queue: "a"})
	require.NoError(t, err)
	stats, err := b.q.Stats(b.ctx)
	require.NoError(t, err)
	require.Len(t, stats, 1)
	require.EqualValues(t, 1, stats[0].Counts["k"][jobs.StateAvailable])
	for _, byState := range stats[0].Counts {
		for st := range byState {
			require.True(t, st.Valid(), "a state docket wrote is one of the five: %q", st)
		}
	}
}
