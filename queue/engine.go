package queue

import (
	"time"

	"github.com/docketq/docket/internal/storehook"
)

// store carries the lease-level operations: claiming, heartbeats, fenced
// finishing writes, releasing claims, reaping and retention. They are the
// engine's (package worker and package recovery reach them through
// internal/jobstore), not an embedding app's: a claim or a finishing write
// made outside the engine's bookkeeping would break the fencing the engine
// relies on. The methods are exported only so that the engine's interface
// can name them; no value of this type leaves docket's own packages.
type store struct{ *Client }

func init() {
	storehook.Store = func(client any, linger time.Duration) any {
		c := client.(*Client)
		if linger > 0 {
			c = c.withBatchedCompletion(linger)
		}
		return store{c}
	}
}
