// Package clientengine hands docket's own tools (docketprom, the worker
// command, docket's tests) the engine a docket.Client runs on: its queue
// client (*queue.Client), its leader elector (*leadership.Elector) and its
// reaper's configuration (recovery.ReaperConfig). The public API does not
// expose them: an application inserts and administers through the
// Client's methods, and no package outside docket can name this one.
//
// It names none of those types itself, so that it stands below every
// package of docket and imports none: a part is asked for by its type.
package clientengine

import "fmt"

// Handle is what a docket.Client embeds, under a name of its own, so that
// docket's tools reach its engine with Part while the engine stays off the
// Client's API.
type Handle struct{ parts []any }

// NewHandle returns the Handle of a client's engine parts, each of a type
// of its own.
func NewHandle(parts ...any) Handle { return Handle{parts} }

func (h Handle) engine() Handle { return h }

// Holder is a value that embeds a Handle: a *docket.Client.
type Holder interface{ engine() Handle }

// Part returns h's engine part of type T, such as
// Part[*queue.Client](client). It panics when h has none: a mistake in
// docket's own code, not something a document or a user can cause.
func Part[T any](h Holder) T {
	for _, p := range h.engine().parts {
		if v, ok := p.(T); ok {
			return v
		}
	}
	panic(fmt.Sprintf("clientengine: the client has no part of type %T", *new(T)))
}
