package docket_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap/zaptest"
)

// The errors the Client's docs name are docket's own names: an
// application tests for them without importing the engine.

// breakUniqueIndex inserts, as another app would, two unfinished jobs
// with one unique key: the unique index cannot be made.
func breakUniqueIndex(t *testing.T, db *mongo.Database) {
	t.Helper()
	for _, id := range []string{"a", "b"} {
		_, err := db.Collection(docket.DefaultCollection).InsertOne(context.Background(), bson.M{
			"_id": id, "kind": "greet", "queue": "default", "args": bson.M{}, "state": "available",
			"runAt": time.Now(), "uniqueKey": "twice",
		})
		require.NoError(t, err)
	}
}

// A Start whose index set-up the server refuses (two unfinished jobs
// another app wrote with one unique key) fails with ErrSetupRefused.
func TestStartRefusedSetupIsErrSetupRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	breakUniqueIndex(t, db)
	c, err := docket.NewClient(db, docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	docket.MustAddHandler(c, func(context.Context, *jobs.Job, GreetArgs) error { return nil }, jobs.KindOptions{})
	err = c.Start(ctx)
	require.ErrorIs(t, err, docket.ErrSetupRefused)
}

// JobRetry leaves alone a finished job whose unique key an unfinished job
// now holds, saying so with ErrUniqueKeyHeld.
func TestJobRetrySaysTheUniqueKeyIsHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	opts := &docket.InsertOpts{UniqueKey: "k", Delay: time.Hour}
	first, err := c.Insert(ctx, GreetArgs{Name: "a"}, opts)
	require.NoError(t, err)
	_, err = c.JobCancel(ctx, first.JobID())
	require.NoError(t, err)
	second, err := c.Insert(ctx, GreetArgs{Name: "b"}, opts)
	require.NoError(t, err)
	require.False(t, second.Duplicate, "the cancelled job freed the key")

	res, err := c.JobRetry(ctx, &docket.JobRetryParams{JobFilter: docket.JobFilter{JobIDs: []docket.JobID{first.JobID()}}})
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.ErrorIs(t, res[0].Err, docket.ErrUniqueKeyHeld)
}

// An insert into a full bounded queue fails with a *QueueFullError naming
// the queue and its capacity.
func TestInsertIntoAFullQueueIsAQueueFullError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.NoError(t, c.QueueSetCapacity(ctx, "small", 1, nil))
	_, err = c.Insert(ctx, GreetArgs{Name: "a"}, &docket.InsertOpts{Queue: "small"})
	require.NoError(t, err)
	refused, err := c.Insert(ctx, GreetArgs{Name: "b"}, &docket.InsertOpts{Queue: "small"})
	require.ErrorIs(t, err, docket.ErrQueueFull)
	var full *docket.QueueFullError
	require.True(t, errors.As(err, &full), "%v", err)
	require.Equal(t, "small", full.Queue)
	require.Equal(t, 1, full.Capacity)

	// The result comes with the error: its ID is the one to insert again.
	require.NotEmpty(t, refused.ID)
	require.NoError(t, c.QueueSetCapacity(ctx, "small", 2, nil))
	again, err := c.Insert(ctx, GreetArgs{Name: "b"}, &docket.InsertOpts{Queue: "small", ID: refused.ID})
	require.NoError(t, err)
	require.Equal(t, refused.ID, again.ID)
}

// JobDelete and JobRetry say why they leave a job of a dependency alone:
// a parent others wait for, a blocked child.
func TestJobActionsSayWhyDependenciesAreLeftAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	parent, err := c.Insert(ctx, GreetArgs{Name: "parent"}, &docket.InsertOpts{Delay: time.Hour})
	require.NoError(t, err)
	child, err := c.Insert(ctx, GreetArgs{Name: "child"}, &docket.InsertOpts{After: []string{parent.ID}})
	require.NoError(t, err)

	del, err := c.JobDelete(ctx, &docket.JobDeleteParams{JobFilter: docket.JobFilter{JobIDs: []docket.JobID{parent.JobID()}}, Force: true})
	require.NoError(t, err)
	require.Len(t, del, 1)
	require.ErrorIs(t, del[0].Err, docket.ErrHasDependents)

	retry, err := c.JobRetry(ctx, &docket.JobRetryParams{JobFilter: docket.JobFilter{JobIDs: []docket.JobID{child.JobID()}}})
	require.NoError(t, err)
	require.Len(t, retry, 1)
	require.ErrorIs(t, retry[0].Err, docket.ErrWaitingForParents)
}

