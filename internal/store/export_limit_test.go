package store

import (
	"context"
	"fmt"
)

// FreeStrandedRunSlots frees, as package queue's RepairForeignWrites does,
// the run slots of up to FoundBatch jobs that hold one but are not
// running, alone, and returns how many it freed.
func (s *Store) FreeStrandedRunSlots(ctx context.Context) (int, error) {
	ids, err := s.FoundIDs(ctx, StrandedRunSlotsFilter())
	if err != nil {
		return 0, fmt.Errorf("store: free stranded run slots: %w", err)
	}
	return s.FreeRunSlotsOf(ctx, ids)
}
