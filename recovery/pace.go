package recovery

import (
	"sync"
	"time"

	"github.com/robfig/cron/v3"
)

// paceFactor bounds the share of the server's time that maintenance takes
// when its passes are slow: after a pass that took d, no pass of any task
// starts before paceFactor × d has passed, so maintenance runs at most
// 1/(1+paceFactor) of the time (a quarter). On a server that answers in
// milliseconds this changes nothing; on one where every scan of the jobs
// collection takes seconds (an overloaded primary, devdb over a big
// collection), it keeps the reaper, retention and the sweepers from
// crowding out the claims and completions they are there to serve.
const paceFactor = 3

// pacer makes the maintenance passes of one process take turns, one at a
// time, each starting paceFactor times the duration of the one before
// after it ended. A pass that must wait sleeps until its turn (its own
// later ticks are skipped meanwhile, as for a pass still running), so that
// every task gets its turn; a stop ends the waits at once.
type pacer struct {
	mu   sync.Mutex // held by the pass running
	next time.Time  // no pass starts before; guarded by mu
	stop chan struct{}
	once sync.Once
}

func newPacer() *pacer { return &pacer{stop: make(chan struct{})} }

// wrap is a cron.JobWrapper.
func (p *pacer) wrap(j cron.Job) cron.Job {
	return cron.FuncJob(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if wait := time.Until(p.next); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-p.stop:
				t.Stop()
				return
			}
		}
		select {
		case <-p.stop:
			return
		default:
		}
		start := time.Now()
		defer func() { p.next = time.Now().Add(paceFactor * time.Since(start)) }()
		j.Run()
	})
}

// close ends the waits of passes not yet started; they do not run.
func (p *pacer) close() { p.once.Do(func() { close(p.stop) }) }
