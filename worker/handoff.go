package worker

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
)

// Handing run slots on (internal/store/handoff.go): under a concurrency
// limit that binds, a job's run slot goes to the next job of its limit in
// the round trip of its finishing write, and that job starts on the
// ending job's goroutine, with no claim between them. While a job holding
// run slots runs, the worker keeps up to readWindow jobs of its kind and
// queue read ahead; when the job succeeds, its completion claims one of
// them into the slots it frees. Anything that does not fit (no candidate,
// the limit far from full, a rate, a paused queue, the worker stopping, no
// run slot for the successor) leaves the completion as it was: the freed
// slot goes to the dispatcher's next claim.

// slowProbe: a read ahead slower than the handlers it serves is made
// again only after slowProbe times as long.
const slowProbe = 10

// handOnTries is how many more successors read ahead a completion that
// freed its slot (its successor taken) stamps into it, one at a time,
// before leaving the slot to the dispatcher's claim.
const handOnTries = 2

// successorMaxAge is how long a job read ahead is offered a slot: an
// older read has likely been claimed by another worker since, and a stamp
// that matches nothing costs the slot the claim round trips a hand-off
// saves.
const successorMaxAge = time.Second

// successors are the jobs read ahead, per kind and queue, for the run
// slots of this worker's jobs.
type successors struct {
	mu    sync.Mutex
	pools map[successorKey]*successorPool

	// What the completions of jobs holding run slots did: handed their
	// slots on; sent a hand-off whose successor was taken; found no
	// successor read ahead; or could not hand on (store.ErrNoHandoff).
	handed, missed, empty, refused atomic.Int64
	// off (set by tests before Start) turns hand-offs and reads ahead off.
	off bool
}

// successorKey names the jobs that may take one another's run slots.
type successorKey struct{ kind, queue string }

// successorPool is the read ahead of one kind and queue.
type successorPool struct {
	cands   []*store.Successor
	running int           // jobs of it running here and holding run slots
	reading bool          // a read is on its way
	readAt  time.Time     // when the last read's reply came
	took    time.Duration // how long the last read took
	// handed are the jobs offered a slot lately, by id, left out of the
	// reads that follow for successorMaxAge (drop).
	handed map[string]time.Time
}

// pool returns the pool of k. s.mu is held.
func (s *successors) pool(k successorKey) *successorPool {
	if s.pools == nil {
		s.pools = map[successorKey]*successorPool{}
	}
	p := s.pools[k]
	if p == nil {
		p = &successorPool{handed: map[string]time.Time{}}
		s.pools[k] = p
	}
	return p
}

// drop removes the candidates read too long ago, and forgets the handed
// jobs as old. s.mu is held.
func (p *successorPool) drop(now time.Time) {
	if now.Sub(p.readAt) >= p.maxAge() {
		p.cands = nil
	}
	for id, at := range p.handed {
		if now.Sub(at) >= successorMaxAge {
			delete(p.handed, id)
		}
	}
}

// maxAge is how long the jobs of the pool's last read are offered slots:
// successorMaxAge, or four times what the read took when that is longer
// (a server that sorts a big backlog for each read: reading again sooner
// would keep it sorting).
func (p *successorPool) maxAge() time.Duration { return max(successorMaxAge, 4*p.took) }

// readWindow is how many candidates a read ahead asks for: on a server
// that sorts the available jobs for every such read (devdb's does, in
// Go), a read of many costs what a read of few does, while each read is
// a command all others wait behind; and the more there are, the less
// often two workers offer the same one. So a read asks for the most,
// store.MaxSuccessors, and is made seldom (see readAhead).
const readWindow = store.MaxSuccessors

