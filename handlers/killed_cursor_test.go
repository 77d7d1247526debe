package handlers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// TestTreeReadCursorKilledIsAnError: MongoDB can kill a cursor and answer
// its getMore with CursorNotFound (43). A tree of more nodes than a find's
// first batch (101), read from a devdb that kills every cursor at its
// first getMore: the read must fail, never return the first batch's nodes
// as the tree (a reader would see a tree no publish wrote), and a publish
// over it must fail too rather than write a version computed from part of
// the tree.
func TestTreeReadCursorKilledIsAnError(t *testing.T) {
	ctx := context.Background()
	db := testdb.CursorKilledDB(t)
	q, err := queue.New(db, queue.Config{RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(ctx))
	require.NoError(t, handlers.Setup(ctx, db))
	b := &treeBundle{ctx: ctx, db: db, q: q, log: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))}
	h := b.handler(t, nil)

	items := make([]string, 150)
	for i := range items {
		items[i] = fmt.Sprintf("item-%03d", i)
	}
	require.NoError(t, h.Work(ctx, treeJob(t, "j0", handlers.PublishTreeArgs{Tree: "t", Nodes: catalog(t, "0", items...)})))

	got, err := handlers.ReadTree(ctx, db, "t", 0)
	testdb.RequireCursorKilled(t, err)
	require.Nil(t, got)

	err = h.Work(ctx, treeJob(t, "j1", handlers.PublishTreeArgs{Tree: "t", Nodes: catalog(t, "1", items[:10]...)}))
	testdb.RequireCursorKilled(t, err)
	published, err := db.Collection(handlers.TreesCollection).CountDocuments(ctx, map[string]any{"_id": "t", "published": 1})
	require.NoError(t, err)
	require.EqualValues(t, 1, published, "the publish over a cut read published nothing")
}
