package queue

import (
	"context"
	"sync/atomic"
	"time"
)

// WithRaceBeforeStamp returns a Client like c whose batch claims run f
// after reading their candidates and before stamping them, as if another
// worker ran in between.
func WithRaceBeforeStamp(c *Client, f func()) *Client {
	r := *c
	r.betweenReadAndStamp = f
	return &r
}

// HeartbeatProjection says what c's heartbeats found out about the
// server: "unknown" before the first, then "projects" or "whole document".
func HeartbeatProjection(c *Client) string {
	switch c.projection.Load() {
	case projectionSupported:
		return "projects"
	case projectionUnsupported:
		return "whole document"
	}
	return "unknown"
}

// WithLostStampReply returns a Client like c whose batch claims stamp their
// jobs and then fail with err, as if the server applied the stamp and its
// reply was lost.
func WithLostStampReply(c *Client, err error) *Client {
	r := *c
	r.afterStamp = func() error { return err }
	return &r
}

// withHooks returns a copy of c with hooks h (c's other fields shared).
func withHooks(c *Client, h hooks) *Client {
	r := *c
	r.hooks = &h
	return &r
}

// WithLostClaimReply returns a Client like c whose claims' findAndModify,
// once the server applied it, fails with err the first n times, as when
// the reply is lost.
func WithLostClaimReply(c *Client, n int, err error) *Client {
	var left atomic.Int32
	left.Store(int32(n))
	return withHooks(c, hooks{afterClaim: func() error {
		if left.Add(-1) >= 0 {
			return err
		}
		return nil
	}})
}

// WithFailedReadBack returns a Client like c whose batch claims fail with
// err when they read back the jobs they stamped.
func WithFailedReadBack(c *Client, err error) *Client {
	return withHooks(c, hooks{beforeReadBack: func() error { return err }})
}

// WithLostFinishReply returns a Client like c whose finishing write op
// ("complete", "fail", "cancel"), once the server applied it, fails with
// err the first n times, as when the reply is lost.
func WithLostFinishReply(c *Client, op string, n int, err error) *Client {
	var left atomic.Int32
	left.Store(int32(n))
	return withHooks(c, hooks{afterFinish: func(got string) error {
		if got == op && left.Add(-1) >= 0 {
			return err
		}
		return nil
	}})
}

// WithAdmitHook returns ctx with f run by each admission to a bounded
// queue after it read the occupied slots and before it inserts.
func WithAdmitHook(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, admitHookKey{}, f)
}

// SetPauseRefresh sets how long the claims of c (and its copies) trust the
// paused queues they last read.
func SetPauseRefresh(c *Client, d time.Duration) {
	c.pauses.mu.Lock()
	c.pauses.refresh = d
	c.pauses.mu.Unlock()
}

// WithReadBackTimeout returns a Client like c whose fenced finishing
// writes that matched nothing bound the read telling a lost lease from an
// earlier try applied by d (5 s otherwise); a d of 0 makes that read fail
// at once with context.DeadlineExceeded.
func WithReadBackTimeout(c *Client, d time.Duration) *Client {
	h := hooks{}
	if c.hooks != nil {
		h = *c.hooks
	}
	h.readBackTimeout = &d
	return withHooks(c, h)
}

// WithCleanHook returns a Client like c whose Clean runs f after it read
// the ids of the jobs to delete and before it deletes them, as if the
// process stalled in between.
func WithCleanHook(c *Client, f func()) *Client {
	h := hooks{}
	if c.hooks != nil {
		h = *c.hooks
	}
	h.beforeClean = f
	return withHooks(c, h)
}

// WithCompleteReadBackHook returns a Client like c whose CompleteMany runs
// f after its updateMany, when not every fence matched, before it reads
// which did.
func WithCompleteReadBackHook(c *Client, f func()) *Client {
	h := hooks{}
	if c.hooks != nil {
		h = *c.hooks
	}
	h.beforeCompleteReadBack = f
	return withHooks(c, h)
}
