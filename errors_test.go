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

// A workflow whose task id a plain job holds is refused with
// ErrWorkflowIDTaken.
func TestWorkflowIDTakenIsDocketsName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
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

// JobRetry and JobDelete say, with docket's own errors, why they leave a
// job alone; none of them says the state changed (asking again would not
// act).
func TestJobActionsSayWhyTheyLeaveAJobAlone(t *testing.T) {
	for _, tc := range []struct {
		name string
		// job makes the job acted on.
		job    func(t *testing.T, ctx context.Context, c *docket.Client, db *mongo.Database) docket.JobID
		delete bool
		want   error
	}{
		{"retry of a finished job whose unique key an unfinished job holds", uniqueKeyHeld, false, docket.ErrUniqueKeyHeld},
		{"delete of a parent others wait for", func(t *testing.T, ctx context.Context, c *docket.Client, _ *mongo.Database) docket.JobID {
			return parentAndChild(t, ctx, c)[0]
		}, true, docket.ErrHasDependents},
		{"retry of a child waiting for its parent", func(t *testing.T, ctx context.Context, c *docket.Client, _ *mongo.Database) docket.JobID {
			return parentAndChild(t, ctx, c)[1]
		}, false, docket.ErrWaitingForParents},
		{"retry of a workflow's gate", func(t *testing.T, ctx context.Context, c *docket.Client, _ *mongo.Database) docket.JobID {
			wf := docket.NewWorkflow("wf")
			wf.Add("a", GreetArgs{Name: "a"}, nil)
			res, err := c.InsertWorkflow(ctx, wf)
			require.NoError(t, err)
			return docket.StringJobID(res.ID)
		}, false, docket.ErrWorkflowGate},
		{"retry of a job in a state docket does not know", unknownState, false, docket.ErrUnknownState},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testdb.NewDB(t)
			c, err := docket.NewClient(db, docket.Config{Logger: zaptest.NewLogger(t)})
			require.NoError(t, err)
			f := docket.JobFilter{JobIDs: []docket.JobID{tc.job(t, ctx, c, db)}}
			var res []docket.JobActionResult
			if tc.delete {
				res, err = c.JobDelete(ctx, &docket.JobDeleteParams{JobFilter: f, Force: true})
			} else {
				res, err = c.JobRetry(ctx, &docket.JobRetryParams{JobFilter: f})
			}
			require.NoError(t, err)
			require.Len(t, res, 1)
			require.ErrorIs(t, res[0].Err, tc.want)
			require.NotErrorIs(t, res[0].Err, docket.ErrStateChanged)
		})
	}
}

// uniqueKeyHeld makes a cancelled job whose unique key another job took
// since.
func uniqueKeyHeld(t *testing.T, ctx context.Context, c *docket.Client, _ *mongo.Database) docket.JobID {
	opts := &docket.InsertOpts{UniqueKey: "k", Delay: time.Hour}
	first, err := c.Insert(ctx, GreetArgs{Name: "a"}, opts)
	require.NoError(t, err)
	_, err = c.JobCancel(ctx, first.JobID())
	require.NoError(t, err)
	second, err := c.Insert(ctx, GreetArgs{Name: "b"}, opts)
	require.NoError(t, err)
	require.False(t, second.Duplicate, "the cancelled job freed the key")
	return first.JobID()
}

// parentAndChild inserts a parent that waits an hour and a child that
// waits for it, and returns their ids.
func parentAndChild(t *testing.T, ctx context.Context, c *docket.Client) [2]docket.JobID {
	parent, err := c.Insert(ctx, GreetArgs{Name: "parent"}, &docket.InsertOpts{Delay: time.Hour})
	require.NoError(t, err)
	child, err := c.Insert(ctx, GreetArgs{Name: "child"}, &docket.InsertOpts{After: []string{parent.ID}})
	require.NoError(t, err)
	return [2]docket.JobID{parent.JobID(), child.JobID()}
}

// unknownState writes, as another app would, a job in a state docket does
// not know, which JobCancel refuses with ErrUnknownState.
func unknownState(t *testing.T, ctx context.Context, c *docket.Client, db *mongo.Database) docket.JobID {
	_, err := db.Collection(docket.DefaultCollection).InsertOne(ctx, bson.M{
		"_id": "odd", "kind": "greet", "queue": "default", "args": bson.M{}, "state": "paused", "runAt": time.Now(),
	})
	require.NoError(t, err)
	_, err = c.JobCancel(ctx, docket.StringJobID("odd"))
	require.ErrorIs(t, err, docket.ErrUnknownState)
	return docket.StringJobID("odd")
}
