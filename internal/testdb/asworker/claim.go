// Package asworker holds what a test does in a worker's place (claim a
// job), done as the worker does it under MongoDB's failure replies
// (worker.sweepLostClaim): a claim that returned an error may have been
// applied, so the jobs stamped with its token are given back. The
// classification of the replies is testdb's (testdb.Transient).
package asworker

import (
	"context"
	"fmt"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/google/uuid"
)

// Claim claims one job with p, as a worker does: a claim that returned
// one of MongoDB's failure replies may have been applied (its reply lost,
// or acknowledged with a writeConcernError), so the jobs stamped with its
// token are given back (not run, attempt not counted), then the claim is
// sent again with a fresh token, for up to testdb.RetryFor. lost, when
// set, is called after each such give-back, before the next claim. Claim
// returns the job claimed, nil when there is nothing to claim, or the
// first error that is not a failure reply.
func Claim(ctx context.Context, logf func(string, ...any), s *store.Store, p store.ClaimParams, lost func()) (*jobs.Job, error) {
	var j *jobs.Job
	err := testdb.Retry(logf, "claim", func() error {
		p.Token = uuid.NewString()
		var err error
		j, err = s.Claim(ctx, p)
		if !testdb.Transient(err) {
			return err
		}
		if gerr := GiveBack(ctx, logf, s, p.Token); gerr != nil {
			return fmt.Errorf("%w; and giving its jobs back: %w", err, gerr)
		}
		if lost != nil {
			lost()
		}
		return err
	})
	return j, err
}

// GiveBack gives back the jobs a claim with token stamped, retrying the
// failure replies, as the worker's sweep of a lost claim does.
func GiveBack(ctx context.Context, logf func(string, ...any), s *store.Store, token string) error {
	return testdb.Retry(logf, "give back claim "+token, func() error {
		n, err := s.ReleaseClaim(ctx, token)
		if n > 0 {
			logf("gave back %d jobs of a claim whose reply failed", n)
		}
		return err
	})
}
