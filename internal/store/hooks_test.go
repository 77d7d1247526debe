package store

import "time"

// hooks are a Store's test hooks (testHooks): each, when set, runs at its
// point; an error it returns is taken as the operation's.
type hooks struct {
	// afterClaim runs after a claim's findAndModify the server applied.
	afterClaim func() error
	// beforeReadBack runs before a batch claim reads back what it stamped.
	beforeReadBack func() error
	// afterFinish runs after a fenced write that ends an attempt (complete,
	// fail, cancelled) and that the server applied; op names the write.
	afterFinish func(op string) error
	// pickBlock, when set, picks a spread batch claim's first block among
	// n, in place of a random one.
	pickBlock func(n int) int
	// readBackTimeout, when set, bounds a finishing write's read-back in
	// place of readBackTimeout.
	readBackTimeout *time.Duration
	// beforeCompleteReadBack runs when a CompleteMany whose fences did not
	// all match has written, before it reads which did.
	beforeCompleteReadBack func()
	// beforeClean runs when Clean has read the ids of the jobs to delete,
	// before it deletes them.
	beforeClean func()
	// betweenFindAndUpdate runs when FoundIDs has read the ids of the
	// jobs a repair changes, before it changes them.
	betweenFindAndUpdate func()
	// afterRefillRead runs when a read of candidates in the background
	// (candidates.go) has read them, before it fills the cache.
	afterRefillRead func()
}

var _ testHooks = (*hooks)(nil)

func (h *hooks) AfterClaim() error { return callErr(h.afterClaim) }

func (h *hooks) BeforeReadBack() error { return callErr(h.beforeReadBack) }

func (h *hooks) AfterFinish(op string) error {
	if h.afterFinish == nil {
		return nil
	}
	return h.afterFinish(op)
}

func (h *hooks) PickBlock(n int) (int, bool) {
	if h.pickBlock == nil {
		return 0, false
	}
	return h.pickBlock(n), true
}

func (h *hooks) ReadBackTimeout() (time.Duration, bool) {
	if h.readBackTimeout == nil {
		return 0, false
	}
	return *h.readBackTimeout, true
}

func (h *hooks) BeforeCompleteReadBack() { call(h.beforeCompleteReadBack) }

func (h *hooks) BeforeClean() { call(h.beforeClean) }

func (h *hooks) BetweenFindAndUpdate() { call(h.betweenFindAndUpdate) }

func (h *hooks) AfterRefillRead() { call(h.afterRefillRead) }

// call runs f when it is set.
func call(f func()) {
	if f != nil {
		f()
	}
}

// callErr runs f when it is set, and returns its error.
func callErr(f func() error) error {
	if f == nil {
		return nil
	}
	return f()
}

// withHooks returns a copy of c with hooks h (c's other fields shared).
func withHooks(c *Store, h hooks) *Store {
	r := *c
	r.hooks = &h
	return &r
}

// withHook returns a copy of c whose hooks are c's with set applied.
func withHook(c *Store, set func(h *hooks)) *Store {
	var h hooks
	if old, ok := c.hooks.(*hooks); ok {
		h = *old
	}
	set(&h)
	return withHooks(c, h)
}
