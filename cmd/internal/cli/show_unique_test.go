package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
)

// TestShowNamesAPeriodsUniqueKey: a job inserted unique over a period
// (InsertOpts.UniqueFor, enqueue --unique-for) is held by its period key
// until the period ends, finished or not; show prints the key and when it
// ends, so an operator can tell why an insert was answered with this job.
func TestShowNamesAPeriodsUniqueKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{Logger: zap.NewNop()})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(ctx))
	res, err := q.Enqueue(ctx, "report", bson.M{"day": 1}, queue.InsertOpts{UniqueKey: "report-day-1", UniqueFor: time.Hour})
	require.NoError(t, err)

	out, errs, code := runCtl(t, testdb.URI(), db, "show", res.ID)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "uniquePeriodKey:")
	require.Contains(t, out, "report-day-1")
	require.Contains(t, out, "uniqueUntil:")
	require.False(t, strings.Contains(out, "uniqueKey: "), "the period key is not the unfinished-job key: %s", out)
}
