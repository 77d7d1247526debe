package store

// WithBlockPick returns a Store like c whose spread batch claims start at
// the block pick returns among n, instead of a random one, and record n.
func WithBlockPick(c *Store, pick func(n int) int) *Store {
	return withHook(c, func(h *hooks) { h.pickBlock = pick })
}
