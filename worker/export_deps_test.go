package worker

import "context"

// SetOnSettle makes w run f before each settle of its finished jobs'
// dependents, with the settle's context and the jobs' ids, as if the
// settle were slow there. Call it before Start.
func SetOnSettle(w *Worker, f func(ctx context.Context, ids []string)) { w.onSettle = f }
