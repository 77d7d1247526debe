package queue

import "context"

// WithInsertHook returns ctx carrying f, which runs after each insert
// command of EnqueueMany under ctx: f gets the command's error and returns
// the one EnqueueMany sees, so a test can lose the reply of an insert the
// server applied.
func WithInsertHook(ctx context.Context, f func(err error) error) context.Context {
	return context.WithValue(ctx, insertHookKey{}, f)
}

// WithAdmitHook returns ctx with f run by each admission to a bounded
// queue after it read the occupied slots and before it inserts.
func WithAdmitHook(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, admitHookKey{}, f)
}
