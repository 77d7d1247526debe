package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Writes fenced on a value as read must hold for a value of any type
// (store.AsRead): given as it is, a regex is read as a pattern (an invalid
// one fails the write) and a document with "$" keys as operators.

// TestClaimBuriesARegexAttempt: a job another app wrote with an attempt
// that is a regex (a valid pattern and an invalid one) is buried dead by
// the claim, and the claim goes on to the good job behind it, instead of
// every claim of the queue failing.
func TestClaimBuriesARegexAttempt(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	ctx := context.Background()
	past := time.Now().Add(-time.Hour)
	for id, re := range map[string]bson.Regex{"re-valid": {Pattern: "^a"}, "re-invalid": {Pattern: ".*\x1b[31m", Options: "i"}} {
		insertDocs(t, store.Of(q).Collection(), []any{bson.D{
			{Key: "_id", Value: id}, {Key: "kind", Value: "noop"}, {Key: "queue", Value: "default"}, {Key: "state", Value: "available"},
			{Key: "args", Value: bson.D{}}, {Key: "priority", Value: 5}, {Key: "runAt", Value: past}, {Key: "attempt", Value: re},
			{Key: "maxAttempts", Value: 3}, {Key: "errors", Value: bson.A{}},
		}})
	}
	good := enqueue(t, q, "noop", bson.M{}, queue.InsertOpts{})
	var j *jobs.Job
	for deadline := time.Now().Add(10 * time.Second); j == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var err error
		j, err = store.Of(q).Claim(ctx, store.ClaimParams{Owner: "w1", Queues: []string{"default"}, Kinds: []string{"noop"}, Lease: time.Minute})
		require.NoError(t, err, "a claim failed on the regex attempts")
	}
	require.NotNil(t, j, "no claim returned the good job")
	require.Equal(t, good.ID, j.ID)
	for _, id := range []string{"re-valid", "re-invalid"} {
		require.Equal(t, jobs.StateDead, storedState(t, q, id), id)
	}
}

// TestReaperBuriesARegexLeaseToken: a running job another app wrote with
// an expired lease and a lease token that is a regex is re-queued or
// buried by the reaper, not skipped at every pass.
func TestReaperBuriesARegexLeaseToken(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	past := time.Now().Add(-time.Hour)
	insertDocs(t, store.Of(q).Collection(), []any{bson.D{
		{Key: "_id", Value: "re"}, {Key: "kind", Value: "noop"}, {Key: "queue", Value: "default"}, {Key: "state", Value: "running"},
		{Key: "args", Value: bson.D{}}, {Key: "runAt", Value: past}, {Key: "attempt", Value: 1}, {Key: "owner", Value: "gone"},
		{Key: "maxAttempts", Value: 3}, {Key: "errors", Value: bson.A{}}, {Key: "leaseToken", Value: bson.Regex{Pattern: "a[", Options: "i"}},
		{Key: "leaseExpiresAt", Value: past}, {Key: "heartbeatAt", Value: past},
	}})
	_, err := store.Of(q).Reap(context.Background(), 0, 100)
	require.NoError(t, err)
	require.NotEqual(t, jobs.StateRunning, storedState(t, q, "re"), "the reaper skipped it")
}

// storedState reads the state of job id as stored, whatever its other
// fields hold (a regex attempt does not decode as a jobs.Job).
func storedState(t *testing.T, q *queue.Client, id string) jobs.State {
	t.Helper()
	raw, err := store.Of(q).Collection().FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Raw()
	require.NoError(t, err, "read job %s", id)
	s, _ := raw.Lookup("state").StringValueOK()
	return jobs.State(s)
}
