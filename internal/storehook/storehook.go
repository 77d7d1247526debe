// Package storehook lets package queue hand its lease-level operations to
// docket's engine without making them public: queue sets Store when it is
// initialized, and internal/jobstore, which only docket's own packages can
// import, calls it. The indirection breaks the import cycle that a typed
// interface in queue's importers would make.
package storehook

import "time"

// Store returns the lease-level operations of a *queue.Client as a value
// whose method set is internal/jobstore's Store. A positive linger joins
// concurrent completions into one write (group commit). Set by package
// queue's init.
var Store func(client any, linger time.Duration) any
