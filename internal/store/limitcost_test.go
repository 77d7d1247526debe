package store_test

import (
	"strings"
	"testing"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

// claimAllInBatches claims and completes 200 jobs of kind k in batches of
// 50, and returns the commands sent to the jobs and limits collections.
func claimAllInBatches(t *testing.T, limit int) int {
	b := setup(t)
	if limit > 0 {
		require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("k"), limit, ""))
	}
	enqueueN(t, b, 200)
	mc, cmds := testdb.Monitored(t)
	q, err := queue.New(mc.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	claimAndComplete(t, b, store.Of(q), 200, 50)
	n := 0
	for _, c := range cmds() {
		if strings.HasSuffix(c, " jobs") || strings.HasSuffix(c, " limits") {
			n++
		}
	}
	return n
}

// TestLimitNotBindingCostsACommandPerBatch: a limit that does not bind
// (1000, with batches of 50) costs each batch claim one read of the
// limit's running jobs, and its jobs are stamped with one bulkWrite, not a
// write per job: 200 jobs take at most one command per batch more than
// without the limit (plus the read of the limits).
func TestLimitNotBindingCostsACommandPerBatch(t *testing.T) {
	t.Parallel()
	var free, limited int
	t.Run("both", func(t *testing.T) { // returns once its parallel subtests are done
		t.Run("no limit", func(t *testing.T) { free = claimAllInBatches(t, 0) })
		t.Run("limit 1000", func(t *testing.T) { limited = claimAllInBatches(t, 1000) })
	})
	t.Logf("200 jobs in batches of 50: %d commands without a limit, %d under a limit of 1000", free, limited)
	require.LessOrEqual(t, limited, free+4+1)
}

// claimAndComplete claims n jobs with s in batches of k, completing each
// batch together.
func claimAndComplete(t *testing.T, b bundle, s *store.Store, n, k int) {
	t.Helper()
	for done := 0; done < n; {
		got, err := s.ClaimBatch(b.ctx, claimAll, k)
		require.NoError(t, err)
		require.NotEmpty(t, got)
		ls := make([]store.Lease, len(got))
		for i, j := range got {
			ls[i] = store.LeaseOf(j)
		}
		lost, err := s.CompleteMany(b.ctx, ls)
		require.NoError(t, err)
		require.Empty(t, lost)
		done += len(got)
	}
}
