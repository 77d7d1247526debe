package docket_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/clientengine"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// insertBlockedOnLater inserts a parent due in an hour and n blocked jobs
// waiting on it (nothing moves them now), blocked-000 on; those from
// linkingFrom on are being linked (they move now).
func insertBlockedOnLater(t *testing.T, client *docket.Client, n, linkingFrom int) {
	t.Helper()
	now := time.Now()
	docs := []any{bson.D{
		{Key: "_id", Value: "parent"}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "default"},
		{Key: "state", Value: jobs.StateAvailable}, {Key: "runAt", Value: now.Add(time.Hour)},
	}}
	for i := range n {
		d := bson.D{
			{Key: "_id", Value: fmt.Sprintf("blocked-%03d", i)}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "default"},
			{Key: "state", Value: jobs.StateBlocked}, {Key: "runAt", Value: now},
			{Key: "after", Value: bson.A{"parent"}}, {Key: "waitingOn", Value: bson.A{"parent"}},
		}
		if i >= linkingFrom {
			d = append(d, bson.E{Key: store.LinkingField, Value: true})
		}
		docs = append(docs, d)
	}
	_, err := store.Of(clientengine.Part[*queue.Client](client)).Collection().InsertMany(context.Background(), docs)
	require.NoError(t, err)
}

// TestWaitIdleCursorKilledIsNotIdle: MongoDB can kill a cursor and answer
// its getMore with CursorNotFound (43). WaitIdle reads every blocked job;
// here 140 wait on a parent due in an hour (nothing moves them now), and
// the 10 inserted after them are being linked (they move now), beyond the
// first batch (101) of the read, on a devdb that kills every cursor at its
// first getMore. WaitIdle must not take the first batch for all of them
// and report the queue idle: it reads again until its context ends, and
// then returns the context's error with the last read's.
func TestWaitIdleCursorKilledIsNotIdle(t *testing.T) {
	db := testdb.CursorKilledDB(t)
	client, err := docket.NewClient(db, docket.Config{})
	require.NoError(t, err)
	insertBlockedOnLater(t, client, 150, 140)

	wctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err = client.WaitIdle(wctx, docket.WaitParams{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	testdb.RequireCursorKilled(t, err)
}

// TestWaitIdleReadsAgainAfterCursorKilled: a cursor MongoDB killed
// (CursorNotFound, 43) is a transient reply, as an election's are: an app
// waiting for idle reads again rather than fail. Here 150 blocked jobs wait
// on a parent due in an hour (the queue is idle), so WaitIdle's read needs
// a getMore, which devdb answers CursorNotFound; once the read met it, all
// but 50 are deleted, so a read fits in a first batch, and WaitIdle
// returns nil.
func TestWaitIdleReadsAgainAfterCursorKilled(t *testing.T) {
	killed := make(chan struct{}, 1)
	mon := &event.CommandMonitor{Failed: func(_ context.Context, e *event.CommandFailedEvent) {
		if e.CommandName == "getMore" {
			select {
			case killed <- struct{}{}:
			default:
			}
		}
	}}
	db := testdb.FaultyDBWith(t, "--faults cursorkill=1 --seed 1", options.Client().SetMonitor(mon))
	client, err := docket.NewClient(db, docket.Config{})
	require.NoError(t, err)
	insertBlockedOnLater(t, client, 150, 150)

	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- client.WaitIdle(wctx, docket.WaitParams{}) }()
	select {
	case <-killed:
	case <-wctx.Done():
		t.Fatal("WaitIdle's read never met a killed cursor")
	}
	_, err = db.Collection(store.Of(clientengine.Part[*queue.Client](client)).Collection().Name()).DeleteMany(context.Background(),
		bson.D{{Key: "_id", Value: bson.D{{Key: "$regex", Value: "^blocked-0"}}}})
	require.NoError(t, err)
	err = <-done
	require.NoError(t, err, "WaitIdle failed on a transient reply: %v", errors.Unwrap(err))
}

// TestWaitIdleGivesUpOnReadsThatKeepFailing: a read that fails the same
// transient way at every try (here every getMore is killed; on MongoDB a
// scan timing out at every try) is not read again forever: past
// FailingFor, WaitIdle returns the failure, long before its context ends.
func TestWaitIdleGivesUpOnReadsThatKeepFailing(t *testing.T) {
	db := testdb.CursorKilledDB(t)
	client, err := docket.NewClient(db, docket.Config{})
	require.NoError(t, err)
	insertBlockedOnLater(t, client, 150, 140)

	wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = client.WaitIdle(wctx, docket.WaitParams{FailingFor: 500 * time.Millisecond})
	require.Error(t, err)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	testdb.RequireCursorKilled(t, err)
}
