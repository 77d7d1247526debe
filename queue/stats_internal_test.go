package queue

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestGroupedStatsLabelsAsTheScan: on MongoDB, Stats counts by $group,
// whose key holds no field for a queue, kind or state that a job lacks;
// such a job is labelled "(missing)", as the scan that devdb's Stats uses
// labels it, and one of another type by its type.
func TestGroupedStatsLabelsAsTheScan(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	groups := []any{
		bson.D{{Key: "_id", Value: bson.D{{Key: "kind", Value: "k"}, {Key: "state", Value: "available"}}}, {Key: "n", Value: int32(2)}, {Key: "oldest", Value: now.Add(-time.Minute)}},
		bson.D{{Key: "_id", Value: bson.D{{Key: "queue", Value: int32(7)}, {Key: "kind", Value: "k"}}}, {Key: "n", Value: int32(1)}},
		bson.D{{Key: "_id", Value: bson.D{{Key: "queue", Value: "a"}, {Key: "kind", Value: "k"}, {Key: "state", Value: "dead"}}}, {Key: "n", Value: int64(3)}},
	}
	cur, err := mongo.NewCursorFromDocuments(groups, nil, nil)
	require.NoError(t, err)
	stats, err := groupedStats(context.Background(), cur, now)
	require.NoError(t, err)
	by := map[string]QueueStats{}
	for _, s := range stats {
		by[s.Queue] = s
	}
	require.EqualValues(t, 2, by["(missing)"].Counts["k"]["available"])
	require.Equal(t, now.Add(-time.Minute), by["(missing)"].OldestAvailable)
	require.EqualValues(t, 1, by["(32-bit integer)"].Counts["k"]["(missing)"])
	require.EqualValues(t, 3, by["a"].Counts["k"]["dead"])
}
