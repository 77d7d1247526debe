package store_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// The retention harness: the counterpart, for retention (Clean, which the
// leader's reaper runs), of handlers/harness_test.go. A Clean of the jobs
// finished in state s more than a day ago stalls after its read, before
// its one write (the delete); while it is stalled, an operator or the
// workers act on one of the jobs it read, or another leader's Clean or
// reaper runs to completion; then it resumes. Invariant: it deletes the
// jobs it read that are still eligible when it deletes, and nothing else.

// cleanDisturbances act on job id (read by the stalled Clean) meanwhile.
var cleanDisturbances = []struct {
	name string
	do   func(t *testing.T, b bundle, id string, s jobs.State)
}{
	{"retry-run-succeed", func(t *testing.T, b bundle, id string, _ jobs.State) {
		b.retry(t, id)
		require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(b.claimID(t, id))))
	}},
	{"retry-run-die", func(t *testing.T, b bundle, id string, _ jobs.State) {
		b.retry(t, id)
		j := b.claimID(t, id)
		_, err := store.Of(b.q).Fail(b.ctx, store.LeaseOf(j), j, jobs.Permanent(errors.New("bad")))
		require.NoError(t, err)
	}},
	{"retry-cancel", func(t *testing.T, b bundle, id string, _ jobs.State) {
		b.retry(t, id)
		_, err := b.q.Cancel(b.ctx, id)
		require.NoError(t, err)
	}},
	{"retry", func(t *testing.T, b bundle, id string, _ jobs.State) { b.retry(t, id) }},
	{"retry-claim", func(t *testing.T, b bundle, id string, _ jobs.State) {
		b.retry(t, id)
		b.claimID(t, id)
	}},
	{"leader-clean", func(t *testing.T, b bundle, _ string, s jobs.State) {
		_, err := store.Of(b.q).Clean(b.ctx, s, 24*time.Hour, 100)
		require.NoError(t, err)
	}},
	{"operator-delete", func(t *testing.T, b bundle, id string, _ jobs.State) {
		out, err := b.q.Delete(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(id)}}, false)
		require.NoError(t, err)
		require.NoError(t, out[0].Err)
	}},
	{"operator-purge", func(t *testing.T, b bundle, _ string, s jobs.State) {
		_, err := b.q.Purge(b.ctx, s, 24*time.Hour)
		require.NoError(t, err)
	}},
	{"reaper", func(t *testing.T, b bundle, _ string, _ jobs.State) {
		_, err := store.Of(b.q).Reap(b.ctx, 0, 100)
		require.NoError(t, err)
	}},
}

func (b bundle) retry(t *testing.T, id string) {
	t.Helper()
	out, err := b.q.Retry(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(id)}})
	require.NoError(t, err)
	require.Len(t, out, 1)
	require.NoError(t, out[0].Err)
}

// claimID claims the one runnable job, which must be id.
func (b bundle) claimID(t *testing.T, id string) *jobs.Job {
	t.Helper()
	j := b.claim(t, claimAll)
	require.Equal(t, id, j.ID)
	return j
}

// end ends the claimed job j in state s, with its lease.
func (b bundle) end(t *testing.T, j *jobs.Job, s jobs.State) {
	t.Helper()
	switch s {
	case jobs.StateSucceeded:
		require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(j)))
	case jobs.StateDead:
		_, err := store.Of(b.q).Fail(b.ctx, store.LeaseOf(j), j, jobs.Permanent(errors.New("bad")))
		require.NoError(t, err)
	case jobs.StateCancelled:
		require.NoError(t, store.Of(b.q).Cancelled(b.ctx, store.LeaseOf(j), j, "stop"))
	}
}

// finishAs ends the jobs ids in state s, 48 h ago.
func (b bundle) finishAs(t *testing.T, s jobs.State, ids ...string) {
	t.Helper()
	for range ids {
		b.end(t, b.claim(t, claimAll), s)
	}
	_, err := store.Of(b.q).Collection().UpdateMany(b.ctx, bson.M{"_id": bson.M{"$in": ids}},
		bson.M{"$set": bson.M{"finishedAt": time.Now().Add(-48 * time.Hour)}})
	require.NoError(t, err)
}

// eligible returns the ids of the jobs in state s finished before cutoff.
func (b bundle) eligible(t *testing.T, s jobs.State, cutoff time.Time) map[string]bool {
	t.Helper()
	cur, err := store.Of(b.q).Collection().Find(b.ctx, bson.M{"state": s, "finishedAt": bson.M{"$lt": cutoff}})
	require.NoError(t, err)
	out := map[string]bool{}
	for cur.Next(b.ctx) {
		out[cur.Current.Lookup("_id").StringValue()] = true
	}
	require.NoError(t, cur.Err())
	return out
}

func (b bundle) ids(t *testing.T) map[string]bool {
	t.Helper()
	cur, err := store.Of(b.q).Collection().Find(b.ctx, bson.M{})
	require.NoError(t, err)
	out := map[string]bool{}
	for cur.Next(b.ctx) {
		out[cur.Current.Lookup("_id").StringValue()] = true
	}
	require.NoError(t, cur.Err())
	return out
}

// TestCleanHarness runs every disturbance against a stalled Clean of each
// finished state.
func TestCleanHarness(t *testing.T) {
	t.Parallel()
	var n int
	for _, s := range []jobs.State{jobs.StateSucceeded, jobs.StateDead, jobs.StateCancelled} {
		for _, d := range cleanDisturbances {
			n++
			t.Run(fmt.Sprintf("%s/%s", s, d.name), func(t *testing.T) {
				b := setup(t)
				ids := enqueueN(t, b, 4) // the subject, two more old ones, a recent one
				b.finishAs(t, s, ids[:3]...)
				b.succeed(t, 1)
				subject := ids[0]
				var before, elig map[string]bool
				cq := store.WithCleanHook(store.Of(b.q), func() {
					d.do(t, b, subject, s)
					// Eligible at the delete: still in s, finished more
					// than a day ago (none of these jobs finished between
					// the Clean's cutoff and this one's).
					before, elig = b.ids(t), b.eligible(t, s, time.Now().Add(-24*time.Hour))
				})
				_, err := store.Of(cq).Clean(b.ctx, s, 24*time.Hour, 100)
				require.NoError(t, err)
				require.NotNil(t, before, "the Clean read nothing to delete")
				want := map[string]bool{}
				for id := range before {
					if !elig[id] {
						want[id] = true
					}
				}
				require.Equal(t, want, b.ids(t), "the jobs left: every job not eligible when the stalled Clean deleted")
			})
		}
	}
	t.Logf("retention harness: %d schedules", n)
}
