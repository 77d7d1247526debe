package queue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// wire is what a client sent and received: per command, the ids it
// sent (the values of its $in arrays), and the bytes of every reply.
type wire struct {
	mu         sync.Mutex
	ids        []int
	replyBytes int
}

func (w *wire) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			w.mu.Lock()
			w.ids = append(w.ids, inValues(bson.Raw(e.Command)))
			w.mu.Unlock()
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			w.mu.Lock()
			w.replyBytes += len(e.Reply)
			w.mu.Unlock()
		},
	}
}

func (w *wire) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ids, w.replyBytes = nil, 0
}

// sent returns the most ids one command sent and the ids all sent.
func (w *wire) sent() (most, all int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.ids {
		most, all = max(most, n), all+n
	}
	return most, all
}

// inValues counts the values of every $in array in d, at any depth.
func inValues(d bson.Raw) int {
	n := 0
	elems, _ := d.Elements()
	for _, e := range elems {
		v := e.Value()
		if arr, ok := v.ArrayOK(); ok {
			vals, _ := arr.Values()
			if e.Key() == "$in" {
				n += len(vals)
			}
			for _, x := range vals {
				if doc, ok := x.DocumentOK(); ok {
					n += inValues(doc)
				}
			}
		} else if doc, ok := v.DocumentOK(); ok {
			n += inValues(doc)
		}
	}
	return n
}

// sharedParents writes parents p-000… (available) and dependents
// d-0000… (blocked), each dependent after every parent, as a builder of
// another application would, in batches.
func sharedParents(t *testing.T, b bundle, parents, dependents int) {
	t.Helper()
	coll := store.Of(b.q).Collection()
	now := time.Now()
	var after bson.A
	var docs []any
	for i := range parents {
		id := fmt.Sprintf("p-%03d", i)
		after = append(after, id)
		docs = append(docs, bson.D{{Key: "_id", Value: id}, {Key: "kind", Value: "k"}, {Key: "state", Value: "available"},
			{Key: "createdAt", Value: now}})
	}
	for i := range dependents {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("d-%04d", i)}, {Key: "kind", Value: "k"}, {Key: "state", Value: "blocked"},
			{Key: "createdAt", Value: now.Add(time.Millisecond)}, {Key: "after", Value: after}, {Key: "waitingOn", Value: after}})
	}
	for len(docs) > 0 {
		n := min(len(docs), 500)
		_, err := coll.InsertMany(b.ctx, docs[:n])
		require.NoError(t, err)
		docs = docs[n:]
	}
}

// TestWorkflowGraphOfSharedParents: the graph of 2,000 dependents that
// each wait for the same 30 parents (60,000 edges) is read asking each
// job once, in commands of at most 500 ids, and what comes back is ids
// for the walk and the documents of one page, never every edge: the
// command sizes and reply bytes grow with the jobs, not with the edges.
func TestWorkflowGraphOfSharedParents(t *testing.T) {
	b := setup(t)
	const parents, dependents = 30, 2000
	sharedParents(t, b, parents, dependents)
	var w wire
	client, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(w.monitor()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	q, err := queue.New(client.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	one, err := store.Of(b.q).Collection().FindOne(b.ctx, bson.D{{Key: "_id", Value: "d-0000"}}).Raw()
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(b.ctx, 50*time.Second)
	defer cancel()
	v, viewErr := q.WorkflowTasks(ctx, queue.StringJobID("p-000"), queue.WorkflowPage{Limit: 500})
	most, all := w.sent()
	jobs := parents + dependents
	require.LessOrEqual(t, most, 500, "ids in one command")
	require.LessOrEqual(t, all, 4*jobs, "ids sent in all: each job asked for a bounded number of times, not once per edge")
	require.NoError(t, viewErr)
	t.Logf("a graph of %d jobs: %d commands, at most %d ids in one, %d in all, %d bytes of replies", jobs, len(w.ids), most, all, w.replyBytes)
	require.LessOrEqual(t, w.replyBytes, 500*len(one)+3*64*jobs, "replies: one page's documents, and ids")
	require.Len(t, v.Tasks, 500)
	require.Equal(t, jobs, v.Total)
	require.False(t, v.AtLeast)
	states := []queue.StateCount{{State: "blocked", N: dependents}, {State: "available", N: parents}}
	require.Equal(t, states, v.States)

	// The same jobs as a workflow: its last page, counted whole.
	_, err = store.Of(b.q).Collection().UpdateMany(b.ctx, bson.D{}, bson.D{{Key: "$set", Value: bson.D{{Key: "workflow", Value: "wf"}}}})
	require.NoError(t, err)
	w.reset()
	ctx, cancel = context.WithTimeout(b.ctx, 50*time.Second) // each read its own budget: a loaded machine
	defer cancel()
	v, err = q.WorkflowTasks(ctx, queue.StringJobID("wf"), queue.WorkflowPage{Offset: 2000, Limit: 500})
	require.NoError(t, err)
	require.Len(t, v.Tasks, jobs-2000)
	require.Equal(t, jobs, v.Total)
	require.Equal(t, states, v.States)
	require.LessOrEqual(t, w.replyBytes, (jobs-2000)*len(one)+4096, "replies: the page's documents and the counts")
}
