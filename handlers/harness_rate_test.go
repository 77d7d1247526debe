package handlers_test

import (
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

// worldRate's rate: two starts an hour, both at once, on the kind of the
// job under test, set before A's claim (A takes the first); the world
// raises the burst to 4 for a copy of the job and for B.
var harnessRate = queue.Rate{N: 2, Per: time.Hour, Burst: 2}

// rateBeforeClaim sets harnessRate on the kind of the job under test.
func (h *harnessEnv) rateBeforeClaim(t *testing.T) {
	t.Helper()
	h.rateKind = h.get(t, h.subject).Kind
	h.setRateBurst(t, harnessRate.Burst)
}

// setRateBurst sets harnessRate with burst b on worldRate's kind.
func (h *harnessEnv) setRateBurst(t *testing.T, b int) {
	t.Helper()
	r := harnessRate
	r.Burst = b
	h.must(t, "set the rate", func() error { return h.q.SetRate(h.ctx, queue.KindLimit(h.rateKind), r, "harness") })
	h.rateBurst = b
}

// rateStarts is how many starts the rate of worldRate has reserved.
func (h *harnessEnv) rateStarts(t *testing.T) int64 {
	t.Helper()
	var rs []queue.RateLimit
	h.must(t, "read the rates", func() (err error) { rs, err = h.q.RateLimits(h.ctx); return err })
	require.Len(t, rs, 1)
	require.Empty(t, rs[0].Malformed)
	return rs[0].Starts
}

// rateWorld runs while A, stalled, holds the job under the rate it took
// the first start of: a copy of the job (same kind and args) is claimed
// with the second start and given back, which does not give the start
// back; a claim then gets nothing, told when the next start is allowed
// (half an hour on). The burst raised to 4 allows exactly two more
// starts: the copy's, claimed again and completed here without running
// its handler, and B's.
func (h *harnessEnv) rateWorld(t *testing.T) {
	t.Helper()
	s := store.Of(h.q)
	subject := h.get(t, h.subject)
	res, err := h.enqueueJob(t, subject.Kind, subject.Args, queue.InsertOpts{})
	require.NoError(t, err)
	p := store.ClaimParams{Owner: "rate-world", Queues: []string{jobs.DefaultQueue}, Kinds: []string{h.rateKind}, Lease: time.Minute}
	x := h.claim(t, p)
	require.NotNil(t, x, "the rate's second start")
	require.Equal(t, res.ID, x.ID)
	h.must(t, "release", func() error { return s.Release(h.ctx, store.LeaseOf(x)) })
	require.EqualValues(t, 2+h.rateLost, h.rateStarts(t), "A's start and the copy's, given back but spent (and %d of lost claims)", h.rateLost)
	x = h.claim(t, p)
	require.Nil(t, x, "a claim under the spent rate")
	require.WithinDuration(t, time.Now().Add(harnessRate.Per/time.Duration(harnessRate.N)), s.NextRateStart(), time.Minute)
	h.setRateBurst(t, h.rateBurst+2)
	x = h.claim(t, p)
	require.NotNil(t, x, "the copy, with the third start")
	require.Equal(t, res.ID, x.ID)
	h.must(t, "complete", func() error { return s.Complete(h.ctx, store.LeaseOf(x)) })
	require.EqualValues(t, 3+h.rateLost, h.rateStarts(t))
}

// checkRateAfterB checks, once B has claimed and ended (or been killed),
// that the rate reserved four starts in all (A, the copy twice, B): no claim
// started a job of the kind beyond what it allowed, stalled or killed
// attempts included. Then it lifts the rate, so that the schedule's last
// attempts (after a killed B, retries) are not held back by it.
func (h *harnessEnv) checkRateAfterB(t *testing.T) {
	t.Helper()
	if h.rateKind == "" {
		return
	}
	require.EqualValues(t, 4+h.rateLost, h.rateStarts(t), "starts reserved under the rate: A's, the copy's two, B's (and %d of lost claims)", h.rateLost)
	h.must(t, "clear the rate", func() error { _, err := h.q.ClearRate(h.ctx, queue.KindLimit(h.rateKind)); return err })
	h.rateKind = "" // lifted
}
