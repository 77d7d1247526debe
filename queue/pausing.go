package queue

import (
	"context"

	"github.com/docketq/docket/internal/store"
)

// Pausing a queue: how it is stored and read is internal/store's
// (pause.go).

// DefaultQueuesCollection ("queues") is the collection holding the queues'
// paused state and capacities, beside the default jobs collection. A
// Client on another jobs collection C uses C_queues.
const DefaultQueuesCollection = store.DefaultQueuesCollection

// PauseRefresh (one second) is how long a claim trusts the paused queues it
// read: a queue paused now is no longer claimed from once every worker's
// cache is older than this, that is within a second plus the claim in
// flight (on a slow server, within twice what reading the states takes).
const PauseRefresh = store.PauseRefresh

// QueueState is the stored state of one queue: Queue (its name), Paused,
// PausedAt and PausedBy (who paused it, when recorded), and Malformed,
// which says what is wrong with a document another application wrote (a
// paused field that is not a boolean; such a queue is not paused).
type QueueState = store.QueueState

// ValidQueueName reports what is wrong with q as a queue name, by the rule
// of enqueue: empty, longer than jobs.MaxNameBytes, not UTF-8, or holding
// a control character.
func ValidQueueName(q string) error { return store.ValidQueueName(q) }

// Pause stops every worker claiming from queue within PauseRefresh (plus a
// claim in flight); jobs already running finish. A name enqueue would
// refuse (ValidQueueName) is refused. by, when set, records who
// paused it. It reports whether the queue was running until now (false:
// it was already paused, nothing changed).
func (c *Client) Pause(ctx context.Context, queue, by string) (bool, error) {
	return c.st.Pause(ctx, queue, by)
}

// Resume lets workers claim from queue again, within PauseRefresh. It
// reports whether the queue was paused (or its document malformed) until
// now. Any name that can be stored is taken, so that a queue another
// application paused under a name enqueue refuses can be resumed.
func (c *Client) Resume(ctx context.Context, queue, by string) (bool, error) {
	return c.st.Resume(ctx, queue, by)
}

// QueueStates returns the stored state of every queue that has one and is
// not plainly running: the paused ones, and those whose document another
// application wrote malformed. Queues are in name order.
func (c *Client) QueueStates(ctx context.Context) ([]QueueState, error) {
	return c.st.QueueStates(ctx)
}
