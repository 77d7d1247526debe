package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

type treeBundle struct {
	ctx context.Context
	db  *mongo.Database
	q   *queue.Client
	log *zap.Logger
}

func treeSetup(t *testing.T) *treeBundle {
	t.Helper()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(ctx))
	require.NoError(t, handlers.Setup(ctx, db))
	return &treeBundle{ctx: ctx, db: db, q: q, log: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))}
}

func (b *treeBundle) handler(t *testing.T, hook func(context.Context, string) error) jobs.Handler {
	t.Helper()
	reg := jobs.NewRegistry()
	require.NoError(t, handlers.Register(reg, handlers.Deps{DB: b.db, Queue: b.q, Logger: b.log, Hook: hook}))
	h, _, ok := reg.Lookup(handlers.PublishTreeKind)
	require.True(t, ok)
	return h
}

func treeJob(t *testing.T, id string, args handlers.PublishTreeArgs) *jobs.Job {
	t.Helper()
	raw, err := bson.Marshal(args)
	require.NoError(t, err)
	return &jobs.Job{ID: id, Kind: handlers.PublishTreeKind, Attempt: 1, Args: raw, LeaseToken: "lease-" + id}
}

func data(t *testing.T, kv ...any) bson.Raw {
	t.Helper()
	d := bson.D{}
	for i := 0; i < len(kv); i += 2 {
		d = append(d, bson.E{Key: kv[i].(string), Value: kv[i+1]})
	}
	raw, err := bson.Marshal(d)
	require.NoError(t, err)
	return raw
}

// catalog is a tree whose every node carries the publish's label, so that
// a read shows at once whether it mixes two publishes.
func catalog(t *testing.T, label string, items ...string) []handlers.TreeNode {
	nodes := []handlers.TreeNode{{ID: "root", Data: data(t, "label", label)}}
	for i, it := range items {
		cat := fmt.Sprintf("cat-%d", i%3)
		if !slices.ContainsFunc(nodes, func(n handlers.TreeNode) bool { return n.ID == cat }) {
			nodes = append(nodes, handlers.TreeNode{ID: cat, Parent: "root", Data: data(t, "label", label)})
		}
		nodes = append(nodes, handlers.TreeNode{ID: it, Parent: cat, Data: data(t, "label", label, "item", it)})
	}
	return nodes
}

func (b *treeBundle) nodeDocs(t *testing.T) int64 {
	t.Helper()
	n, err := b.db.Collection(handlers.TreeNodesCollection).CountDocuments(b.ctx, bson.D{})
	require.NoError(t, err)
	return n
}

func TestTreeArgsValidate(t *testing.T) {
	t.Parallel()
	n := func(id, parent string) handlers.TreeNode { return handlers.TreeNode{ID: id, Parent: parent} }
	for _, tc := range []struct {
		name  string
		args  handlers.PublishTreeArgs
		field string
		msg   string
	}{
		{"no tree", handlers.PublishTreeArgs{Nodes: []handlers.TreeNode{n("r", "")}}, "tree", "must be 1 to"},
		{"no nodes", handlers.PublishTreeArgs{Tree: "t"}, "nodes", "1 to 10000 nodes, not 0"},
		{"two roots", handlers.PublishTreeArgs{Tree: "t", Nodes: []handlers.TreeNode{n("a", ""), n("b", "")}}, "nodes[1].parent", "second root"},
		{"no root", handlers.PublishTreeArgs{Tree: "t", Nodes: []handlers.TreeNode{n("a", "b"), n("b", "a")}}, "nodes", "no root"},
		{"cycle", handlers.PublishTreeArgs{Tree: "t", Nodes: []handlers.TreeNode{n("r", ""), n("a", "b"), n("b", "a")}}, "nodes", "not reached from the root"},
		{"unknown parent", handlers.PublishTreeArgs{Tree: "t", Nodes: []handlers.TreeNode{n("r", ""), n("a", "zz")}}, "nodes[1].parent", `"zz" is not a node`},
		{"duplicate id", handlers.PublishTreeArgs{Tree: "t", Nodes: []handlers.TreeNode{n("r", ""), n("r", "r")}}, "nodes[1].id", "appears twice"},
		{"own parent", handlers.PublishTreeArgs{Tree: "t", Nodes: []handlers.TreeNode{n("r", ""), n("a", "a")}}, "nodes[1].parent", "its own parent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.args.Validate()
			var ae *jobs.ArgsError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, tc.field, ae.Field)
			require.ErrorContains(t, err, tc.msg)
		})
	}
	require.NoError(t, handlers.PublishTreeArgs{Tree: "t", Nodes: catalog(t, "x", "a", "b", "c", "d")}.Validate())
}

func TestTreePublishWritesOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	b := treeSetup(t)
	h := b.handler(t, nil)
	_, err := handlers.ReadTree(b.ctx, b.db, "shop", 0)
	require.ErrorIs(t, err, handlers.ErrTreeNotFound)

	v1 := catalog(t, "v1", "apple", "pear", "plum")
	require.NoError(t, h.Work(b.ctx, treeJob(t, "j1", handlers.PublishTreeArgs{Tree: "shop", Nodes: v1})))
	got, err := handlers.ReadTree(b.ctx, b.db, "shop", 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Version)
	require.Len(t, got.Nodes, len(v1))
	require.EqualValues(t, len(v1), b.nodeDocs(t))

	// Change one item, remove one, add one: three documents.
	v2 := slices.Clone(v1)
	v2 = slices.DeleteFunc(v2, func(n handlers.TreeNode) bool { return n.ID == "pear" })
	for i := range v2 {
		if v2[i].ID == "apple" {
			v2[i].Data = data(t, "label", "v1", "item", "apple", "price", 3)
		}
	}
	v2 = append(v2, handlers.TreeNode{ID: "fig", Parent: "cat-0", Data: data(t, "item", "fig")})
	require.NoError(t, h.Work(b.ctx, treeJob(t, "j2", handlers.PublishTreeArgs{Tree: "shop", Nodes: v2})))
	require.EqualValues(t, len(v1)+3, b.nodeDocs(t), "a change writes only the nodes that changed")
	got, err = handlers.ReadTree(b.ctx, b.db, "shop", 0)
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Version)
	requireSameTree(t, v2, got.Nodes)
	old, err := handlers.ReadTree(b.ctx, b.db, "shop", 1)
	require.NoError(t, err)
	requireSameTree(t, v1, old.Nodes)

	// The same job again (a retry) publishes nothing new.
	require.NoError(t, h.Work(b.ctx, treeJob(t, "j2", handlers.PublishTreeArgs{Tree: "shop", Nodes: v2})))
	got, err = handlers.ReadTree(b.ctx, b.db, "shop", 0)
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Version)
	_, err = handlers.ReadTree(b.ctx, b.db, "shop", 7)
	require.ErrorIs(t, err, handlers.ErrTreeVersionNotFound)
}

func requireSameTree(t *testing.T, want, got []handlers.TreeNode) {
	t.Helper()
	key := func(n handlers.TreeNode) string { return n.ID + "|" + n.Parent + "|" + bson.Raw(n.Data).String() }
	w, g := make([]string, len(want)), make([]string, len(got))
	for i, n := range want {
		if len(n.Data) == 0 {
			n.Data = bson.Raw{5, 0, 0, 0, 0}
		}
		w[i] = key(n)
	}
	for i, n := range got {
		if len(n.Data) == 0 {
			n.Data = bson.Raw{5, 0, 0, 0, 0}
		}
		g[i] = key(n)
	}
	require.ElementsMatch(t, w, g)
}

