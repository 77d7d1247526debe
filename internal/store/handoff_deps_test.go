package store_test

import (
	"testing"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

// A successor read ahead, then marked by the link of a dependent, is not
// handed on as read (without the mark, its worker would not know to
// settle its dependents): the claim that takes it sees the mark.
func TestHandoffSuccessorMarkedMeanwhile(t *testing.T) {
	b := setup(t)
	s := store.Of(b.q)
	a, succ := handoffSetup(t, b, s, 1)
	_, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{After: []string{succ[0].Job.ID}})
	require.NoError(t, err)
	got, err := s.CompleteHandingOff(b.ctx, store.LeaseOf(a), succ[0], handoffParams("handoff-1"))
	require.NoError(t, err)
	if got == nil {
		got, err = s.Claim(b.ctx, claimAll)
		require.NoError(t, err)
	}
	require.Equal(t, succ[0].Job.ID, got.ID)
	require.True(t, got.Dependents, "the claimed job says it has dependents")
}
