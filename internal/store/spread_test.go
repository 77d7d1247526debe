package store_test

import (
	"testing"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

// claimSpread is claimAll with its batch claims spread.
var claimSpread = func() store.ClaimParams { p := claimAll; p.Spread = true; return p }()

// TestSpreadBatchClaimStartsAtAPickedBlock: a spread batch claim reads
// claimSpreadBlocks blocks of k and takes the block picked among them, so
// that processes claiming at once take different jobs.
func TestSpreadBatchClaimStartsAtAPickedBlock(t *testing.T) {
	b := setup(t)
	all := enqueueN(t, b, 14)
	var among []int
	q := store.WithBlockPick(store.Of(b.q), func(n int) int { among = append(among, n); return 2 })
	got, err := store.Of(q).ClaimBatch(b.ctx, claimSpread, 3)
	require.NoError(t, err)
	require.Equal(t, []int{4}, among, "picked among the 4 full blocks read")
	require.Equal(t, all[6:9], ids(got))
	requireStored(t, b, got)

	// Unspread, the same claim takes the best k.
	got, err = store.Of(q).ClaimBatch(b.ctx, claimAll, 3)
	require.NoError(t, err)
	require.Equal(t, all[:3], ids(got))
	require.Len(t, among, 1, "an unspread claim picks no block")
}

// TestSpreadBatchClaimsOfTwoWorkersDoNotCollide: two workers read the same
// candidates; spread to different blocks, each stamps its own at the first
// try, where unspread the second would find its block taken.
func TestSpreadBatchClaimsOfTwoWorkersDoNotCollide(t *testing.T) {
	b := setup(t)
	all := enqueueN(t, b, 12)
	var theirs []*store.Lease
	other := func() {
		got, err := store.Of(store.WithBlockPick(store.Of(b.q), func(int) int { return 0 })).ClaimBatch(b.ctx, func() store.ClaimParams {
			p := claimAsW2
			p.Spread = true
			return p
		}(), 3)
		require.NoError(t, err)
		for _, j := range got {
			l := store.LeaseOf(j)
			theirs = append(theirs, &l)
		}
	}
	racer, reads := raceOnce(b, other)
	got, err := store.Of(store.WithBlockPick(store.Of(racer), func(int) int { return 1 })).ClaimBatch(b.ctx, claimSpread, 3)
	require.NoError(t, err)
	require.Equal(t, 1, *reads)
	require.Len(t, theirs, 3)
	require.Equal(t, all[:3], []string{theirs[0].JobID, theirs[1].JobID, theirs[2].JobID})
	require.Equal(t, all[3:6], ids(got), "the picked block, stamped at the first try")
	requireStored(t, b, got)
}

// TestSpreadBatchClaimNeverPassesAHigherPriority: a spread batch claim
// picks only among blocks of the best priority: with fewer than two full
// blocks of it, it takes the best k as an unspread claim does.
func TestSpreadBatchClaimNeverPassesAHigherPriority(t *testing.T) {
	b := setup(t)
	enqueueN(t, b, 9)
	var high []string
	for range 4 {
		res, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{Priority: 5})
		require.NoError(t, err)
		high = append(high, res.ID)
	}
	picked := 0
	q := store.WithBlockPick(store.Of(b.q), func(n int) int { picked++; return n - 1 })
	got, err := store.Of(q).ClaimBatch(b.ctx, claimSpread, 3)
	require.NoError(t, err)
	require.Zero(t, picked, "one full block of the best priority: nothing to pick among")
	require.Equal(t, high[:3], ids(got))
	got, err = store.Of(q).ClaimBatch(b.ctx, claimSpread, 3)
	require.NoError(t, err)
	require.Equal(t, high[3], got[0].ID, "the last job of priority 5 comes first")
}
