// Package clientengine hands docket's own tools (docketprom, the worker
// command, dockettest's helpers and docket's tests) the engine a
// docket.Client runs on. The public API does not expose it: an
// application inserts and administers through the Client's methods, and
// no package outside docket can name this one.
package clientengine

import "github.com/docketq/docket/queue"

// Handle is what a docket.Client embeds, under a name of its own, so that
// docket's tools reach its queue client with Queue while the engine stays
// off the Client's API.
type Handle struct{ q *queue.Client }

// NewHandle returns the Handle of q.
func NewHandle(q *queue.Client) Handle { return Handle{q} }

func (h Handle) queueClient() *queue.Client { return h.q }

// Holder is a value that embeds a Handle: a *docket.Client.
type Holder interface{ queueClient() *queue.Client }

// Queue returns the engine-level queue client of h.
func Queue(h Holder) *queue.Client { return h.queueClient() }
