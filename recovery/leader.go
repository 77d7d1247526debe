package recovery

import "github.com/docketq/docket/internal/leadership"

// Leader says whether this process leads now.
type Leader interface {
	Leading() (leadership.Term, bool)
}

// LeaderOnly returns task run only while l says this process leads: every
// process schedules the maintenance, and one of them does it, so its cost
// does not grow with the number of processes.
func LeaderOnly(l Leader, task Task) Task { return leaderOnly{Task: task, l: l} }

type leaderOnly struct {
	Task
	l Leader
}

func (lo leaderOnly) Run() {
	if _, ok := lo.l.Leading(); ok {
		lo.Task.Run()
	}
}
