package docket

import (
	"errors"
	"slices"

	"github.com/docketq/docket/jobs"
)

// Use adds middleware around every handler of the client, whichever kind
// and whenever it was added; the first given runs outermost. Call it before Start: after, it fails,
// as the pool takes its middleware when it starts.
func (c *Client) Use(mw ...Middleware) error {
	return c.beforeStart("Use after Start: the pool takes its middleware when it starts", func() error {
		for _, m := range mw {
			if m == nil {
				return errors.New("docket: Use: nil middleware")
			}
		}
		c.middleware = append(c.middleware, mw...)
		return nil
	})
}

// Handler returns the handler of kind as the pool runs it: wrapped in the
// client's middleware (Use), with its kind's options. ok is false when no
// handler was added for kind. Package dockettest runs handlers through it.
func (c *Client) Handler(kind string) (h jobs.Handler, opts jobs.KindOptions, ok bool) {
	h, opts, ok = c.reg.Lookup(kind)
	if !ok {
		return nil, opts, false
	}
	c.mu.Lock()
	mw := slices.Clone(c.middleware)
	c.mu.Unlock()
	return jobs.Wrap(h, mw...), opts, true
}
