package docket

import (
	"context"
	"errors"

	"github.com/docketq/docket/worker"
)

// AddObserver adds o to the observers of the client's pool, beside the
// event subscribers: it is told of each
// claim, attempt and heartbeat (worker.Observer; its methods are called
// concurrently and must return quickly). Call it before Start: after, it
// fails, as the pool takes its observers when it starts. docketprom's
// collector is built on it.
func (c *Client) AddObserver(o worker.Observer) error {
	if o == nil {
		return errors.New("docket: AddObserver: nil observer")
	}
	return c.beforeStart("AddObserver after Start: the pool takes its observers when it starts", func() error {
		c.observers = append(c.observers, o)
		return nil
	})
}

// RunWhileStarted runs f in a goroutine of its own from Start until Stop:
// f's context ends when Stop begins, and Stop waits for f to return. Work
// that belongs to the client's life (docketprom's counting of the jobs)
// goes here. Call it before Start: after, it fails.
func (c *Client) RunWhileStarted(f func(ctx context.Context)) error {
	if f == nil {
		return errors.New("docket: RunWhileStarted: nil func")
	}
	return c.beforeStart("RunWhileStarted after Start", func() error {
		c.runs = append(c.runs, f)
		return nil
	})
}
