package store

import (
	"context"
	"errors"
	"time"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Snooze gives the job l holds back to the queue to run again at d from
// now, as if this attempt of j had not been made: its attempt is not
// counted and no error is recorded (a handler's jobs.Snooze). It returns
// the state the job went to: available, with when it runs again, or
// cancelled when its cancel was requested while it ran (then why is in
// its errors).
//
// The write is fenced on l as Release's is, and like it recognizes an
// earlier try of itself whose reply was lost; otherwise a lease that no
// longer holds the job writes nothing and returns jobs.ErrLeaseLost.
func (s *Store) Snooze(ctx context.Context, l Lease, j *jobs.Job, d time.Duration) (jobs.State, time.Time, error) {
	t := s.Now()
	runAt := t.Add(max(d, 0)).Truncate(time.Millisecond) // as stored: a BSON date holds milliseconds
	mark := bson.E{Key: releasedTokenField, Value: l.Token}
	update := requeue(t, runAt, mark)
	update = append(update, bson.E{Key: "$inc", Value: bson.D{{Key: "attempt", Value: -1}}})
	cancelled, err := s.requeueUnlessCancelled(ctx, "snooze", fence(l), update, func(requestedAt string, _ bson.Raw) bson.D {
		why := jobs.AttemptError{Attempt: j.Attempt, At: t, Owner: j.Owner, Message: cancelledInstead(requestedAt, "snoozed")}
		return Finish(jobs.StateCancelled, t, bson.E{Key: "errors", Value: jobs.AppendError(j.Errors, why)}, mark)
	})
	if errors.Is(err, jobs.ErrLeaseLost) {
		var got *written
		err = s.unlessWritten(ctx, "snooze", l, err, func(w *written) bool { got = w; return w.ReleasedToken == l.Token })
		if err == nil && got.State == jobs.StateCancelled && got.LeaseToken == l.Token {
			cancelled = true
		} else if err == nil && got.State == jobs.StateAvailable {
			runAt = got.RunAt // an earlier try's
		}
	}
	if cancelled {
		return jobs.StateCancelled, time.Time{}, err
	}
	return jobs.StateAvailable, runAt, err
}
