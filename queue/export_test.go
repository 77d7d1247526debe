package queue

import (
	"context"
	"fmt"
)

// What queue's external tests reach that the package keeps to itself.

// ClearNullUniqueKeys is clearNullUniqueKeys, for nullkey_test.go.
func (c *Client) ClearNullUniqueKeys(ctx context.Context) (int, error) {
	return c.clearNullUniqueKeys(ctx)
}

// NewServed is newServed, for served_test.go.
func NewServed(list []WorkerInfo) Served { return newServed(list) }

// ErrBadJobID is errBadJobID, for jobid_test.go.
var ErrBadJobID = errBadJobID

// FreeStrandedSlots frees, as RepairForeignWrites does, the capacity slots
// of up to store.FoundBatch jobs that hold one but are not unfinished,
// alone, and returns how many it freed.
func (c *Client) FreeStrandedSlots(ctx context.Context) (int, error) {
	ids, err := c.st.FoundIDs(ctx, strandedCapacitySlots)
	if err != nil {
		return 0, fmt.Errorf("queue: free stranded capacity slots: %w", err)
	}
	return c.freeStrandedSlotsOf(ctx, ids)
}
