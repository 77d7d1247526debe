package docket

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/worker"
	"go.uber.org/zap"
)

// EventKind says how a job's attempt in this client's pool ended (the
// values are the outcome labels of docket_jobs_finished_total), or, for
// EventJobProgress, that a running attempt's progress was written.
type EventKind string

// The kinds of event a subscriber may receive.
const (
	// EventJobSucceeded: the handler returned nil; the job is succeeded.
	EventJobSucceeded EventKind = EventKind(worker.OutcomeSucceeded)
	// EventJobRetried: the attempt failed and the job will run again after
	// its backoff, at Event.Job.RunAt; Event.Job.Errors ends with the
	// attempt's error.
	EventJobRetried EventKind = EventKind(worker.OutcomeRetried)
	// EventJobDead: the attempt failed for good (a permanent error, or no
	// attempts left); Event.Job.Errors ends with its error.
	EventJobDead EventKind = EventKind(worker.OutcomeDead)
	// EventJobCancelled: the job was cancelled while it ran, by a cancel
	// request (Client.JobCancel) or by its handler returning jobs.Cancel;
	// then Event.Job.Errors ends with the handler's reason.
	EventJobCancelled EventKind = EventKind(worker.OutcomeCancelled)
	// EventJobSnoozed: the handler returned jobs.Snooze; the job runs
	// again after the snooze, at Event.Job.RunAt, its attempt not counted
	// (Event.Job.Attempt is the count as written back).
	EventJobSnoozed EventKind = EventKind(worker.OutcomeSnoozed)
	// EventJobLeaseLost: another worker or the reaper took the job while
	// the attempt ran; the attempt wrote nothing.
	EventJobLeaseLost EventKind = EventKind(worker.OutcomeLeaseLost)
	// EventJobReleased: the client stopped and gave the job back, its
	// attempt not counted.
	EventJobReleased EventKind = EventKind(worker.OutcomeReleased)
	// EventJobUnrecorded: the outcome could not be written before the lease
	// expired (the database away); the reaper re-queues the job.
	EventJobUnrecorded EventKind = EventKind(worker.OutcomeUnrecorded)
	// EventJobProgress: a lease renewal wrote the progress the job's
	// handler reported (jobs.Progress), in Event.Job.Progress; reports
	// made between two renewals give one event, of the last. Sent only to
	// the subscriptions that name it: Subscribe without kinds receives
	// the attempts that ended.
	EventJobProgress EventKind = "progress"
)

// Event is one attempt of this client's pool that ended, or the progress
// of one that runs (EventJobProgress).
type Event struct {
	// Kind says how it ended.
	Kind EventKind
	// Job is the job as the attempt left it (State the one written, Errors
	// ending with this attempt's error when it failed, Progress the one it
	// keeps when it finished), or, for EventJobProgress, the running job
	// with the progress written. Shared by every subscriber: read it, do
	// not modify it.
	Job *jobs.Job
	// Duration is how long the handler ran; zero for EventJobProgress.
	Duration time.Duration
	// At is when the attempt ended, or its progress was written.
	At time.Time
}

// DefaultEventBuffer is how many events a subscription holds for its
// reader before it drops new ones.
const DefaultEventBuffer = 1000

// SubscribeConfig configures a subscription.
type SubscribeConfig struct {
	// Kinds are the events to receive. Defaults to every kind of ended
	// attempt (all but EventJobProgress).
	Kinds []EventKind
	// Buffer is how many events wait for the reader before new ones are
	// dropped (counted by EventsDropped, docket_events_dropped_total, and
	// logged). Defaults to DefaultEventBuffer.
	Buffer int
}

// eventHub hands the pool's ended attempts to the subscribers. It is a
// worker.Observer: the client observes its pool through it.
type eventHub struct {
	worker.NopObserver
	log *zap.Logger

	mu      sync.RWMutex
	subs    map[*subscription]struct{}
	dropped atomic.Uint64
}

type subscription struct {
	kinds   []EventKind // nil: all
	ch      chan *Event
	dropped atomic.Uint64
}

func newEventHub(log *zap.Logger) *eventHub {
	return &eventHub{log: log, subs: map[*subscription]struct{}{}}
}

func (h *eventHub) subscribe(cfg SubscribeConfig) (<-chan *Event, func()) {
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultEventBuffer
	}
	s := &subscription{kinds: slices.Clone(cfg.Kinds), ch: make(chan *Event, cfg.Buffer)}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.subs, s)
			h.mu.Unlock()
			close(s.ch) // no send is under way: sends hold the read lock
		})
	}
}

// Finished implements worker.Observer.
func (h *eventHub) Finished(job *jobs.Job, outcome worker.Outcome, handler time.Duration) {
	h.publish(func() *Event { return &Event{Kind: EventKind(outcome), Job: job, Duration: handler, At: time.Now()} })
}

// Progressed implements worker.ProgressObserver.
func (h *eventHub) Progressed(job *jobs.Job) {
	h.publish(func() *Event { return &Event{Kind: EventJobProgress, Job: job, At: time.Now()} })
}

// wants reports whether s receives events of kind k.
func (s *subscription) wants(k EventKind) bool {
	if s.kinds == nil {
		return k != EventJobProgress
	}
	return slices.Contains(s.kinds, k)
}

// publish sends the event made by event, when there is a subscriber, to
// the subscriptions that want it.
func (h *eventHub) publish(event func() *Event) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if len(h.subs) == 0 {
		return
	}
	e := event()
	for s := range h.subs {
		if !s.wants(e.Kind) {
			continue
		}
		select {
		case s.ch <- e:
		default:
			h.dropped.Add(1)
			// Said at the first drop of a subscription, then at each power
			// of ten, so a stalled reader cannot flood the log.
			if n := s.dropped.Add(1); isPowerOfTen(n) {
				h.log.Warn("an event subscriber is not keeping up: events dropped (SubscribeConfig.Buffer)",
					zap.Uint64("dropped", n), zap.Int("buffer", cap(s.ch)), zap.String("event", string(e.Kind)))
			}
		}
	}
}

func isPowerOfTen(n uint64) bool {
	for n >= 10 && n%10 == 0 {
		n /= 10
	}
	return n == 1
}