// TestTreeCrashAtEveryStep: a publish stopped after each of its writes and
// run again publishes once; a reader never sees the unpublished version.
func TestTreeCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"tree:allocate", "tree:nodes", "tree:publish"} {
		t.Run(step, func(t *testing.T) {
			b := treeSetup(t)
			v1 := catalog(t, "v1", "a", "b")
			require.NoError(t, b.handler(t, nil).Work(b.ctx, treeJob(t, "j1", handlers.PublishTreeArgs{Tree: "t", Nodes: v1})))
			v2 := catalog(t, "v2", "a", "c", "d")
			hook, fired := transferCrashAt(step)
			err := b.handler(t, hook).Work(b.ctx, treeJob(t, "j2", handlers.PublishTreeArgs{Tree: "t", Nodes: v2}))
			require.ErrorIs(t, err, errTransferCrash)
			require.True(t, fired.Load())
			got, err := handlers.ReadTree(b.ctx, b.db, "t", 0)
			require.NoError(t, err)
			if step == "tree:publish" {
				requireSameTree(t, v2, got.Nodes)
			} else {
				requireSameTree(t, v1, got.Nodes)
			}
			// A second attempt of the job.
			j := treeJob(t, "j2", handlers.PublishTreeArgs{Tree: "t", Nodes: v2})
			j.LeaseToken, j.Attempt = "second", 2
			require.NoError(t, b.handler(t, nil).Work(b.ctx, j))
			got, err = handlers.ReadTree(b.ctx, b.db, "t", 0)
			require.NoError(t, err)
			requireSameTree(t, v2, got.Nodes)
			var st struct {
				Versions []struct {
					Job string `bson:"job"`
				} `bson:"versions"`
			}
			require.NoError(t, b.db.Collection(handlers.TreesCollection).FindOne(b.ctx, bson.D{{Key: "_id", Value: "t"}}).Decode(&st))
			n := 0
			for _, v := range st.Versions {
				if v.Job == "j2" {
					n++
				}
			}
			require.Equal(t, 1, n, "the job published its tree once")
			// The sweeper removes the abandoned version, and reads stay whole.
			_, err = handlers.SweepTrees(b.ctx, b.db, 5, b.log)
			require.NoError(t, err)
			got, err = handlers.ReadTree(b.ctx, b.db, "t", 0)
			require.NoError(t, err)
			requireSameTree(t, v2, got.Nodes)
		})
	}
}