// readAhead registers r's job, which has started, as a run of its kind
// and queue, and when it holds run slots of a limit that binds, reads
// successors ahead unless enough are read already. It returns what
// unregisters it.
func (w *Worker) readAhead(r *run) (done func()) {
	job := r.job
	if w.ahead.off || !w.q.HoldsRunSlot(job.ID) {
		return func() {}
	}
	k := successorKey{job.Kind, job.Queue}
	s := &w.ahead
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pool(k)
	p.running++
	done = func() {
		s.mu.Lock()
		p.running--
		s.mu.Unlock()
	}
	p.drop(time.Now())
	// Enough read lately: two for each job here and one more, read within
	// half of maxAge (what others take meanwhile makes a hand-off miss);
	// and no read within as long as the last one took. A read slower than
	// a handler is ahead of nothing, and on a server that runs one command
	// at a time (devdb sorting a big backlog) it holds back every other:
	// it is made again only after slowProbe reads' time, to see whether
	// reads got fast.
	since, handler := time.Since(p.readAt), w.handler.mean()
	fresh := (len(p.cands) > 2*p.running && since < p.maxAge()/2) || since < p.took ||
		(handler > 0 && p.took > handler && since < slowProbe*p.took)
	if p.reading || fresh || !w.q.SuccessorsWanted(job.ID) || w.claimingCtx.Err() != nil {
		return done
	}
	p.reading = true
	w.running.Add(1) // r's own is held: a stop waits for this read too
	go func() {
		defer w.running.Done()
		params := store.ClaimParams{Owner: w.cfg.ID, Queues: w.cfg.Queues, Kinds: w.reg.Kinds(), Lease: w.cfg.Lease}
		ctx, cancel := context.WithTimeout(context.Background(), w.bound(w.cfg.ClaimTimeout()))
		sent := time.Now()
		got, err := w.q.ReadSuccessors(ctx, params, k.kind, k.queue, readWindow)
		cancel()
		if err != nil {
			w.log.Debug("reading successors ahead failed", zap.Error(err))
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		p.reading = false
		p.readAt, p.took = time.Now(), time.Since(sent)
		p.cands = p.cands[:0]
		for _, c := range got {
			if _, ok := p.handed[c.Job.ID]; !ok {
				p.cands = append(p.cands, c)
			}
		}
	}()
	return done
}

// takeSuccessor returns a job read ahead of kind and queue to hand run
// slots to, nil when there is none: one picked at random among those of
// the highest priority read, so that two workers that read the same jobs
// rarely offer the same (jobs of one priority start in claim order only
// roughly, within a read's window, as with a spread claim).
func (w *Worker) takeSuccessor(k successorKey) *store.Successor {
	s := &w.ahead
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pool(k)
	now := time.Now()
	p.drop(now)
	if len(p.cands) == 0 {
		return nil
	}
	top := store.FirstPriorityRun(len(p.cands), func(i int) int { return p.cands[i].Job.Priority })
	i := rand.IntN(top)
	c := p.cands[i]
	p.cands = append(p.cands[:i:i], p.cands[i+1:]...)
	p.handed[c.Job.ID] = now
	return c
}

// missedSuccessor drops what was read ahead of k: a successor read in it
// had been taken by another worker, so the rest likely were too.
func (w *Worker) missedSuccessor(k successorKey) {
	s := &w.ahead
	s.mu.Lock()
	s.pool(k).cands = nil
	s.mu.Unlock()
}

// completeWrite returns the write that records the success of r's job,
// with the result result returns: its first try hands the job's run slots
// on when it can (handOff), the others (and a first that cannot) are
// Complete.
func (w *Worker) completeWrite(r *run, result func() bson.Raw) func(context.Context) error {
	tried := false
	return func(ctx context.Context) error {
		ctx = store.WithResult(ctx, result())
		if !tried {
			tried = true
			if err, sent := w.handOff(ctx, r); sent {
				return err
			}
		}
		if r.job.Dependents {
			// Its settle takes the list of dependents from the write.
			var err error
			r.written, err = w.q.CompleteReading(ctx, r.lease)
			return err
		}
		return w.q.Complete(ctx, r.lease)
	}
}

// handOnFreed hands the run slots of job id, completed while its
// successor had been taken, to another successor read ahead: the slot is
// free, and one more stamp still costs less than the claim's read and
// stamp. It tries handOnTries of them, and returns the one claimed, if
// any; params.Token is the last one tried's.
func (w *Worker) handOnFreed(ctx context.Context, id string, k successorKey, params *store.ClaimParams) *jobs.Job {
	w.ahead.missed.Add(1)
	for range handOnTries {
		next := w.takeSuccessor(k)
		if next == nil {
			break
		}
		params.Token = uuid.NewString()
		got, err := w.q.HandOnFreed(ctx, id, next, *params)
		if got != nil {
			return got
		}
		if err != nil {
			if !errors.Is(err, store.ErrNoHandoff) {
				w.giveBackTaken(params.Token, successorWhat)
			}
			break
		}
		w.ahead.missed.Add(1)
	}
	w.missedSuccessor(k)
	return nil
}

// handOff completes r's job handing its run slots to a successor read
// ahead, and starts the successor claimed so. sent is false when no
// hand-off was sent: the caller completes as usual. The error is the
// completion's (see store.CompleteHandingOff): one that leaves it
// unknown gives back the successor, which its stamp may have claimed,
// and the caller's next try is a Complete, which reads back a completion
// already applied.
func (w *Worker) handOff(ctx context.Context, r *run) (err error, sent bool) {
	job := r.job
	if w.ahead.off || w.claimingCtx.Err() != nil || !w.q.HoldsRunSlot(job.ID) {
		return nil, false
	}
	k := successorKey{job.Kind, job.Queue}
	next := w.takeSuccessor(k)
	if next == nil {
		w.ahead.empty.Add(1)
		return nil, false
	}
	// Only with a run slot free for it: a successor waiting for one
	// would hold its limit's slot idle.
	if !w.exec.TryAcquire(1) {
		return nil, false
	}
	w.exec.Release(1)
	params := w.takeParams()
	start := time.Now()
	got, err := w.q.CompleteHandingOff(ctx, r.lease, next, params)
	if errors.Is(err, store.ErrNoHandoff) {
		w.ahead.refused.Add(1)
		return nil, false
	}
	if got == nil && err == nil {
		got = w.handOnFreed(ctx, job.ID, k, &params)
	}
	if got == nil {
		if err != nil && !errors.Is(err, jobs.ErrLeaseLost) && !errors.Is(err, store.ErrOutcomeUnknown) {
			w.giveBackTaken(params.Token, successorWhat)
		}
		return err, true
	}
	w.ahead.handed.Add(1)
	w.startTaken(r, got, start)
	return err, true
}

// successorWhat names, in logs, a hand-off's successor given back.
const successorWhat = "the successor of a run slot hand-off"

// takeParams are the claim parameters of a job taken from the goroutine of
// a job that ended (a hand-off's successor, a chain's next task), with a
// fresh token.
func (w *Worker) takeParams() store.ClaimParams {
	return store.ClaimParams{Owner: w.cfg.ID, Queues: w.cfg.Queues, Kinds: w.reg.Kinds(), Lease: w.cfg.Lease, Token: uuid.NewString()}
}

// startTaken starts job, claimed since start from the goroutine of r's
// job, which has ended (a hand-off's successor, a chain's next task). It
// takes a dispatcher's slot (w.held) here, in place of r's given up when
// its handler returned: the worker may hold one job over its target
// meanwhile, when the dispatcher took the room in between.
func (w *Worker) startTaken(r *run, job *jobs.Job, start time.Time) {
	w.obs.Claimed(time.Since(start), 1, nil)
	if !w.startable(job) {
		w.signalWake()
		return
	}
	w.held.Add(1)
	r.handedOn = true // its slots run job: nothing to claim
	w.launch(job)
}

// giveBackTaken gives back what, a job that a write whose outcome is
// unknown may have claimed under token from the goroutine of a job that
// ended (a hand-off's successor, a chain's next task), as the dispatcher
// gives back the jobs of a claim that returned an error: at once, and
// once more a claim timeout later (a write still queued on the server is
// applied by then). A stop makes the second sweep at once.
func (w *Worker) giveBackTaken(token, what string) {
	w.running.Add(1) // the caller's run is held: a stop waits for this
	go func() {
		defer w.running.Done()
		log := w.log.With(zap.String("lease_token", token))
		for sweep := range 2 {
			if sweep > 0 {
				sleep(w.claimingCtx, w.cfg.ClaimTimeout())
			}
			err := w.releaseClaim(token, w.bound(w.cfg.ClaimTimeout()), log, what+" whose claim's reply was lost")
			if err != nil {
				log.Warn("could not give back "+what+" whose claim's reply was lost; the reaper re-queues it after its lease", zap.Error(err))
			}
		}
	}()
}
