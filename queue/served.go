package queue

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/docketq/docket/jobs"
)

// Served is what the live worker processes claim, as their registry
// documents list it: the kinds each serves on its queues. A job whose
// kind no live process lists for its queue waits until one that does
// starts: a kind misspelt at enqueue (send_emial), or one whose workers
// all stopped.
type Served struct {
	// Alive is how many worker processes are alive.
	Alive int
	// byKind maps each kind served to the queues it is served on.
	byKind map[string]map[string]bool
}

// newServed reads what the live processes of list serve; those not Alive
// are left out.
func newServed(list []WorkerInfo) Served {
	s := Served{byKind: map[string]map[string]bool{}}
	for _, w := range list {
		if !w.Alive {
			continue
		}
		s.Alive++
		for _, k := range w.Kinds {
			if s.byKind[k] == nil {
				s.byKind[k] = map[string]bool{}
			}
			for _, q := range w.Queues {
				s.byKind[k][q] = true
			}
		}
	}
	return s
}

// Served reads the registry and returns what the live worker processes
// serve (alive as Workers counts them by default). It only reads: a
// reader may not be allowed to write.
func (c *Client) Served(ctx context.Context) (Served, error) {
	list, err := c.listWorkers(ctx, c.st.ServerTime(ctx), 0, false)
	if err != nil {
		return Served{}, err
	}
	return newServed(list), nil
}

// Serves reports whether a live process claims jobs of kind on queue.
func (s Served) Serves(queue, kind string) bool { return s.byKind[kind][queue] }

// Kinds returns the kinds live processes serve, on any queue, in order.
func (s Served) Kinds() []string { return slices.Sorted(maps.Keys(s.byKind)) }

// Queues returns the queues on which live processes serve kind, in order.
func (s Served) Queues(kind string) []string { return slices.Sorted(maps.Keys(s.byKind[kind])) }

// UnservedJobs counts the waiting jobs of one queue and kind that no live
// process serves.
type UnservedJobs struct {
	Queue, Kind string
	// Waiting is how many of its jobs are available (due or not).
	Waiting int64
}

// Unserved returns, from stats, the available jobs (due or not) whose
// kind no live process serves on their queue, by queue and kind in order.
// Jobs blocked on parents and running ones are not counted.
func (s Served) Unserved(stats []QueueStats) []UnservedJobs {
	var out []UnservedJobs
	for _, qs := range stats {
		for kind, byState := range qs.Counts {
			if n := byState[jobs.StateAvailable]; n > 0 && !s.Serves(qs.Queue, kind) {
				out = append(out, UnservedJobs{Queue: qs.Queue, Kind: kind, Waiting: n})
			}
		}
	}
	slices.SortFunc(out, func(a, b UnservedJobs) int {
		return cmp.Or(strings.Compare(a.Queue, b.Queue), strings.Compare(a.Kind, b.Kind))
	})
	return out
}
