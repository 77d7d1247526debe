package store

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/docketq/docket/jobs"
)

// What a claim under concurrency limits knows of their run slots without
// reading the running jobs again (limit.go reads them with one find).
//
// A read is kept as a view per limit, which this client's own claims and
// runs keep up to date: a slot it stamps is held, a slot its finished run
// gave back is free again. Other processes' claims and frees are not in
// it, so a view is trusted only where being wrong costs nothing but a
// refused write, never a job over the limit: the unique index on the slot
// refuses a slot another claim holds, and a refused stamp drops every view.
//
//   - A limit far from full (half of it free or more, counting the jobs
//     the claim asks for) is claimed under from a view up to runLoadTrust
//     old, taking free slots at random among those the view says are free.
//     A limit that does not bind so costs one read of its running jobs per
//     runLoadTrust, not one per claim.
//   - A slot this client's own finished run freed (the worker says so with
//     RunEnded, after the finishing write) is handed to the next claim at
//     once, without a read: a binding limit's slot goes from one job to
//     the next with the finishing write and the claim's own, nothing
//     between.
//   - A client told of its own frees trusts a view younger than
//     LimitRefresh, full or not: a worker's claims while its limit is full
//     cost no read; a slot another process frees is seen by the next read,
//     within LimitRefresh (that process hands it to its own next claim
//     first).
//
// Either is used only when the view's read found no running job holding
// no slot and came at least two LimitRefresh after the limit was set: by
// then every process claims under the limit (jobs claimed by a process
// that had not read it yet hold no slot and count against it; a view does
// not see new ones). A limit another application wrote without limitSetAt
// is taken as set long ago.

// runLoadTrust is how long a claim trusts a read of the run slots of a
// limit far from full.
const runLoadTrust = 5 * time.Second

// maxSlotHolders bounds the jobs whose slots a client remembers (a job
// given back other than by a worker's finished run is never told of):
// past it, all are forgotten, and their slots are read rather than handed
// on.
const maxSlotHolders = 10_000

// runLoads are the views of the limits' run slots of one Client and its
// copies, and the slots its claims stamped, by job.
type runLoads struct {
	mu      sync.Mutex
	views   map[string]*runView // by limit name
	holders map[string][]heldSlot
	// full: the last claim under limits left one of them with no free
	// slot; limited: limits applied to the last claim.
	full, limited bool
	// parts are the views of the partitioned limits (partition.go), by
	// limit name.
	parts map[string]*partView
	// told: RunEnded was called, so the views know this client's own
	// frees (a worker's client); else a view that holds a slot its user
	// freed with a finishing write must not be trusted to be full.
	told bool
}

// runView is one limit's run slots as a claim of this client last read
// them, kept up to date with its own claims and runs.
type runView struct {
	limit  int       // as it was when read
	readAt time.Time // when the read was sent
	held   map[int]bool
	freed  []int // held slots this client's runs freed since: handed on
}

// heldSlot is one run slot a job holds.
type heldSlot struct {
	limit string // its limit's name: kind:K or queue:Q
	part  string // its partition's key; "" for the limit's total
	k     int
}

func newRunLoads() *runLoads {
	return &runLoads{views: map[string]*runView{}, parts: map[string]*partView{}, holders: map[string][]heldSlot{}}
}

// forget drops every view: the next claim reads.
func (r *runLoads) forget() {
	r.mu.Lock()
	r.views = map[string]*runView{}
	r.parts = map[string]*partView{}
	r.mu.Unlock()
}

// slotsFor returns the picker of a claim of up to k jobs under the limits
// totals (name → limit) and parts: from the views when they may be trusted
// (see above), else from a read of the running jobs, which it keeps as the
// new views. fresh forces the read.
func (s *Store) slotsFor(ctx context.Context, totals map[string]int, parts partSpecs, k int, fresh bool) (*slotPicker, error) {
	r := s.limits.loads
	if !fresh {
		setAt := s.limitsSetAt()
		if sl := r.fromViews(totals, k, setAt); sl != nil {
			if !parts.any() {
				return sl, nil
			}
			if pload := r.partsFromViews(parts, setAt); pload != nil {
				sl.parts, sl.pload = parts, pload
				return sl, nil
			}
		}
	}
	sent := time.Now()
	load, pload, err := s.readRunLoad(ctx, totals, parts)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	for name, n := range totals {
		l := load[name]
		if l == nil || l.Unslotted > 0 {
			delete(r.views, name)
			continue
		}
		r.views[name] = &runView{limit: n, readAt: sent, held: copySet(l.Slots)}
	}
	r.storePartViews(parts, pload, sent)
	r.mu.Unlock()
	return newSlotPicker(totals, load, parts, pload), nil
}

