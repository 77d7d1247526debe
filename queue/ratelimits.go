package queue

import (
	"context"

	"github.com/docketq/docket/internal/store"
)

// Rate limits: at most N starts of a kind's or a queue's jobs per period,
// across every worker process; how they are kept is internal/store's
// (rate.go, ratepart.go).

// RateStartLag (500 ms) bounds how long after its reservation a job of a
// rate limit may be claimed: a claim answered later gives its jobs of the
// rate back, unstarted and uncounted.
const RateStartLag = store.RateStartLag

// MaxBurst (10,000) bounds a rate's burst.
const MaxBurst = store.MaxBurst

// Rate is a rate limit: at most N starts per Per, of which at most Burst
// at once (0 is 1); with By, per value of the jobs' args field By (a
// dotted path for a nested field). Per is at least a millisecond, in
// whole milliseconds, and at most a year (8784h); the whole burst must
// refill (Burst × Per / N) within 100 years. Its String writes it as
// ParseRate reads it; Validate says what is wrong with it.
type Rate = store.Rate

// RateLimit is one stored rate limit: Name ("kind:KIND" or
// "queue:QUEUE"); Rate; Starts, the starts reserved under it across every
// process since it was first set; Used, how much of the burst is taken now
// (0 when Burst jobs may start at once); NextStart, when the next start is
// allowed (zero: now); SetAt and SetBy; Malformed, which says what is
// wrong with a rate another application wrote: such a rate limits nothing;
// and of a partitioned rate, Partitions, how many of its partitions have
// state stored, and Spent, how many of them allow no start now (Used and
// NextStart are then zero: each partition has its own).
type RateLimit = store.RateLimit

// ParseRate reads a rate: N/PERIOD, the period s, m, h or a Go duration
// (14/s, 600/m, 5/250ms), optionally followed by " burst B", then
// optionally by " per FIELD" ("10/m burst 2 per customerId").
func ParseRate(s string) (Rate, error) { return store.ParseRate(s) }

// SetRate limits the jobs of name ("kind:KIND", "queue:QUEUE") that start,
// across every worker process, to r. It applies at once to this client's
// claims, to every other worker's next reservation under a rate it had
// read (the reservation is conditioned on the rate), and within
// LimitRefresh to its claims otherwise. by, when set, records who set it.
func (c *Client) SetRate(ctx context.Context, name string, r Rate, by string) error {
	return c.st.SetRate(ctx, name, r, by)
}

// ClearRate removes the rate limit of name. It reports whether there was
// one.
func (c *Client) ClearRate(ctx context.Context, name string) (bool, error) {
	return c.st.ClearRate(ctx, name)
}

// RateLimits returns every stored rate limit, in name order, with how much
// of its burst is used now.
func (c *Client) RateLimits(ctx context.Context) ([]RateLimit, error) {
	return c.st.RateLimits(ctx)
}

// WaitingOnLimits counts, for each of names ("kind:K", "queue:Q"), the
// jobs of it that could run now (available, runAt passed): those a full
// limit or a spent rate holds back.
func (c *Client) WaitingOnLimits(ctx context.Context, names []string) (map[string]int64, error) {
	return c.st.WaitingOnLimits(ctx, names)
}
