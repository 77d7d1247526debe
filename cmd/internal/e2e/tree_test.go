package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
)

// labelledTree is publish i's tree: every node carries the label i, so a
// read that mixed two publishes shows it.
func labelledTree(i int, rng *rand.Rand) []handlers.TreeNode {
	label := func(extra ...bson.E) bson.Raw {
		raw, err := bson.Marshal(append(bson.D{{Key: "label", Value: int64(i)}}, extra...))
		if err != nil {
			panic(err)
		}
		return raw
	}
	nodes := []handlers.TreeNode{{ID: "root", Data: label()}}
	for c := range 1 + rng.IntN(3) {
		cat := fmt.Sprintf("cat-%d", c)
		nodes = append(nodes, handlers.TreeNode{ID: cat, Parent: "root", Data: label()})
		for k := range rng.IntN(5) {
			item := fmt.Sprintf("%s-item-%d", cat, k)
			nodes = append(nodes, handlers.TreeNode{ID: item, Parent: cat, Data: label(bson.E{Key: "price", Value: int64(rng.IntN(1000))})})
		}
	}
	return nodes
}

func sameNodes(want, got []handlers.TreeNode) bool {
	if len(want) != len(got) {
		return false
	}
	idx := map[string]handlers.TreeNode{}
	for _, n := range got {
		idx[n.ID] = n
	}
	for _, n := range want {
		g, ok := idx[n.ID]
		if !ok || g.Parent != n.Parent || string(g.Data) != string(n.Data) {
			return false
		}
	}
	return true
}

