package store_test

import (
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

// TestHeartbeatDetectsProjection: heartbeats ask the server for the few
// fields they need, not the whole job (args up to 1 MB), where the server
// supports it; devdb (FerretDB v1) does not, and the first heartbeat finds
// that out and falls back, with no error and no lost renewal.
// (TestServerDetectsEachFeature counts the commands.)
func TestHeartbeatDetectsProjection(t *testing.T) {
	b := setup(t)
	lacking := lacksFeatures(t, b)
	_, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	j := b.claim(t, claimAll)

	// A lost lease is still reported as lost by the first heartbeat.
	fresh, err := queue.New(b.db, queue.Config{})
	require.NoError(t, err)
	require.Equal(t, "unknown", store.Of(fresh).Server().FindAndModifyProjection.State())
	_, err = store.Of(fresh).Heartbeat(b.ctx, store.Lease{JobID: j.ID, Token: "stale"}, time.Hour)
	require.ErrorIs(t, err, jobs.ErrLeaseLost)

	require.Equal(t, "unknown", store.Of(b.q).Server().FindAndModifyProjection.State())
	for i := range 2 {
		ren, err := store.Of(b.q).Heartbeat(b.ctx, store.LeaseOf(j), time.Hour)
		require.NoError(t, err, "heartbeat %d", i)
		require.WithinDuration(t, time.Now().Add(time.Hour), ren.ExpiresAt, time.Minute)
		require.False(t, ren.CancelRequested)
		require.WithinDuration(t, ren.ExpiresAt, *b.get(t, j.ID).LeaseExpiresAt, time.Millisecond)
		require.Equal(t, want(lacking), store.Of(b.q).Server().FindAndModifyProjection.State())
	}
	_, err = b.q.Cancel(b.ctx, j.ID)
	require.NoError(t, err)
	ren, err := store.Of(b.q).Heartbeat(b.ctx, store.LeaseOf(j), time.Hour)
	require.NoError(t, err)
	require.True(t, ren.CancelRequested)
}
