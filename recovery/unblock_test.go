package recovery_test

import (
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/stretchr/testify/require"
)

// A worker that died between a parent's finishing write and telling its
// dependents leaves the outcome due: the reaper's pass tells them, before
// retention, which would otherwise delete the parent.
func TestReaperSettlesDependentsLeftDue(t *testing.T) {
	b := reaperSetup(t)
	parent, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	child, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{After: []string{parent.ID}})
	require.NoError(t, err)
	j, err := store.Of(b.q).Claim(b.ctx, store.ClaimParams{Owner: "w", Queues: []string{"default"}, Kinds: []string{"k"}, Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, parent.ID, j.ID)
	require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(j))) // and the worker dies

	// Retention with no age: the parent is due, so kept until settled.
	_, err = b.reaper(t, recovery.ReaperConfig{SucceededRetention: time.Nanosecond}).RunOnce(b.ctx)
	require.NoError(t, err)
	c, err := b.q.Get(b.ctx, child.ID)
	require.NoError(t, err)
	require.Equal(t, jobs.StateAvailable, c.State)
}
