package docket_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestWaitIdleCursorKilledIsNotIdle: MongoDB can kill a cursor and answer
// its getMore with CursorNotFound (43). WaitIdle reads every blocked job;
// here 140 wait on a parent due in an hour (nothing moves them now), and
// the 10 inserted after them are being linked (they move now), beyond the
// first batch (101) of the read, on a devdb that kills every cursor at its
// first getMore. WaitIdle must not take the first batch for all of them
// and report the queue idle: it returns the server's error.
func TestWaitIdleCursorKilledIsNotIdle(t *testing.T) {
	db := testdb.CursorKilledDB(t)
	ctx := context.Background()
	client, err := docket.NewClient(db, docket.Config{})
	require.NoError(t, err)
	now := time.Now()
	docs := []any{bson.D{
		{Key: "_id", Value: "parent"}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "default"},
		{Key: "state", Value: jobs.StateAvailable}, {Key: "runAt", Value: now.Add(time.Hour)},
	}}
	for i := range 150 {
		d := bson.D{
			{Key: "_id", Value: fmt.Sprintf("blocked-%03d", i)}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "default"},
			{Key: "state", Value: jobs.StateBlocked}, {Key: "runAt", Value: now},
			{Key: "after", Value: bson.A{"parent"}}, {Key: "waitingOn", Value: bson.A{"parent"}},
		}
		if i >= 140 {
			d = append(d, bson.E{Key: store.LinkingField, Value: true})
		}
		docs = append(docs, d)
	}
	_, err = store.Of(client.Queue()).Collection().InsertMany(ctx, docs)
	require.NoError(t, err)

	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = client.WaitIdle(wctx, docket.WaitParams{})
	testdb.RequireCursorKilled(t, err)
}
