package docket_test

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap/zaptest"
)

// A job another application wrote with an _id that is not a string (an
// ObjectId, a number) is reached by the admin verbs through its JobID:
// listed, got, cancelled, retried, its token read back.
func TestAdminVerbsTakeIDsOfAnyType(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	c, err := docket.NewClient(db, docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	now := time.Now()
	for _, id := range []any{bson.NewObjectID(), int32(7), int64(1) << 40} {
		_, err := db.Collection(docket.DefaultCollection).InsertOne(ctx, bson.M{
			"_id": id, "kind": "greet", "args": bson.M{"name": "x"}, "state": "available", "queue": "default",
			"priority": 0, "runAt": now.Add(time.Hour), "attempt": 0, "maxAttempts": 5, "errors": bson.A{},
			"createdAt": now, "updatedAt": now,
		})
		require.NoError(t, err)
	}
	page, err := c.JobList(ctx, nil)
	require.NoError(t, err)
	require.Len(t, page.Jobs, 3)
	for _, s := range page.Jobs {
		_, isString := s.JobID.StringID()
		require.False(t, isString, s.ID)

		job, err := c.JobGet(ctx, s.JobID)
		require.NoError(t, err, s.ID)
		require.Equal(t, s.JobID.String(), job.ID, "a foreign id is its String")
		require.Equal(t, "greet", job.Kind)
		require.Equal(t, jobs.StateAvailable, job.State)

		out, err := c.JobCancel(ctx, s.JobID)
		require.NoError(t, err, s.ID)
		require.Equal(t, docket.JobCancelled, out)

		parsed, err := docket.ParseJobID(s.JobID.Token())
		require.NoError(t, err)
		job, err = c.JobGet(ctx, parsed)
		require.NoError(t, err, "the token names the same job")
		require.Equal(t, jobs.StateCancelled, job.State)

		res, err := c.JobRetry(ctx, &docket.JobRetryParams{JobFilter: docket.JobFilter{JobIDs: []docket.JobID{s.JobID}}})
		require.NoError(t, err)
		require.Len(t, res, 1)
		require.NoError(t, res[0].Err)
		job, err = c.JobGet(ctx, s.JobID)
		require.NoError(t, err)
		require.Equal(t, jobs.StateAvailable, job.State, "retried")
	}
	// The string of a foreign id names no job: the typed id does.
	_, err = c.JobGet(ctx, docket.StringJobID(page.Jobs[0].ID))
	require.ErrorIs(t, err, docket.ErrJobNotFound)
	_, err = docket.ParseJobID("@!")
	require.Error(t, err)
}

// A string-id job whose id is the display form of another job's id
// (`{"$numberInt":"7"}` for _id 7) is never acted on through the other
// job: JobIDOf(job) of the job JobGet returned is its stored id.
func TestJobIDOfNeverNamesTheDisplayFormsJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	c, err := docket.NewClient(db, docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	now := time.Now()
	display := `{"$numberInt":"7"}`
	for _, id := range []any{int32(7), display} {
		_, err := db.Collection(docket.DefaultCollection).InsertOne(ctx, bson.M{
			"_id": id, "kind": "greet", "args": bson.M{}, "state": "available", "queue": "default",
			"runAt": now.Add(time.Hour), "attempt": 0, "maxAttempts": 5, "createdAt": now, "updatedAt": now,
		})
		require.NoError(t, err)
	}
	seven := docket.JobIDOf(&jobs.Job{StoredID: bson.RawValue{Type: bson.TypeInt32, Value: []byte{7, 0, 0, 0}}})
	job, err := c.JobGet(ctx, seven)
	require.NoError(t, err)
	require.Equal(t, display, job.ID)

	out, err := c.JobCancel(ctx, docket.JobIDOf(job))
	require.NoError(t, err)
	require.Equal(t, docket.JobCancelled, out)
	other, err := c.JobGet(ctx, docket.StringJobID(display))
	require.NoError(t, err)
	require.Equal(t, jobs.StateAvailable, other.State, "the string-id job is left alone")
	require.True(t, docket.JobIDOf(other).Equal(docket.StringJobID(display)))
	job, err = c.JobGet(ctx, seven)
	require.NoError(t, err)
	require.Equal(t, jobs.StateCancelled, job.State)

	_, err = c.JobGet(ctx, docket.JobID{})
	require.ErrorIs(t, err, docket.ErrJobNotFound)
	_, err = c.JobCancel(ctx, docket.JobID{})
	require.ErrorIs(t, err, docket.ErrJobNotFound)
}