// TestTreeStalledPublisher: an attempt that stalls after writing its nodes,
// past its lease, resumes after another attempt of the job published: it
// publishes nothing more.
func TestTreeStalledPublisher(t *testing.T) {
	t.Parallel()
	b := treeSetup(t)
	v1 := catalog(t, "v1", "a", "b")
	require.NoError(t, b.handler(t, nil).Work(b.ctx, treeJob(t, "j0", handlers.PublishTreeArgs{Tree: "t", Nodes: v1})))
	v2 := catalog(t, "v2", "c")
	reached, resume := make(chan struct{}), make(chan struct{})
	stalled := b.handler(t, func(_ context.Context, s string) error {
		if s == "tree:nodes" {
			close(reached)
			<-resume
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- stalled.Work(b.ctx, treeJob(t, "j1", handlers.PublishTreeArgs{Tree: "t", Nodes: v2})) }()
	<-reached
	j := treeJob(t, "j1", handlers.PublishTreeArgs{Tree: "t", Nodes: v2})
	j.LeaseToken = "second"
	require.NoError(t, b.handler(t, nil).Work(b.ctx, j))
	v3 := catalog(t, "v3", "d", "e")
	require.NoError(t, b.handler(t, nil).Work(b.ctx, treeJob(t, "j3", handlers.PublishTreeArgs{Tree: "t", Nodes: v3})))
	close(resume)
	require.NoError(t, <-done)
	got, err := handlers.ReadTree(b.ctx, b.db, "t", 0)
	require.NoError(t, err)
	requireSameTree(t, v3, got.Nodes)
	require.Equal(t, int64(4), got.Version-0, "v1, v2 by the second attempt, the stalled attempt's abandoned version, v3")
}

// TestTreeReadsAreAlwaysWhole: readers read continuously while publishers
// publish (crashing at random steps) and the sweeper trims; every read is
// exactly one published tree.
func TestTreeReadsAreAlwaysWhole(t *testing.T) {
	t.Parallel()
	b := treeSetup(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	const publishes = 40
	// Each publish's tree is labelled with its index; its shape varies.
	trees := make([][]handlers.TreeNode, publishes)
	for i := range trees {
		var items []string
		for k := range 1 + rng.IntN(12) {
			items = append(items, fmt.Sprintf("item-%d", rng.IntN(20)+k*20))
		}
		trees[i] = catalog(t, fmt.Sprint(i), items...)
	}
	var hookRng sync.Mutex
	h := b.handler(t, func(ctx context.Context, s string) error {
		hookRng.Lock()
		defer hookRng.Unlock()
		if rng.Float64() < 0.2 {
			return fmt.Errorf("%w at %s", errTransferCrash, s)
		}
		return nil
	})
	var stop atomic.Bool
	var reads, versions atomic.Int64
	var wg sync.WaitGroup
	var errs sync.Map
	for r := range 4 {
		wg.Go(func() {
			seen := int64(0)
			for !stop.Load() {
				got, err := handlers.ReadTree(b.ctx, b.db, "t", 0)
				if errors.Is(err, handlers.ErrTreeNotFound) {
					continue
				}
				if err != nil {
					errs.Store(fmt.Sprintf("reader %d: %v", r, err), true)
					return
				}
				reads.Add(1)
				if got.Version < seen {
					errs.Store(fmt.Sprintf("reader %d: version went back from %d to %d", r, seen, got.Version), true)
				}
				seen = got.Version
				label := bson.Raw(got.Nodes[0].Data).Lookup("label").StringValue()
				var i int
				_, _ = fmt.Sscan(label, &i)
				if !sameTree(trees[i], got.Nodes) {
					errs.Store(fmt.Sprintf("reader %d: version %d is not the tree of publish %d", r, got.Version, i), true)
				}
			}
		})
	}
	wg.Go(func() {
		for !stop.Load() {
			if _, err := handlers.SweepTrees(b.ctx, b.db, 2, b.log); err != nil {
				errs.Store("sweeper: "+err.Error(), true)
				return
			}
		}
	})
	abandoned := 0
	for i, nodes := range trees {
		for attempt := 1; ; attempt++ {
			j := treeJob(t, fmt.Sprintf("p%d", i), handlers.PublishTreeArgs{Tree: "t", Nodes: nodes})
			j.LeaseToken = fmt.Sprintf("p%d-%d", i, attempt)
			err := h.Work(b.ctx, j)
			if err == nil {
				versions.Add(1)
				break
			}
			require.ErrorIs(t, err, errTransferCrash)
			if i < publishes-1 && i%4 == 1 { // this job dies: its version, if written, is never published
				hookRng.Lock()
				give := rng.IntN(2) == 0
				hookRng.Unlock()
				if give {
					abandoned++
					break
				}
			}
		}
	}
	t.Logf("%d publishes abandoned after a crash", abandoned)
	stop.Store(true)
	wg.Wait()
	errs.Range(func(k, _ any) bool { t.Error(k); return true })
	got, err := handlers.ReadTree(b.ctx, b.db, "t", 0)
	require.NoError(t, err)
	requireSameTree(t, trees[publishes-1], got.Nodes)
	require.Positive(t, reads.Load())
	t.Logf("%d whole reads checked over %d publishes", reads.Load(), versions.Load())
}

func sameTree(want, got []handlers.TreeNode) bool {
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

// TestTreeSweeperKeepsWhatReadersNeed: after many publishes the sweeper
// keeps the last versions readable and whole, removes the rest, and old
// versions are refused by name.
func TestTreeSweeperKeepsWhatReadersNeed(t *testing.T) {
	t.Parallel()
	b := treeSetup(t)
	h := b.handler(t, nil)
	var last []handlers.TreeNode
	for i := range 10 {
		// "stable" never changes: its one document must survive the sweep.
		last = append(catalog(t, fmt.Sprint(i), fmt.Sprintf("x%d", i)), handlers.TreeNode{ID: "stable", Parent: "root"})
		require.NoError(t, h.Work(b.ctx, treeJob(t, fmt.Sprintf("j%d", i), handlers.PublishTreeArgs{Tree: "t", Nodes: last})))
	}
	before := b.nodeDocs(t)
	n, err := handlers.SweepTrees(b.ctx, b.db, 2, b.log)
	require.NoError(t, err)
	require.Positive(t, n)
	require.Equal(t, before-int64(n), b.nodeDocs(t))
	got, err := handlers.ReadTree(b.ctx, b.db, "t", 0)
	require.NoError(t, err)
	requireSameTree(t, last, got.Nodes)
	_, err = handlers.ReadTree(b.ctx, b.db, "t", 9)
	require.NoError(t, err, "the last two versions are kept")
	_, err = handlers.ReadTree(b.ctx, b.db, "t", 3)
	require.ErrorIs(t, err, handlers.ErrTreeVersionNotFound)
	n, err = handlers.SweepTrees(b.ctx, b.db, 2, b.log)
	require.NoError(t, err)
	require.Zero(t, n, "a second sweep has nothing to do")
}

// TestTreeAbandonedVersionIsNeverRead: a publish that wrote its nodes and
// died leaves a version that no later publish may show, even one that does
// not touch the same nodes.
func TestTreeAbandonedVersionIsNeverRead(t *testing.T) {
	t.Parallel()
	b := treeSetup(t)
	v1 := catalog(t, "v1", "a", "b")
	require.NoError(t, b.handler(t, nil).Work(b.ctx, treeJob(t, "j1", handlers.PublishTreeArgs{Tree: "t", Nodes: v1})))
	changedA := slices.Clone(v1)
	for i := range changedA {
		if changedA[i].ID == "a" {
			changedA[i].Data = data(t, "label", "never published")
		}
	}
	hook, _ := transferCrashAt("tree:nodes")
	require.ErrorIs(t, b.handler(t, hook).Work(b.ctx, treeJob(t, "dies", handlers.PublishTreeArgs{Tree: "t", Nodes: changedA})), errTransferCrash)
	v3 := append(slices.Clone(v1), handlers.TreeNode{ID: "c", Parent: "root"})
	require.NoError(t, b.handler(t, nil).Work(b.ctx, treeJob(t, "j3", handlers.PublishTreeArgs{Tree: "t", Nodes: v3})))
	got, err := handlers.ReadTree(b.ctx, b.db, "t", 0)
	require.NoError(t, err)
	require.Equal(t, int64(3), got.Version)
	requireSameTree(t, v3, got.Nodes)
}

// TestTreeReadRacingTheSweeper: a read of a version whose documents the
// sweeper removes while the read is under way notices, and never returns
// what it read: a version asked for by number is reported gone, the latest
// is read again.
func TestTreeReadRacingTheSweeper(t *testing.T) {
	b := treeSetup(t)
	h := b.handler(t, nil)
	v1 := catalog(t, "v1", "a", "b")
	require.NoError(t, h.Work(b.ctx, treeJob(t, "j1", handlers.PublishTreeArgs{Tree: "t", Nodes: v1})))
	v2 := catalog(t, "v2", "c")
	require.NoError(t, h.Work(b.ctx, treeJob(t, "j2", handlers.PublishTreeArgs{Tree: "t", Nodes: v2})))
	var once sync.Once
	sweep := func() {
		once.Do(func() {
			// Meanwhile: v3 is published and the sweeper keeps only it.
			v3 := catalog(t, "v3", "d")
			require.NoError(t, h.Work(b.ctx, treeJob(t, "j3", handlers.PublishTreeArgs{Tree: "t", Nodes: v3})))
			n, err := handlers.SweepTrees(b.ctx, b.db, 1, b.log)
			require.NoError(t, err)
			require.Positive(t, n)
		})
	}
	handlers.SetAfterTreeRead(sweep)
	t.Cleanup(func() { handlers.SetAfterTreeRead(nil) })
	_, err := handlers.ReadTree(b.ctx, b.db, "t", 2)
	require.ErrorIs(t, err, handlers.ErrTreeVersionNotFound, "the version was removed while it was read")

	// Reading the latest: v4 is read, then v5 published and v4 swept; the
	// read starts again and returns v5.
	require.NoError(t, h.Work(b.ctx, treeJob(t, "j4", handlers.PublishTreeArgs{Tree: "t", Nodes: catalog(t, "v4", "e")})))
	var again sync.Once
	handlers.SetAfterTreeRead(func() {
		again.Do(func() {
			require.NoError(t, h.Work(b.ctx, treeJob(t, "j5", handlers.PublishTreeArgs{Tree: "t", Nodes: catalog(t, "v5", "f")})))
			_, err := handlers.SweepTrees(b.ctx, b.db, 1, b.log)
			require.NoError(t, err)
		})
	})
	got, err := handlers.ReadTree(b.ctx, b.db, "t", 0)
	require.NoError(t, err)
	require.Equal(t, "v5", bson.Raw(got.Nodes[0].Data).Lookup("label").StringValue(), "the latest, read again")
}

// TestTreeForeignTreeDocument: a tree document another app wrote with a
// field of another type ends the publish dead, naming the document, with no
// node written.
func TestTreeForeignTreeDocument(t *testing.T) {
	t.Parallel()
	b := treeSetup(t)
	_, err := b.db.Collection(handlers.TreesCollection).InsertOne(b.ctx, bson.D{{Key: "_id", Value: "t"}, {Key: "published", Value: "yesterday"}})
	require.NoError(t, err)
	err = b.handler(t, nil).Work(b.ctx, treeJob(t, "j1", handlers.PublishTreeArgs{Tree: "t", Nodes: catalog(t, "v1", "a")}))
	require.True(t, jobs.IsPermanent(err), "%v", err)
	require.ErrorContains(t, err, `tree "t": its document in trees is not docket's`)
	require.Zero(t, b.nodeDocs(t))
	_, err = handlers.ReadTree(b.ctx, b.db, "t", 0)
	require.Error(t, err)
}

// publishedState is what the tree's document says is published.
func (b *treeBundle) published(t *testing.T, tree string) (published int64, jobsOf []string) {
	t.Helper()
	var st struct {
		Published int64 `bson:"published"`
		Versions  []struct {
			Job string `bson:"job"`
		} `bson:"versions"`
	}
	require.NoError(t, b.db.Collection(handlers.TreesCollection).FindOne(b.ctx, bson.D{{Key: "_id", Value: tree}}).Decode(&st))
	for _, v := range st.Versions {
		jobsOf = append(jobsOf, v.Job)
	}
	return st.Published, jobsOf
}

// TestTreePublishOnceAfterSweep: attempt 1 publishes and loses its lease
// before the job is marked done; more publishes than the sweeper keeps
// follow, and a sweep trims attempt 1's version; attempt 2 of the job then
// publishes nothing: the newest version stays the tree.
func TestTreePublishOnceAfterSweep(t *testing.T) {
	t.Parallel()
	b := treeSetup(t)
	const keep = handlers.DefaultTreeKeep
	old := catalog(t, "old", "a", "b")
	hook, fired := transferCrashAt("tree:publish")
	err := b.handler(t, hook).Work(b.ctx, treeJob(t, "j1", handlers.PublishTreeArgs{Tree: "t", Nodes: old}))
	require.ErrorIs(t, err, errTransferCrash, "attempt 1 published, then lost its lease")
	require.True(t, fired.Load())
	var last []handlers.TreeNode
	for i := range keep + 1 {
		last = catalog(t, fmt.Sprintf("new%d", i), fmt.Sprintf("x%d", i))
		require.NoError(t, b.handler(t, nil).Work(b.ctx, treeJob(t, fmt.Sprintf("other%d", i), handlers.PublishTreeArgs{Tree: "t", Nodes: last})))
	}
	_, err = handlers.SweepTrees(b.ctx, b.db, keep, b.log)
	require.NoError(t, err)
	_, versionsJobs := b.published(t, "t")
	require.NotContains(t, versionsJobs, "j1", "the sweep trimmed attempt 1's version")
	newest, _ := b.published(t, "t")
	docs := b.nodeDocs(t)

	j := treeJob(t, "j1", handlers.PublishTreeArgs{Tree: "t", Nodes: old})
	j.LeaseToken, j.Attempt = "second", 2
	require.NoError(t, b.handler(t, nil).Work(b.ctx, j))
	published, _ := b.published(t, "t")
	require.Equal(t, newest, published, "attempt 2 published nothing")
	require.Equal(t, docs, b.nodeDocs(t), "attempt 2 wrote no node")
	got, err := handlers.ReadTree(b.ctx, b.db, "t", 0)
	require.NoError(t, err)
	requireSameTree(t, last, got.Nodes)
}

// TestTreeStalledPublisherAfterSweep: an attempt stalls after allocating
// its version, or after writing its nodes; a second attempt of the job
// publishes, then more publishes than the sweeper keeps (the first removes
// node b, which the stalled attempt's tree holds) and a sweep, which trims
// past the stalled version and drops b's documents, tombstone included.
// The stalled attempt resumes, finds its base moved, and publishes
// nothing; the nodes it writes late, below minKept, are never read (b does
// not come back) and the next sweep removes them.
func TestTreeStalledPublisherAfterSweep(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"tree:allocate", "tree:nodes"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			b := treeSetup(t)
			require.NoError(t, b.handler(t, nil).Work(b.ctx, treeJob(t, "j0", handlers.PublishTreeArgs{Tree: "t", Nodes: catalog(t, "v0", "a")})))
			mine := catalog(t, "mine", "b")
			reached, resume := make(chan struct{}), make(chan struct{})
			var once sync.Once
			stalled := b.handler(t, func(_ context.Context, s string) error {
				if s == step {
					once.Do(func() {
						close(reached)
						<-resume
					})
				}
				return nil
			})
			done := make(chan error, 1)
			go func() {
				done <- stalled.Work(b.ctx, treeJob(t, "j1", handlers.PublishTreeArgs{Tree: "t", Nodes: mine}))
			}()
			<-reached
			j := treeJob(t, "j1", handlers.PublishTreeArgs{Tree: "t", Nodes: mine})
			j.LeaseToken, j.Attempt = "second", 2
			require.NoError(t, b.handler(t, nil).Work(b.ctx, j))
			var last []handlers.TreeNode
			for i := range handlers.DefaultTreeKeep + 1 {
				last = catalog(t, fmt.Sprintf("new%d", i), fmt.Sprintf("x%d", i))
				require.NoError(t, b.handler(t, nil).Work(b.ctx, treeJob(t, fmt.Sprintf("other%d", i), handlers.PublishTreeArgs{Tree: "t", Nodes: last})))
			}
			_, err := handlers.SweepTrees(b.ctx, b.db, handlers.DefaultTreeKeep, b.log)
			require.NoError(t, err)
			newest, _ := b.published(t, "t")
			close(resume)
			require.NoError(t, <-done)
			published, _ := b.published(t, "t")
			require.Equal(t, newest, published, "the stalled attempt published nothing")
			got, err := handlers.ReadTree(b.ctx, b.db, "t", 0)
			require.NoError(t, err)
			requireSameTree(t, last, got.Nodes)
			before := b.nodeDocs(t)
			_, err = handlers.SweepTrees(b.ctx, b.db, handlers.DefaultTreeKeep, b.log)
			require.NoError(t, err)
			got, err = handlers.ReadTree(b.ctx, b.db, "t", 0)
			require.NoError(t, err)
			requireSameTree(t, last, got.Nodes)
			if step == "tree:allocate" {
				require.Less(t, b.nodeDocs(t), before, "the sweeper removes the nodes written late")
			}
		})
	}
}

// TestTreePublishOnceFromAnOldTreeDocument: a tree document written by the
// previous version (the job only in versions) still tells a retry that its
// job published, and still does once the sweeper has trimmed that entry.
func TestTreePublishOnceFromAnOldTreeDocument(t *testing.T) {
	t.Parallel()
	b := treeSetup(t)
	trees := b.db.Collection(handlers.TreesCollection)
	old := catalog(t, "old", "a")
	require.NoError(t, b.handler(t, nil).Work(b.ctx, treeJob(t, "j1", handlers.PublishTreeArgs{Tree: "t", Nodes: old})))
	asBefore := func() {
		_, err := trees.UpdateOne(b.ctx, bson.D{{Key: "_id", Value: "t"}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "jobs", Value: ""}}}})
		require.NoError(t, err)
	}
	asBefore()
	retry := func() {
		t.Helper()
		before, _ := b.published(t, "t")
		j := treeJob(t, "j1", handlers.PublishTreeArgs{Tree: "t", Nodes: old})
		j.LeaseToken, j.Attempt = "again", 2
		require.NoError(t, b.handler(t, nil).Work(b.ctx, j))
		after, _ := b.published(t, "t")
		require.Equal(t, before, after, "the retry published nothing")
	}
	retry()
	require.NoError(t, b.handler(t, nil).Work(b.ctx, treeJob(t, "j2", handlers.PublishTreeArgs{Tree: "t", Nodes: catalog(t, "new", "b")})))
	asBefore()
	_, err := handlers.SweepTrees(b.ctx, b.db, 1, b.log)
	require.NoError(t, err)
	_, versionsJobs := b.published(t, "t")
	require.Equal(t, []string{"j2"}, versionsJobs)
	retry()
}