// TestTreeReadersSeeWholeVersionsWhileWorkersDie: three worker processes
// publish versions of one tree while one of them is SIGKILLed every second
// or so (and replaced) and another is SIGSTOPped past its lease; readers in
// this process read all the while, with the sweeper trimming old versions.
// Every read is exactly one published tree, and versions never go back.
func TestTreeReadersSeeWholeVersionsWhileWorkersDie(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	ctx := context.Background()
	must(t, "set up the handlers", func() error { return handlers.Setup(ctx, db) })
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	const publishes = 30
	trees := make([][]handlers.TreeNode, publishes)
	ids := make([]string, publishes)
	for i := range trees {
		trees[i] = labelledTree(i, rng)
	}

	workers := make([]*proc, 3)
	for i := range workers {
		workers[i] = startWorker(t, db, fmt.Sprintf("worker-%d", i), fastWorker...)
	}
	var stop atomic.Bool
	var reads atomic.Int64
	var problems sync.Map
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Go(func() {
			last := int64(0)
			for !stop.Load() {
				got, err := handlers.ReadTree(ctx, db, "catalog", 0)
				if err != nil {
					// A failure reply is an error, never a wrong tree: the
					// reader reads again, as an app does.
					if !strings.Contains(err.Error(), handlers.ErrTreeNotFound.Error()) && !testdb.Transient(err) {
						problems.Store(fmt.Sprintf("reader %d: %v", r, err), true)
					}
					continue
				}
				reads.Add(1)
				if got.Version < last {
					problems.Store(fmt.Sprintf("reader %d: version %d after %d", r, got.Version, last), true)
				}
				last = got.Version
				i := int(bson.Raw(got.Nodes[0].Data).Lookup("label").Int64())
				if i < 0 || i >= publishes || !sameNodes(trees[i], got.Nodes) {
					problems.Store(fmt.Sprintf("reader %d: version %d is not publish %d's tree", r, got.Version, i), true)
				}
			}
		})
	}
	wg.Go(func() {
		for !stop.Load() {
			if _, err := handlers.SweepTrees(ctx, db, 2, zap.NewNop()); err != nil && !testdb.Transient(err) {
				problems.Store("sweeper: "+err.Error(), true)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	// Enqueue in waves while the workers are killed and stalled.
	kills, stalls := 0, 0
	for i := range trees {
		ids[i] = enqueue(t, q, handlers.PublishTreeKind, handlers.PublishTreeArgs{Tree: "catalog", Nodes: trees[i]}, queue.InsertOpts{}).ID
		if i%5 == 4 {
			k := rng.IntN(len(workers))
			workers[k].signal(syscall.SIGKILL)
			workers[k].wait(10 * time.Second)
			workers[k] = startWorker(t, db, fmt.Sprintf("worker-%d-%d", k, i), fastWorker...)
			kills++
		}
		if i == publishes/2 {
			w := workers[(rng.IntN(len(workers)))]
			w.signal(syscall.SIGSTOP)
			time.Sleep(4 * time.Second) // twice the lease: its jobs go to others
			w.signal(syscall.SIGCONT)
			stalls++
		}
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
	}
	for i, id := range ids {
		waitJob(t, q, id, 3*time.Minute, "succeeded", inState(jobs.StateSucceeded))
		_ = i
	}
	stop.Store(true)
	wg.Wait()
	problems.Range(func(k, _ any) bool { t.Error(k); return true })
	require.Positive(t, reads.Load())
	t.Logf("%d reads, each one whole published tree; %d publishes, %d SIGKILLs, %d SIGSTOP past the lease", reads.Load(), publishes, kills, stalls)

	// The published tree is the one of the publish that completed last.
	var got *handlers.Tree
	must(t, "read the tree", func() (err error) { got, err = handlers.ReadTree(ctx, db, "catalog", 0); return err })
	i := int(bson.Raw(got.Nodes[0].Data).Lookup("label").Int64())
	require.True(t, sameNodes(trees[i], got.Nodes))
	for _, w := range workers {
		w.signal(syscall.SIGTERM)
		require.Equal(t, 0, w.wait(time.Minute))
	}
}

// TestTreeCommands: `enqueue publish` from a file, a worker publishes it,
// `enqueue tree-show` prints it; bad trees are refused naming the problem.
func TestTreeCommands(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	bin := enqueueBinary(t)
	file := filepath.Join(t.TempDir(), "tree.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"nodes": [
		{"id": "root", "data": {"title": "Shop"}},
		{"id": "fruit", "parent": "root", "data": {"title": "Fruit"}},
		{"id": "apple", "parent": "fruit", "data": {"price": {"$numberLong": "120"}}}
	]}`), 0o600))
	enq := &operator{t: t, bin: bin, db: db}
	out, stderr, code := enq.run("publish", "--tree", "shop", "--file", file)
	require.Equal(t, 0, code, stderr)
	id := strings.TrimSpace(out)
	w := startWorker(t, db, "worker", fastWorker...)
	waitJob(t, q, id, time.Minute, "succeeded", inState(jobs.StateSucceeded))

	out, stderr, code = enq.run("tree-show", "--tree", "shop")
	require.Equal(t, 0, code, stderr)
	var shown struct {
		Tree    string `json:"tree"`
		Version int64  `json:"version"`
		Nodes   []struct {
			ID     string         `json:"id"`
			Parent string         `json:"parent"`
			Data   map[string]any `json:"data"`
		} `json:"nodes"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown), out)
	require.Equal(t, "shop", shown.Tree)
	// The version published: 1, or later when an attempt that met a
	// failure reply took a version number first (it is never reused).
	var published *handlers.Tree
	must(t, "read the tree", func() (err error) {
		published, err = handlers.ReadTree(context.Background(), db, "shop", 0)
		return err
	})
	require.Equal(t, published.Version, shown.Version)
	require.Len(t, shown.Nodes, 3)
	require.Equal(t, "root", shown.Nodes[0].ID)

	for _, tc := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{`{"nodes": [{"id": "a"}, {"id": "b"}]}`, []string{"publish", "--tree", "t", "--file", "-"}, "second root"},
		{`{"nodes": [{"id": "a", "parent": "zz"}]}`, []string{"publish", "--tree", "t", "--file", "-"}, "no root"},
		{`{"nodes": [{"id": "a", "data": [1]}]}`, []string{"publish", "--tree", "t", "--file", "-"}, "nodes[0].data"},
		{`{"nodez": []}`, []string{"publish", "--tree", "t", "--file", "-"}, "unknown field"},
		{``, []string{"publish", "--file", "-"}, "tree"},
		{``, []string{"tree-show", "--tree", "nope"}, "tree not found"},
		{``, []string{"tree-show", "--tree", "shop", "--version", "9"}, "tree version not found"},
	} {
		_, stderr, code := run(t, bin, db, nil, tc.stdin, tc.args...)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want, "%v", tc.args)
	}
	w.signal(syscall.SIGTERM)
	require.Equal(t, 0, w.wait(time.Minute))
}