func copySet(m map[int]bool) map[int]bool {
	out := make(map[int]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// fromViews returns the picker of a claim of up to k jobs under the
// limits names (name → limit) from the views, or nil when one of them may
// not be trusted: no view, a view of another limit, one read too soon
// after the limit was set (setAt), or one neither far from full nor
// holding a slot handed on.
func (r *runLoads) fromViews(names map[string]int, k int, setAt map[string]time.Time) *slotPicker {
	r.mu.Lock()
	defer r.mu.Unlock()
	free := map[string][]int{}
	for name, n := range names {
		v := r.views[name]
		if v == nil || v.limit != n || !v.readAt.After(setAt[name].Add(2*LimitRefresh)) {
			return nil
		}
		age := time.Since(v.readAt)
		// Slots held at or above the limit (it was lowered while they
		// ran) count against it, as in a read (QueueLoad.FreeSlots).
		overflow := 0
		for slot := range v.held {
			if slot >= n {
				overflow++
			}
		}
		switch {
		case (age < runLoadTrust && 2*(len(v.held)+k) <= n) || (r.told && age < LimitRefresh):
			// Far from full, or young and kept up to date with this
			// client's own frees (a worker's, which tells RunEnded): the
			// slots free as read, less those this client took since,
			// plus those it freed; none when it is full.
			free[name] = QueueLoad{Slots: v.held}.FreeSlots(n)
		case len(v.freed) > 0:
			// Older: only what this client's runs freed is known free.
			var f []int
			for _, slot := range v.freed {
				if slot < n-overflow {
					f = append(f, slot)
				}
			}
			if len(f) == 0 {
				return nil
			}
			free[name] = f
		default:
			return nil
		}
	}
	return &slotPicker{totals: names, free: free, parts: partSpecs{}, pfree: map[string][]int{}}
}

// noteTaken records the run slots stamped on the jobs claimed (job id →
// the slots of its stamp): held in the views, and remembered as the job's
// for RunEnded.
func (r *runLoads) noteTaken(stamped map[string][]heldSlot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, hs := range stamped {
		if len(hs) == 0 {
			continue
		}
		for _, h := range hs {
			r.hold(h)
		}
		if len(r.holders) >= maxSlotHolders {
			r.holders = map[string][]heldSlot{}
		}
		r.holders[id] = hs
	}
}

// hold records in the views that h is held by a job this client claimed.
// r.mu is held.
func (r *runLoads) hold(h heldSlot) {
	if h.part == "" {
		if v := r.views[h.limit]; v != nil {
			v.held[h.k] = true
			v.freed = slices.DeleteFunc(v.freed, func(f int) bool { return f == h.k })
		}
		return
	}
	if v := r.parts[h.limit]; v != nil {
		l := v.loads[h.part]
		if l == nil {
			// Its value is not known here: a claim's filter cannot leave
			// it out by value (saturated skips it); the picker still
			// refuses its jobs once it is full.
			l = &partLoad{QueueLoad: QueueLoad{Slots: map[int]bool{}}}
			v.loads[h.part] = l
		}
		l.Slots[h.k] = true
	}
}

// free records in the views that h, held by this client's run, is free:
// a total's slot is handed to the next claim. r.mu is held.
func (r *runLoads) free(h heldSlot) {
	if h.part != "" {
		if v := r.parts[h.limit]; v != nil && v.loads[h.part] != nil {
			delete(v.loads[h.part].Slots, h.k)
		}
	} else if v := r.views[h.limit]; v != nil && v.held[h.k] {
		delete(v.held, h.k)
		v.freed = append(v.freed, h.k)
	}
}

// HoldsRunSlot reports whether the job jobID, claimed by this client, took
// a run slot of a concurrency limit: the write that ends its attempt frees
// it, and a claim right after that write can take it (see RunEnded).
func (s *Store) HoldsRunSlot(jobID string) bool {
	r := s.limits.loads
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.holders[jobID]
	return ok
}

// RunEnded tells the client that the write ending the attempt of job
// jobID, which it claimed, was applied: the run slots it held are free,
// and this client's next claim takes them without reading the running
// jobs of their limits (another process may take one first: the claim's
// stamp is then refused, and it reads).
func (s *Store) RunEnded(jobID string) {
	r := s.limits.loads
	r.mu.Lock()
	defer r.mu.Unlock()
	r.told = true
	hs, ok := r.holders[jobID]
	if !ok {
		return
	}
	delete(r.holders, jobID)
	for _, h := range hs {
		r.free(h)
	}
}

// limitsSetAt is when each limit was set, as last read.
func (s *Store) limitsSetAt() map[string]time.Time {
	l := s.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.setAt
}

// noteFull records whether the claim that picked slots with s left a
// limit with none free (nil: no limit applied).
func (r *runLoads) noteFull(s *slotPicker) {
	full := false
	if s != nil {
		for name := range s.free {
			full = full || s.full(name)
		}
	}
	r.mu.Lock()
	r.full, r.limited = full, s != nil
	r.mu.Unlock()
}

// UnderLimits reports whether concurrency limits applied to this client's
// last claim. A claim under a limit stamps its jobs with a candidates'
// read and a write, as a batch claim does, whether it asks for one job or
// many: a worker then claims for all its free slots at once, never one
// job at a time.
func (s *Store) UnderLimits() bool {
	r := s.limits.loads
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.limited
}

// LimitFull reports whether this client's last claim under concurrency
// limits left one of them full: asking again before a run slot frees
// finds no job of it. A worker whose claim got fewer jobs than it asked
// for then waits for its own jobs' finishing writes (RunEnded) or its
// next poll rather than claiming again at once.
func (s *Store) LimitFull() bool {
	r := s.limits.loads
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.full
}

// stampOrder is the order in which a claim under limits by p gives free
// slots to the jobs of block (in claim order): with p.Spread, the jobs of
// the block's first priority in random order, so that processes claiming
// at once with fewer slots than jobs take different ones rather than race
// for the first; a job of a lower priority still comes after.
func stampOrder(p ClaimParams, block []*jobs.Job) []int {
	order := make([]int, len(block))
	for i := range order {
		order[i] = i
	}
	if !p.Spread || len(block) < 2 {
		return order
	}
	top := FirstPriorityRun(len(block), func(i int) int { return block[i].Priority })
	rand.Shuffle(top, func(i, j int) { order[i], order[j] = order[j], order[i] })
	return order
}
