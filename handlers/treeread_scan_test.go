package handlers_test

import (
	"errors"
	"testing"

	"github.com/docketq/docket/handlers"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestTreeReadScanSpanningTheSweepersRemoval: a MongoDB cursor is not a
// snapshot. A read's scan meets an old document of a node that a later
// version removed, the sweeper then removes that document and, last, the
// node's tombstone, and the scan reaches the tombstone's place after its
// removal: the read has the node's old document and no tombstone. The
// reader notices that a document it took is gone and reads again, so it
// never returns the removed node. devdb's cursors are snapshots, so the
// scan is made to meet this interleaving: the sweep runs when the scan
// meets the removed node's first document, and from then on the scan drops
// every document deleted before it reached it, as MongoDB's does.
func TestTreeReadScanSpanningTheSweepersRemoval(t *testing.T) {
	b := treeSetup(t)
	h := b.handler(t, nil)
	require.NoError(t, h.Work(b.ctx, treeJob(t, "j1", handlers.PublishTreeArgs{Tree: "t", Nodes: catalog(t, "v1", "x", "y")})))
	// y and its category cat-1 removed: tombstones at version 2.
	require.NoError(t, h.Work(b.ctx, treeJob(t, "j2", handlers.PublishTreeArgs{Tree: "t", Nodes: catalog(t, "v2", "x")})))
	v3 := catalog(t, "v3", "x")
	require.NoError(t, h.Work(b.ctx, treeJob(t, "j3", handlers.PublishTreeArgs{Tree: "t", Nodes: v3})))

	nodes := b.db.Collection(handlers.TreeNodesCollection)
	removed := map[string]bool{"y": true, "cat-1": true}
	swept, droppedTombs := false, 0
	handlers.SetTreeScanMet(func(d bson.Raw) bool {
		node, _ := d.Lookup("node").StringValueOK()
		if !swept {
			if removed[node] {
				// Met before its removal: the sweeper keeps only v3 now.
				swept = true
				n, err := handlers.SweepTrees(b.ctx, b.db, 1, b.log)
				require.NoError(t, err)
				require.Positive(t, n)
			}
			return true
		}
		err := nodes.FindOne(b.ctx, bson.D{{Key: "_id", Value: d.Lookup("_id")}}).Err()
		if errors.Is(err, mongo.ErrNoDocuments) {
			if tomb, _ := d.Lookup("deleted").BooleanOK(); tomb && removed[node] {
				droppedTombs++
			}
			return false
		}
		require.NoError(t, err)
		return true
	})
	t.Cleanup(func() { handlers.SetTreeScanMet(nil) })

	got, err := handlers.ReadTree(b.ctx, b.db, "t", 0)
	require.NoError(t, err)
	require.True(t, swept, "the scan met no document of a removed node: the test proves nothing")
	require.Positive(t, droppedTombs, "the scan reached no removed tombstone after the sweep: the test proves nothing")
	require.Equal(t, int64(3), got.Version)
	requireSameTree(t, v3, got.Nodes)
}