// A workflow's gate is not retried, and a workflow whose task id a plain
// job holds is refused.
func TestWorkflowErrorsAreDocketsNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	wf := docket.NewWorkflow("wf")
	wf.Add("a", GreetArgs{Name: "a"}, nil)
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	retry, err := c.JobRetry(ctx, &docket.JobRetryParams{JobFilter: docket.JobFilter{JobIDs: []docket.JobID{docket.StringJobID(res.ID)}}})
	require.NoError(t, err)
	require.Len(t, retry, 1)
	require.ErrorIs(t, retry[0].Err, docket.ErrWorkflowGate)

	_, err = c.Insert(ctx, GreetArgs{Name: "squatter"}, &docket.InsertOpts{ID: "taken/a"})
	require.NoError(t, err)
	taken := docket.NewWorkflow("taken")
	taken.Add("a", GreetArgs{Name: "a"}, nil)
	_, err = c.InsertWorkflow(ctx, taken)
	require.ErrorIs(t, err, docket.ErrWorkflowIDTaken)
}

// An InsertMany that fails part-way says so for the call (an
// *InsertManyError with its counts) and for each job (ErrNotInserted).
func TestInsertManyIntoAFullQueueReportsEachJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.NoError(t, c.QueueSetCapacity(ctx, "small", 1, nil))
	opts := &docket.InsertOpts{Queue: "small"}
	res, err := c.InsertMany(ctx, []docket.InsertManyParams{{Args: GreetArgs{Name: "a"}, Opts: opts}, {Args: GreetArgs{Name: "b"}, Opts: opts}})
	var many *docket.InsertManyError
	require.True(t, errors.As(err, &many), "%v", err)
	require.Equal(t, 1, many.Inserted)
	require.Equal(t, 1, many.Refused)
	require.Len(t, res, 2)
	require.NoError(t, res[0].Err)
	require.ErrorIs(t, res[1].Err, docket.ErrNotInserted)
	require.ErrorIs(t, res[1].Err, docket.ErrQueueFull)
}

// An Insert that needs an index the server refuses to set up (two
// unfinished jobs another app wrote with one unique key) returns the job's
// id with ErrNotInserted, so it can be inserted again under that id.
func TestInsertWithRefusedSetupKeepsTheID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	breakUniqueIndex(t, db)
	c, err := docket.NewClient(db, docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	res, err := c.Insert(ctx, GreetArgs{Name: "x"}, &docket.InsertOpts{UniqueKey: "k"})
	require.ErrorIs(t, err, docket.ErrSetupRefused)
	require.ErrorIs(t, res.Err, docket.ErrNotInserted)
	require.NotEmpty(t, res.ID)

	_, err = db.Collection(docket.DefaultCollection).DeleteOne(ctx, bson.M{"_id": "b"})
	require.NoError(t, err)
	again, err := c.Insert(ctx, GreetArgs{Name: "x"}, &docket.InsertOpts{ID: res.ID, UniqueKey: "k"})
	require.NoError(t, err)
	require.Equal(t, res.ID, again.ID)
}

// A job another app wrote with a state docket does not know is refused by
// JobCancel and left alone by JobRetry, both with ErrUnknownState.
func TestJobActionsOnAnUnknownStateAreErrUnknownState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	_, err := db.Collection(docket.DefaultCollection).InsertOne(ctx, bson.M{
		"_id": "odd", "kind": "greet", "queue": "default", "args": bson.M{}, "state": "paused", "runAt": time.Now(),
	})
	require.NoError(t, err)
	c, err := docket.NewClient(db, docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	_, err = c.JobCancel(ctx, docket.StringJobID("odd"))
	require.ErrorIs(t, err, docket.ErrUnknownState)
	res, err := c.JobRetry(ctx, &docket.JobRetryParams{JobFilter: docket.JobFilter{JobIDs: []docket.JobID{docket.StringJobID("odd")}}})
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.ErrorIs(t, res[0].Err, docket.ErrUnknownState)
	require.NotErrorIs(t, res[0].Err, docket.ErrStateChanged)
}
