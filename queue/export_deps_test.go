package queue

import "context"

// WithDepsStep returns ctx carrying f, which runs after each write of a
// link or a settle of dependencies made under ctx, given the step's name
// ("link:list", "link:mark", "link:apply", "link:ready", "settle:pull",
// "settle:<state>", "settle:ready", "settle:done"); an error it returns
// stops the link or settle there, as if its process had died.
func WithDepsStep(ctx context.Context, f func(ctx context.Context, step string) error) context.Context {
	return context.WithValue(ctx, depsStepKey{}, f)
}

// WithWorkflowStep returns ctx carrying f, which runs after each write of
// an InsertWorkflow made under ctx ("gate", "tasks", "publish"); an error
// it returns stops the insert there, as if its process had died.
func WithWorkflowStep(ctx context.Context, f func(ctx context.Context, step string) error) context.Context {
	return context.WithValue(ctx, workflowStepKey{}, f)
}

// WithMaxListed returns ctx under which a link lists at most n dependents
// on a parent (depslist.go) before it flags the parent dependentsMany.
func WithMaxListed(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, maxListedKey{}, n)
}

// LastInBulk is lastInBulk: the most dependents of a parent settled alone
// released in the settle's command.
const LastInBulk = lastInBulk
