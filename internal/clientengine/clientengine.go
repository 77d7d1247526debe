// Package clientengine hands docket's own tools (docketprom, the worker
// command, docket's tests) the engine a docket.Client runs on: its queue
// client, its leader elector and its reaper's configuration. The public
// API does not expose them: an application inserts and administers through
// the Client's methods, and no package outside docket can name this one.
package clientengine

import (
	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
)

// Handle is what a docket.Client embeds, under a name of its own, so that
// docket's tools reach its engine with Queue, Elector and Reaper while the
// engine stays off the Client's API.
type Handle struct {
	q      *queue.Client
	e      *leadership.Elector
	reaper recovery.ReaperConfig
}

// NewHandle returns the Handle of a client's queue client, elector and
// reaper configuration (the client's Config mapped onto the reaper's).
func NewHandle(q *queue.Client, e *leadership.Elector, reaper recovery.ReaperConfig) Handle {
	return Handle{q, e, reaper}
}

func (h Handle) engine() Handle { return h }

// Holder is a value that embeds a Handle: a *docket.Client.
type Holder interface{ engine() Handle }

// Queue returns the engine-level queue client of h.
func Queue(h Holder) *queue.Client { return h.engine().q }

// Elector returns the leader elector of h.
func Elector(h Holder) *leadership.Elector { return h.engine().e }

// Reaper returns a reaper of h's jobs configured as the one h runs while
// it leads, for a pass run on demand (`worker reap`).
func Reaper(h Holder) (*recovery.Reaper, error) {
	e := h.engine()
	return recovery.NewReaper(e.q, e.reaper)
}
