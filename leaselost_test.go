package docket_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/docketq/docket"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/require"
)

// One sentinel for a lost lease: whichever package's name a caller tests
// against, errors.Is holds for the errors of the others. Before, queue and
// worker each had their own, and errors.Is against the wrong one was false.
func TestErrLeaseLostIsOneValue(t *testing.T) {
	t.Parallel()
	for _, err := range []error{queue.ErrLeaseLost, worker.ErrLeaseLost, docket.ErrLeaseLost} {
		wrapped := fmt.Errorf("queue: complete job j1: %w", err)
		require.ErrorIs(t, wrapped, queue.ErrLeaseLost)
		require.ErrorIs(t, wrapped, worker.ErrLeaseLost)
		require.ErrorIs(t, wrapped, docket.ErrLeaseLost)
	}
	// A handler's context ended by a lost lease has it as its cause.
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(worker.ErrLeaseLost)
	require.True(t, errors.Is(context.Cause(ctx), queue.ErrLeaseLost))
}
