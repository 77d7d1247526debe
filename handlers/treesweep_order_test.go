package handlers_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TestTreeSweepRemovesTombstonesAfterTheirNodesDocuments: MongoDB applies a
// deleteMany one document at a time while other clients read. The
// sweeper removes, below the oldest kept version, a removed node's older
// documents and its tombstone; had it removed the tombstone first (or in
// the same deleteMany, where the server may take it first), a reader
// between the two would take the node's older document as its newest and
// read a tree holding a node that was removed (the e2e tree test under
// devdb's --interleave saw exactly that: an item whose category was gone).
// Every tombstone must go in a delete sent after those of its node's older
// documents.
func TestTreeSweepRemovesTombstonesAfterTheirNodesDocuments(t *testing.T) {
	t.Parallel()
	b := treeSetup(t)
	h := b.handler(t, nil)
	publish := func(i int, items ...string) {
		nodes := catalog(t, fmt.Sprint(i), items...)
		require.NoError(t, h.Work(b.ctx, treeJob(t, fmt.Sprintf("j%d", i), handlers.PublishTreeArgs{Tree: "t", Nodes: nodes})))
	}
	publish(0, "x", "y", "z")
	publish(1, "x", "y", "z")
	publish(2, "x") // y and z removed: tombstones, their category cat-1 and cat-2 too
	publish(3, "x")
	publish(4, "x")

	type nodeRef struct {
		node    string
		version int64
		deleted bool
	}
	before := map[string]nodeRef{}
	cur, err := b.db.Collection(handlers.TreeNodesCollection).Find(b.ctx, bson.D{{Key: "tree", Value: "t"}})
	require.NoError(t, err)
	for cur.Next(b.ctx) {
		d := cur.Current
		del, _ := d.Lookup("deleted").BooleanOK()
		before[d.Lookup("_id").StringValue()] = nodeRef{d.Lookup("node").StringValue(), d.Lookup("version").AsInt64(), del}
	}
	require.NoError(t, cur.Err())

	db, deletedBy := monitoredDeletes(t, b.db.Name())
	_, err = handlers.SweepTrees(b.ctx, db, 2, b.log)
	require.NoError(t, err)
	by := deletedBy()

	tombs := 0
	for id, ref := range before {
		cmd, ok := by[id]
		if !ref.deleted || !ok {
			continue
		}
		tombs++
		for oid, o := range before {
			if o.node == ref.node && o.version < ref.version {
				ocmd, gone := by[oid]
				require.True(t, gone, "node %s: its document of version %d outlived its tombstone", ref.node, o.version)
				require.Less(t, ocmd, cmd, "node %s: its tombstone (version %d) was removed in the same delete as its document of version %d, or before it", ref.node, ref.version, o.version)
			}
		}
	}
	require.Positive(t, tombs, "the sweep removed no tombstone: the test proves nothing")
}

// monitoredDeletes returns database name on a client of the shared test
// server of the test's own that records, for each document id a delete
// command names in an $in, which delete command it was (from 0).
func monitoredDeletes(t *testing.T, name string) (*mongo.Database, func() map[string]int) {
	t.Helper()
	var mu sync.Mutex
	by, n := map[string]int{}, 0
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "delete" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		stmts, _ := e.Command.Lookup("deletes").ArrayOK()
		vals, _ := stmts.Values()
		for _, s := range vals {
			in, _ := s.Document().Lookup("q", "_id", "$in").ArrayOK()
			ids, _ := in.Values()
			for _, id := range ids {
				if sid, ok := id.StringValueOK(); ok {
					by[sid] = n
				}
			}
		}
		n++
	}}
	c, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(mon))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c.Database(name), func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return by
	}
}
