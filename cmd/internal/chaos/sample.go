//go:build linux

package chaos

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/docketq/docket/internal/store"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// maxProblems is how many distinct problems a sampler keeps: the first
// ones are enough to read.
const maxProblems = 20

// sampled is what a sampler found wrong: the reads that failed and the
// first distinct problems. Its mu guards the load that embeds it.
type sampled struct {
	mu       sync.Mutex
	errs     []saleReadErr
	problems []string
}

// problem records a problem unless it is known already or maxProblems are.
func (s *sampled) problem(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addProblem(fmt.Sprintf(format, args...))
}

// addProblem is problem with s.mu held.
func (s *sampled) addProblem(msg string) {
	if len(s.problems) < maxProblems && !slices.Contains(s.problems, msg) {
		s.problems = append(s.problems, msg)
	}
}

// readFailed records a failed read.
func (s *sampled) readFailed(err error) {
	s.mu.Lock()
	s.errs = append(s.errs, saleReadErr{at: time.Now(), err: err})
	s.mu.Unlock()
}

// findJobs reads the jobs that match filter into docs, a pointer to a
// slice, in one query.
func (r *run) findJobs(ctx context.Context, docs, filter any, opts ...options.Lister[options.FindOptions]) error {
	cur, err := store.Of(r.q).Collection().Find(ctx, filter, opts...)
	if err != nil {
		return err
	}
	return cur.All(ctx, docs)
}
