package worker

// ProcessHeld returns how many jobs w holds now of each of its process
// limits (Config.ProcessLimits), by limit name, those at none left out.
func ProcessHeld(w *Worker) map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.plimits.held()
}
