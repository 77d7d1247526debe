package handlers_test

import (
	"fmt"
	"testing"

	"github.com/docketq/docket/handlers"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestTreeSweepAfterTrimWriteConcernErrorRemovesSuperseded: on MongoDB a
// write can be applied and acknowledged with a writeConcernError
// (WriteConcernFailed, 64), or applied with its reply lost; either way the
// sweeper's pass stops with an error right after its trim of a tree's
// versions (the update of versions and minKept) was applied, before it
// removed the node documents the trim made useless; a refused delete, or a
// crash, stops it there too. The chaos run under devdb's --faults left a
// tree so (seed 4, a trim with a writeConcernError, then NotWritablePrimary
// on the removal). The next pass finds the versions already trimmed to
// keep and must still remove those documents, not leave them until the
// tree is published again, which may be never.
func TestTreeSweepAfterTrimWriteConcernErrorRemovesSuperseded(t *testing.T) {
	t.Parallel()
	b := treeSetup(t)
	h := b.handler(t, nil)
	var last []handlers.TreeNode
	for i := range 4 { // every node rewritten by every version
		last = catalog(t, fmt.Sprint(i), "x", "y")
		require.NoError(t, h.Work(b.ctx, treeJob(t, fmt.Sprintf("j%d", i), handlers.PublishTreeArgs{Tree: "t", Nodes: last})))
	}
	minKept := applyTrimOnly(t, b, "t", 2)
	require.Positive(t, docsBelow(t, b, "t", minKept), "the trim alone removes nothing")

	_, err := handlers.SweepTrees(b.ctx, b.db, 2, b.log)
	require.NoError(t, err)
	require.Zero(t, docsBelow(t, b, "t", minKept), "the next pass removes what the trimmed versions needed")
	got, err := handlers.ReadTree(b.ctx, b.db, "t", 0)
	require.NoError(t, err)
	requireSameTree(t, last, got.Nodes)
	_, err = handlers.ReadTree(b.ctx, b.db, "t", minKept)
	require.NoError(t, err, "the oldest kept version stays readable")
	n, err := handlers.SweepTrees(b.ctx, b.db, 2, b.log)
	require.NoError(t, err)
	require.Zero(t, n, "a pass after a finished one has nothing to do")
}

// applyTrimOnly applies, to tree, the one write of the sweeper's trim to
// keep versions (sweepTree's step 2) as the server applies it before its
// reply fails, and returns the new minKept.
func applyTrimOnly(t *testing.T, b *treeBundle, tree string, keep int) int64 {
	t.Helper()
	var st struct {
		Versions []bson.Raw `bson:"versions"`
	}
	trees := b.db.Collection(handlers.TreesCollection)
	require.NoError(t, trees.FindOne(b.ctx, bson.D{{Key: "_id", Value: tree}}).Decode(&st))
	require.Greater(t, len(st.Versions), keep)
	kept := st.Versions[len(st.Versions)-keep:]
	minKept := kept[0].Lookup("v").Int64()
	var trimmed, trimmedJobs bson.A
	for _, v := range st.Versions[:len(st.Versions)-keep] {
		trimmed = append(trimmed, v.Lookup("v").Int64())
		trimmedJobs = append(trimmedJobs, v.Lookup("job").StringValue())
	}
	// Its documents stop being drafts first, as the sweeper does.
	_, err := b.db.Collection(handlers.TreeNodesCollection).UpdateMany(b.ctx,
		bson.D{{Key: "tree", Value: tree}, {Key: "version", Value: bson.D{{Key: "$in", Value: trimmed}}}, {Key: "draft", Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "draft", Value: ""}}}})
	require.NoError(t, err)
	_, err = trees.UpdateOne(b.ctx, bson.D{{Key: "_id", Value: tree}}, bson.D{
		{Key: "$set", Value: bson.D{{Key: "versions", Value: kept}, {Key: "minKept", Value: minKept}}},
		{Key: "$addToSet", Value: bson.D{{Key: "jobs", Value: bson.D{{Key: "$each", Value: trimmedJobs}}}}},
	})
	require.NoError(t, err)
	return minKept
}

// docsBelow counts the node documents of tree below minKept. Every node
// of the test's tree is rewritten by every version, so each has a document
// at minKept and a reader needs none below it.
func docsBelow(t *testing.T, b *treeBundle, tree string, minKept int64) int64 {
	t.Helper()
	n, err := b.db.Collection(handlers.TreeNodesCollection).CountDocuments(b.ctx,
		bson.D{{Key: "tree", Value: tree}, {Key: "version", Value: bson.D{{Key: "$lt", Value: minKept}}}})
	require.NoError(t, err)
	return n
}

// TestTreeSweptToOfAnotherType: sweptTo is the sweep's own record; when
// another app wrote it with another type, the tree is still docket's. The
// sweep takes it for none, redoes its removal and writes it anew, and a
// publish, which never reads it, is not refused.
func TestTreeSweptToOfAnotherType(t *testing.T) {
	t.Parallel()
	b := treeSetup(t)
	h := b.handler(t, nil)
	for i := range 4 {
		require.NoError(t, h.Work(b.ctx, treeJob(t, fmt.Sprintf("j%d", i), handlers.PublishTreeArgs{Tree: "t", Nodes: catalog(t, fmt.Sprint(i), "x", "y")})))
	}
	minKept := applyTrimOnly(t, b, "t", 2)
	trees := b.db.Collection(handlers.TreesCollection)
	setSweptTo := func(v any) {
		_, err := trees.UpdateOne(b.ctx, bson.D{{Key: "_id", Value: "t"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "sweptTo", Value: v}}}})
		require.NoError(t, err)
	}
	setSweptTo("x")

	_, err := handlers.SweepTrees(b.ctx, b.db, 2, b.log)
	require.NoError(t, err)
	require.Zero(t, docsBelow(t, b, "t", minKept), "the sweep redoes the removal")
	var st struct {
		SweptTo any `bson:"sweptTo"`
	}
	require.NoError(t, trees.FindOne(b.ctx, bson.D{{Key: "_id", Value: "t"}}).Decode(&st))
	require.Equal(t, minKept, st.SweptTo, "and records it anew")

	setSweptTo(bson.D{{Key: "a", Value: 1}})
	last := catalog(t, "4", "x", "y")
	require.NoError(t, h.Work(b.ctx, treeJob(t, "j4", handlers.PublishTreeArgs{Tree: "t", Nodes: last})))
	got, err := handlers.ReadTree(b.ctx, b.db, "t", 0)
	require.NoError(t, err)
	requireSameTree(t, last, got.Nodes)
}
