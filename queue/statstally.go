package queue

import (
	"time"

	"github.com/docketq/docket/jobs"
)

// statsTally gathers QueueStats, queue by queue in the order the queues are
// first seen, for Stats and scanStats.
type statsTally struct {
	now     time.Time // a runAt after now is not due: it waits for no one
	byQueue map[string]*QueueStats
	order   []string
}

func newStatsTally(now time.Time) *statsTally {
	return &statsTally{now: now, byQueue: map[string]*QueueStats{}}
}

// add counts n jobs of kind in state in queue q. runAt, when ok, is the
// earliest runAt among them: the queue's oldest available job when they
// are available and due.
func (t *statsTally) add(q, kind, state string, n int64, runAt time.Time, ok bool) {
	qs := t.byQueue[q]
	if qs == nil {
		qs = &QueueStats{Queue: q, Counts: map[string]map[jobs.State]int64{}}
		t.byQueue[q] = qs
		t.order = append(t.order, q)
	}
	if qs.Counts[kind] == nil {
		qs.Counts[kind] = map[jobs.State]int64{}
	}
	qs.Counts[kind][jobs.State(state)] += n
	if ok && state == string(jobs.StateAvailable) && !runAt.After(t.now) &&
		(qs.OldestAvailable.IsZero() || runAt.Before(qs.OldestAvailable)) {
		qs.OldestAvailable = runAt.UTC()
	}
}

// stats returns the queues' stats, in the order they were first seen.
func (t *statsTally) stats() []QueueStats {
	out := make([]QueueStats, 0, len(t.order))
	for _, q := range t.order {
		out = append(out, *t.byQueue[q])
	}
	return out
}
