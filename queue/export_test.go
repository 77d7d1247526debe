package queue

import "context"

// What queue's external tests reach that the package keeps to itself.

// ClearNullUniqueKeys is clearNullUniqueKeys, for nullkey_test.go.
func (c *Client) ClearNullUniqueKeys(ctx context.Context) (int, error) {
	return c.clearNullUniqueKeys(ctx)
}

// NewServed is newServed, for served_test.go.
func NewServed(list []WorkerInfo) Served { return newServed(list) }

// ErrBadJobID is errBadJobID, for jobid_test.go.
var ErrBadJobID = errBadJobID
