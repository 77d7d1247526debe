package handlers

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// SetAfterTreeRead makes ReadTree call f between reading a version's nodes
// and checking that the version is still kept; nil removes it.
func SetAfterTreeRead(f func()) {
	if f == nil {
		afterTreeRead.Store(nil)
		return
	}
	afterTreeRead.Store(&f)
}

// SetTreeScanMet makes a tree read call f with each node document its
// cursor returns, dropping those f says no to; nil removes it.
func SetTreeScanMet(f func(bson.Raw) bool) {
	if f == nil {
		treeScanMet.Store(nil)
		return
	}
	treeScanMet.Store(&f)
}

// SetLedgerSweeperHook makes s call hook after each of its writes.
func SetLedgerSweeperHook(s *LedgerSweeper, hook func(context.Context, string) error) { s.hook = hook }

// WithAfterOrderRead returns ctx with f run by an order attempt between
// its read of the product and its take.
func WithAfterOrderRead(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, orderReadHookKey{}, f)
}
