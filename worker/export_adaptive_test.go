package worker

// SetOnGatherWait makes w call f each time a claim waits for slots to free
// before it is sent. Call it before Start.
func SetOnGatherWait(w *Worker, f func()) { w.onGatherWait = f }