// TestTreeForeignTreeFields: a tree document whose fields another app wrote
// with another type ends the publish dead, naming the field, with nothing
// written.
func TestTreeForeignTreeFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		doc   bson.D
		field string
	}{
		{"next string", bson.D{{Key: "next", Value: "three"}}, "next"},
		{"next null", bson.D{{Key: "next", Value: nil}}, "next"},
		{"versions null", bson.D{{Key: "next", Value: int64(1)}, {Key: "published", Value: int64(1)}, {Key: "versions", Value: nil}}, "versions"},
		{"versions string", bson.D{{Key: "versions", Value: "v1"}}, "versions"},
		{"jobs null", bson.D{{Key: "jobs", Value: nil}}, "jobs"},
		{"jobs document", bson.D{{Key: "jobs", Value: bson.D{{Key: "j0", Value: 1}}}}, "jobs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := treeSetup(t)
			trees := b.db.Collection(handlers.TreesCollection)
			doc := append(bson.D{{Key: "_id", Value: "t"}}, tc.doc...)
			_, err := trees.InsertOne(b.ctx, doc)
			require.NoError(t, err)
			before, err := trees.FindOne(b.ctx, bson.D{{Key: "_id", Value: "t"}}).Raw()
			require.NoError(t, err)
			err = b.handler(t, nil).Work(b.ctx, treeJob(t, "j1", handlers.PublishTreeArgs{Tree: "t", Nodes: catalog(t, "v1", "a")}))
			require.True(t, jobs.IsPermanent(err), "%v", err)
			require.ErrorContains(t, err, fmt.Sprintf("field %q", tc.field))
			after, err := trees.FindOne(b.ctx, bson.D{{Key: "_id", Value: "t"}}).Raw()
			require.NoError(t, err)
			require.Equal(t, before.String(), after.String(), "the tree's document is untouched")
			require.Zero(t, b.nodeDocs(t))
		})
	}
}
