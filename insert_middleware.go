package docket

import (
	"context"
	"errors"
	"slices"
)

// InsertFunc inserts jobs as Client.InsertMany does: one result per job, in
// order. InsertMiddleware wraps it.
type InsertFunc func(ctx context.Context, params []InsertManyParams) ([]InsertResult, error)

// InsertMiddleware wraps every Insert and InsertMany of a client (River's
// JobInsertMiddleware): it runs around the insert, may change what each job
// is inserted with (its Opts), calls next to insert, and returns next's
// results and error. It runs before the jobs are validated. Package
// docketotel's tracing is one; a middleware that changes a job's options
// gives next a new InsertOpts rather than modifying the caller's.
type InsertMiddleware func(next InsertFunc) InsertFunc

// UseInsert adds middleware around every insert of the client (Insert,
// InsertMany; not InsertWorkflow); the first given runs outermost. It may
// be called at any time: it applies to the inserts that begin after it.
func (c *Client) UseInsert(mw ...InsertMiddleware) error {
	for _, m := range mw {
		if m == nil {
			return errors.New("docket: UseInsert: nil middleware")
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.insertMiddleware = append(c.insertMiddleware, mw...)
	return nil
}

// wrapInsert returns insert wrapped in the client's insert middleware.
func (c *Client) wrapInsert(insert InsertFunc) InsertFunc {
	c.mu.Lock()
	mw := slices.Clone(c.insertMiddleware)
	c.mu.Unlock()
	for i := len(mw) - 1; i >= 0; i-- {
		insert = mw[i](insert)
	}
	return insert
}
