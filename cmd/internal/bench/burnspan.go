package bench

import (
	"context"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// burnSpan is how long a burn-down's workers took, from the jobs' own
// stamps: from the first claim (a claim stamps heartbeatAt; no-op jobs end
// before their first renewal) to the last finish (finishedAt). The worker
// processes stamp both on this machine's clock, to the millisecond, so a
// burn-down of 0.2 s is timed to within a few per cent, where the children's
// reports (every reportEvery) would round it up to a whole report.
type burnSpan struct {
	first, last time.Time // zero until a job with the stamp is added
}

// add takes in a finished job's stamps.
func (s *burnSpan) add(j *jobs.Job) {
	if c := j.HeartbeatAt; c != nil && (s.first.IsZero() || c.Before(s.first)) {
		s.first = *c
	}
	if f := j.FinishedAt; f != nil && f.After(s.last) {
		s.last = *f
	}
}

// duration is the span, or polled (the time the bench saw the jobs done
// in the children's reports) when the stamps give none: no job stamped
// both, or a last finish not after the first claim.
func (s burnSpan) duration(polled time.Duration) time.Duration {
	if s.first.IsZero() || s.last.IsZero() || !s.last.After(s.first) {
		return polled
	}
	return s.last.Sub(s.first)
}

// finishedJobs reads the stamps of every job that succeeded.
func finishedJobs(ctx context.Context, q *queue.Client) ([]jobs.Job, error) {
	cur, err := store.Of(q).Collection().Find(ctx, bson.D{{Key: "state", Value: jobs.StateSucceeded}},
		options.Find().SetProjection(bson.D{{Key: "createdAt", Value: 1}, {Key: "heartbeatAt", Value: 1}, {Key: "finishedAt", Value: 1}}))
	if err != nil {
		return nil, err
	}
	var js []jobs.Job
	if err := cur.All(ctx, &js); err != nil {
		return nil, err
	}
	return js, nil
}
