package handlers

import "context"

// SetAfterTreeRead makes ReadTree call f between reading a version's nodes
// and checking that the version is still kept; nil removes it.
func SetAfterTreeRead(f func()) {
	if f == nil {
		afterTreeRead.Store(nil)
		return
	}
	afterTreeRead.Store(&f)
}

// SetLedgerSweeperHook makes s call hook after each of its writes.
func SetLedgerSweeperHook(s *LedgerSweeper, hook func(context.Context, string) error) { s.hook = hook }

// WithAfterOrderRead returns ctx with f run by an order attempt between
// its read of the product and its take.
func WithAfterOrderRead(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, orderReadHookKey{}, f)
}
