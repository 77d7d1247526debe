package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHandoffRefusesAPartitionSlot: a job holding a slot of a partition
// of limit kind:k (claimed while the limit was partitioned) hands nothing
// on once only kind:k's total applies: the slot it frees is not one of the
// total's, though both are recorded under the limit's name.
func TestHandoffRefusesAPartitionSlot(t *testing.T) {
	r := newRunLoads()
	r.views[KindLimit("k")] = &runView{limit: 3, readAt: time.Now(), held: map[int]bool{0: true}}
	r.holders["job"] = []heldSlot{{limit: KindLimit("k"), part: "0123456789abcdef", k: 0}}
	_, ok := r.heldSlots("job", "k", "default", map[string]int{KindLimit("k"): 3}, map[string]time.Time{})
	require.False(t, ok)
	// Nor does a job holding one ask for successors read ahead, even with
	// its limit's total nearly full: they could only be refused.
	r.views[KindLimit("k")].held[1] = true
	r.holders["job"] = []heldSlot{{limit: KindLimit("k"), k: 0}, {limit: KindLimit("k"), part: "0123456789abcdef", k: 0}}
	s := &Store{limits: &runLimits{loads: r}}
	require.False(t, s.SuccessorsWanted("job"))

	r.holders["job"] = []heldSlot{{limit: KindLimit("k"), k: 0}}
	set, ok := r.heldSlots("job", "k", "default", map[string]int{KindLimit("k"): 3}, map[string]time.Time{})
	require.True(t, ok, "a slot of the total is handed on")
	require.Equal(t, "k/0", set[0].Value)
}
