package queue

import (
	"context"

	"github.com/docketq/docket/internal/store"
)

// Concurrency limits: at most N jobs of a kind or of a queue run at once
// across every worker process; how they are kept is internal/store's
// (limit.go).

// LimitRefresh (one second) is how long a claim trusts the limits it read:
// a limit set or cleared by another process applies to this one's claims
// within it (within twice a read's time, when reading them takes longer:
// a slow server). SetLimit and ClearLimit apply at once to the client that
// calls them.
const LimitRefresh = store.LimitRefresh

// MaxLimit (10,000) bounds a concurrency limit: a claim reads the running
// jobs of the limit, up to that many.
const MaxLimit = store.MaxLimit

// RunLimit is one stored concurrency limit: Name ("kind:KIND" or
// "queue:QUEUE"); Limit, the most jobs of it that run at once; Running,
// how many of its jobs run now (filled by RunLimits only); SetAt and SetBy;
// and Malformed, which says what is wrong with a limit another application
// wrote (not an integer between 0 and MaxLimit): such a limit limits
// nothing.
type RunLimit = store.RunLimit

// KindLimit is the name of the concurrency limit on the jobs of kind.
func KindLimit(kind string) string { return store.KindLimit(kind) }

// QueueLimit is the name of the concurrency limit on the jobs of queue.
func QueueLimit(queue string) string { return store.QueueLimit(queue) }

// ParseLimitName checks a limit's name, "kind:NAME" or "queue:NAME", and
// returns whether it is a kind's and the kind's or queue's name.
func ParseLimitName(name string) (isKind bool, target string, err error) {
	return store.ParseLimitName(name)
}

// SetLimit limits the jobs of name ("kind:KIND", "queue:QUEUE") that run
// at once, across every worker process, to n (0: none runs). It applies at
// once to this client's claims and within LimitRefresh to every other
// worker's. Lowering it below the jobs running now stops none: claims wait
// until fewer than n run. by, when set, records who set it.
func (c *Client) SetLimit(ctx context.Context, name string, n int, by string) error {
	return c.st.SetLimit(ctx, name, n, by)
}

// SetPartitionLimit limits the jobs of name ("kind:KIND", "queue:QUEUE")
// that run at once to n per value of their args field arg (a dotted path
// for a nested field), across every worker process (0: none runs),
// leaving its total (SetLimit), if any, as it is. by, when set, records
// who set it.
func (c *Client) SetPartitionLimit(ctx context.Context, name, arg string, n int, by string) error {
	return c.st.SetPartitionLimit(ctx, name, arg, n, by)
}

// ClearPartitionLimit removes the partition limit of name, leaving its
// total, and reports whether there was one.
func (c *Client) ClearPartitionLimit(ctx context.Context, name string) (bool, error) {
	return c.st.ClearPartitionLimit(ctx, name)
}

// ClearLimit removes the limit name, its total and its partition limit
// (ClearPartitionLimit removes only the latter). It reports whether there
// was one. Running jobs keep their slots until they end, harmlessly.
func (c *Client) ClearLimit(ctx context.Context, name string) (bool, error) {
	return c.st.ClearLimit(ctx, name)
}

// RunLimits returns every stored limit, in name order, with how many of
// its jobs run now.
func (c *Client) RunLimits(ctx context.Context) ([]RunLimit, error) {
	return c.st.RunLimits(ctx)
}

// PartitionLimit is a partition limit as configured: at most N jobs
// running at once per value of the args field By. It reads and prints as
// "N per FIELD", such as "2 per customerId".
type PartitionLimit = store.PartitionLimit

// ParsePartitionLimit reads "N per FIELD", such as "2 per customerId" or
// "1 per customer.id".
func ParsePartitionLimit(s string) (PartitionLimit, error) { return store.ParsePartitionLimit(s) }

// ValidPartitionArg checks the args field a limit is partitioned by: a
// field name, or a dotted path into nested documents, each part non-empty,
// printable, and not starting with '$'.
func ValidPartitionArg(arg string) error { return store.ValidPartitionArg(arg) }
