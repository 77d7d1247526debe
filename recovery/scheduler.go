package recovery

import (
	"fmt"

	"github.com/robfig/cron/v3"
	"go.uber.org/zap"
)

// Task is a maintenance pass run on a cron schedule.
type Task interface {
	cron.Job
	// Schedule is the task's cron spec.
	Schedule() string
}

// Scheduler runs tasks on their schedules. A pass that is still running
// when its next turn comes is skipped, not stacked. The passes of all
// tasks take turns, one at a time, and when they are slow they are paced
// to take at most a quarter of the time.
type Scheduler struct {
	cron *cron.Cron
	pace *pacer
}

// NewScheduler returns a scheduler for tasks; start it with Start.
func NewScheduler(log *zap.Logger, tasks ...Task) (*Scheduler, error) {
	cl := cronLogger{log.Named("cron")}
	pace := newPacer()
	c := cron.New(cron.WithLogger(cl), cron.WithChain(cron.Recover(cl), cron.SkipIfStillRunning(cl), pace.wrap))
	for _, t := range tasks {
		if _, err := c.AddJob(t.Schedule(), t); err != nil {
			return nil, fmt.Errorf("recovery: schedule %q: %w", t.Schedule(), err)
		}
	}
	return &Scheduler{cron: c, pace: pace}, nil
}

// Start runs the tasks on their schedules in the background.
func (s *Scheduler) Start() { s.cron.Start() }

// Stop stops scheduling at once; the returned channel closes when passes
// already running have ended.
func (s *Scheduler) Stop() <-chan struct{} {
	s.pace.close()
	return s.cron.Stop().Done()
}

// cronLogger adapts zap to cron.Logger; cron's routine info goes to debug.
type cronLogger struct{ log *zap.Logger }

func (l cronLogger) Info(msg string, kv ...any) { l.log.Sugar().Debugw(msg, kv...) }

func (l cronLogger) Error(err error, msg string, kv ...any) {
	l.log.Sugar().Errorw(msg, append(kv, "error", err)...)
}
