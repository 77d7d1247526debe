//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
)

// The trees' share of the run: publish-tree jobs, several per tree, while
// readers in this process read the trees' snapshots with
// handlers.ReadTree all through the run (kills, stalls, the outage, the
// workers' tree sweeper trimming old versions every second). Every node of
// publish i's tree carries the label i, so a read that mixed two versions,
// missed a node, or returned a version that was never published shows it.

// treePublish is one publish the run enqueued; its index is its label.
type treePublish struct {
	tree  string
	nodes []handlers.TreeNode
	job   string
}

// treeRead is one read checked: tree's version, holding publish label's
// tree.
type treeRead struct {
	tree    string
	version int64
	label   int
}

// treeReadErr is a read that failed.
type treeReadErr struct {
	at  time.Time
	err error
}

// treeLoad is the trees' state of the run, shared with the readers.
type treeLoad struct {
	ids []string

	mu   sync.Mutex
	pubs []treePublish
	// published is every version seen published, tree → version → job:
	// by the poller of the trees' documents and the workers' logs.
	published map[string]map[int64]string
	// seen is the label read at each version, tree → version → read.
	seen     map[string]map[int64]treeRead
	reads    int
	errs     []treeReadErr
	problems []string
}

// notePublished records that job published version v of tree.
func (l *treeLoad) notePublished(tree string, v int64, job, source string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.published[tree] == nil {
		l.published[tree] = map[int64]string{}
	}
	if old, ok := l.published[tree][v]; ok && old != job {
		if len(l.problems) < 20 {
			l.problems = append(l.problems, fmt.Sprintf("tree %s version %d was published by job %s and, says %s, by job %s", tree, v, old, source, job))
		}
		return
	}
	l.published[tree][v] = job
}

func (r *run) seedTrees() {
	l := &r.trees
	for i := 1; i <= r.cfg.Trees; i++ {
		l.ids = append(l.ids, fmt.Sprintf("chaos-tree-%d", i))
	}
	l.published = map[string]map[int64]string{}
	l.seen = map[string]map[int64]treeRead{}
}

// labelledTree is a tree of 1 to 3 categories of 0 to 4 items each, every
// node labelled with label.
func (r *run) labelledTree(label int) []handlers.TreeNode {
	data := func(extra ...bson.E) bson.Raw {
		raw, err := bson.Marshal(append(bson.D{{Key: "label", Value: int64(label)}}, extra...))
		if err != nil {
			panic(err)
		}
		return raw
	}
	nodes := []handlers.TreeNode{{ID: "root", Data: data()}}
	for c := range 1 + r.intN(3) {
		cat := fmt.Sprintf("cat-%d", c)
		nodes = append(nodes, handlers.TreeNode{ID: cat, Parent: "root", Data: data()})
		for k := range r.intN(5) {
			nodes = append(nodes, handlers.TreeNode{ID: fmt.Sprintf("%s-item-%d", cat, k), Parent: cat,
				Data: data(bson.E{Key: "price", Value: int64(r.intN(1000))})})
		}
	}
	return nodes
}

// treeWave enqueues n publishes over the trees in turn; one in four through
// `enqueue publish` from JSON on its standard input.
func (r *run) treeWave(ctx context.Context, w, n int) {
	l := &r.trees
	for i := range n {
		tree := l.ids[(w*n+i)%len(l.ids)]
		l.mu.Lock()
		label := len(l.pubs)
		l.mu.Unlock()
		nodes := r.labelledTree(label)
		l.mu.Lock()
		l.pubs = append(l.pubs, treePublish{tree: tree, nodes: nodes})
		l.mu.Unlock()
		var job string
		if i%4 == 3 {
			job = strings.TrimSpace(r.enqueue(treeJSON(nodes), "publish", "--tree", tree, "--file", "-"))
		} else {
			var res queue.Result
			err := r.retry("enqueue publish-tree", func() (err error) {
				// An id of the run's, so that a retry finds the job there.
				res, err = r.q.Enqueue(ctx, handlers.PublishTreeKind, handlers.PublishTreeArgs{Tree: tree, Nodes: nodes},
					queue.InsertOpts{ID: fmt.Sprintf("publish-%s-%d", tree, label)})
				return err
			})
			if err != nil {
				r.errorf("chaos: enqueue publish-tree: %v", err)
				return
			}
			job = res.ID
		}
		l.mu.Lock()
		l.pubs[label].job = job
		l.mu.Unlock()
	}
}

// treeJSON is nodes as `enqueue publish --file` reads them.
func treeJSON(nodes []handlers.TreeNode) string {
	type node struct {
		ID     string          `json:"id"`
		Parent string          `json:"parent,omitempty"`
		Data   json.RawMessage `json:"data"`
	}
	var f struct {
		Nodes []node `json:"nodes"`
	}
	for _, n := range nodes {
		data, err := bson.MarshalExtJSON(n.Data, true, false)
		if err != nil {
			panic(err)
		}
		f.Nodes = append(f.Nodes, node{ID: n.ID, Parent: n.Parent, Data: data})
	}
	out, err := json.Marshal(f)
	if err != nil {
		panic(err)
	}
	return string(out)
}

// startReaders starts the readers and the poller of the trees' documents;
// the function it returns stops them.
func (r *run) startReaders() func() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for k := range r.cfg.Readers {
		wg.Go(func() { r.reader(k, stop) })
	}
	wg.Go(func() {
		for {
			r.pollTrees(context.Background())
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
	return func() {
		close(stop)
		wg.Wait()
	}
}

// pollTrees records the published versions the trees' documents list: the
// sweeper trims the list to the last few, so it is read often.
func (r *run) pollTrees(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cur, err := r.db.Collection(handlers.TreesCollection).Find(ctx, bson.M{})
	if err != nil {
		return
	}
	var docs []struct {
		ID       string `bson:"_id"`
		Versions []struct {
			V   int64  `bson:"v"`
			Job string `bson:"job"`
		} `bson:"versions"`
	}
	if cur.All(ctx, &docs) != nil {
		return
	}
	for _, d := range docs {
		for _, v := range d.Versions {
			r.trees.notePublished(d.ID, v.V, v.Job, "the tree's document")
		}
	}
}

// reader reads the trees' published snapshots, one tree after the other,
// until stop closes, and checks each: exactly the nodes of one publish,
// the same publish whenever the same version is read, and versions never
// going back.
func (r *run) reader(k int, stop <-chan struct{}) {
	l := &r.trees
	last := map[string]int64{}
	for i := 0; ; i++ {
		pause := 100 * time.Millisecond
		tree := l.ids[i%len(l.ids)]
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := handlers.ReadTree(ctx, r.db, tree, 0)
		cancel()
		switch {
		case errors.Is(err, handlers.ErrTreeNotFound) && last[tree] == 0:
			// Not published yet.
		case err != nil:
			l.mu.Lock()
			l.errs = append(l.errs, treeReadErr{at: time.Now(), err: fmt.Errorf("reader %d, tree %s: %w", k, tree, err)})
			l.mu.Unlock()
			pause = 200 * time.Millisecond
		default:
			r.judgeRead(k, got, last)
		}
		select {
		case <-stop:
			return
		case <-time.After(pause):
		}
	}
}

func (r *run) judgeRead(k int, got *handlers.Tree, last map[string]int64) {
	l := &r.trees
	label := -1
	if len(got.Nodes) > 0 {
		if v, ok := bson.Raw(got.Nodes[0].Data).Lookup("label").Int64OK(); ok {
			label = int(v)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	bad := func(format string, args ...any) {
		msg := fmt.Sprintf("tree %s version %d: ", got.ID, got.Version) + fmt.Sprintf(format, args...)
		if len(l.problems) < 20 && !slices.ContainsFunc(l.problems, func(p string) bool { return strings.HasSuffix(p, msg) }) {
			l.problems = append(l.problems, fmt.Sprintf("reader %d read %s", k, msg))
		}
	}
	if got.Version < last[got.ID] {
		bad("read after version %d: the published version went back", last[got.ID])
	}
	last[got.ID] = got.Version
	if label < 0 || label >= len(l.pubs) || l.pubs[label].tree != got.ID {
		bad("its root's label %d is no publish of this tree", label)
		return
	}
	if diff := diffNodes(l.pubs[label].nodes, got.Nodes); diff != "" {
		bad("not publish %d's tree (a mix of versions, or a node missing): %s", label, diff)
	}
	if l.seen[got.ID] == nil {
		l.seen[got.ID] = map[int64]treeRead{}
	}
	if old, ok := l.seen[got.ID][got.Version]; ok && old.label != label {
		bad("read as publish %d's tree, and before as publish %d's", label, old.label)
	}
	l.seen[got.ID][got.Version] = treeRead{tree: got.ID, version: got.Version, label: label}
}

// sameNodes reports whether got holds exactly the nodes of want.
func sameNodes(want, got []handlers.TreeNode) bool { return diffNodes(want, got) == "" }

// diffNodes says how got differs from the nodes of want, "" if it does not.
func diffNodes(want, got []handlers.TreeNode) string {
	idx := map[string]handlers.TreeNode{}
	for _, n := range got {
		idx[n.ID] = n
	}
	for _, n := range want {
		g, ok := idx[n.ID]
		switch {
		case !ok:
			return fmt.Sprintf("node %s missing", n.ID)
		case g.Parent != n.Parent:
			return fmt.Sprintf("node %s has parent %q, want %q", n.ID, g.Parent, n.Parent)
		case string(g.Data) != string(n.Data):
			return fmt.Sprintf("node %s holds %s, want %s", n.ID, bson.Raw(g.Data), bson.Raw(n.Data))
		}
	}
	if len(want) != len(got) {
		return fmt.Sprintf("%d nodes, want %d", len(got), len(want))
	}
	return ""
}

// checkTrees checks, after the drain, what the readers saw and what the
// trees hold:
//   - no reader saw anything but one whole published version, each read
//     version published by the job whose tree was read, and no read failed
//     but while devdb was down;
//   - every publish job published its tree exactly once;
//   - each tree's published version is the last one published, and reads
//     back as its job's tree;
//   - after a sweep, exactly the last TreeKeep published versions are kept,
//     each readable whole; no document of a version never published is
//     left below the published one, and below the oldest kept version each
//     node has at most its newest document.
func (r *run) checkTrees(all []jobs.Job) {
	ctx := context.Background()
	l := &r.trees
	for _, p := range r.procs {
		for _, line := range parseLog(p.out.String()) {
			if line.Msg == "published a tree" {
				l.notePublished(line.Tree, line.Version, line.JobID, "worker "+p.id+"'s log")
			}
		}
	}
	r.pollTrees(ctx)

	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.problems {
		r.errorf("chaos: trees: %s", p)
	}
	r.res.TreeReads = l.reads
	if l.reads == 0 {
		r.errorf("chaos: trees: no read of a tree succeeded during the run")
	}
	for _, e := range l.errs {
		if strings.Contains(e.err.Error(), "try again") || r.duringOutage(e.at) || transient(e.err) {
			r.res.TreeReadsDown++
			continue
		}
		r.errorf("chaos: trees: a read failed while devdb was up: %v", e.err)
	}
	labelOf := map[string]int{}
	for i, p := range l.pubs {
		labelOf[p.job] = i
	}
	// Each publish job published once.
	byJob := map[string][]int64{}
	for tree, vs := range l.published {
		for v, job := range vs {
			byJob[job] = append(byJob[job], v)
			r.res.TreePublishes++
			if i, ok := labelOf[job]; !ok || l.pubs[i].tree != tree {
				r.errorf("chaos: trees: version %d of %s was published by job %s, which the run did not enqueue for that tree", v, tree, job)
			}
		}
	}
	for i := range all {
		j := &all[i]
		if j.Kind != handlers.PublishTreeKind || j.State != jobs.StateSucceeded {
			continue
		}
		if vs := byJob[j.ID]; len(vs) != 1 {
			slices.Sort(vs)
			r.errorf("chaos: trees: publish job %s succeeded and published versions %v; want exactly one", j.ID, vs)
		}
	}
	// Every version read was published, by the job whose tree it held.
	for tree, vs := range l.seen {
		for v, rd := range vs {
			job, ok := l.published[tree][v]
			switch {
			case !ok:
				r.errorf("chaos: trees: version %d of %s was read (publish %d's tree) but never published", v, tree, rd.label)
			case job != l.pubs[rd.label].job:
				r.errorf("chaos: trees: version %d of %s was read as publish %d's tree (job %s) but published by job %s", v, tree, rd.label, l.pubs[rd.label].job, job)
			}
		}
	}
	// Each tree: the last publish is the tree, and the sweeper keeps what
	// it must.
	if err := r.retry("sweep the trees", func() error {
		_, err := handlers.SweepTrees(ctx, r.db, r.cfg.TreeKeep, zap.NewNop())
		return err
	}); err != nil {
		r.errorf("chaos: trees: sweep: %v", err)
	}
	for _, tree := range l.ids {
		r.checkTree(ctx, tree, labelOf)
	}
}

// checkTree checks one swept tree against its publishes.
func (r *run) checkTree(ctx context.Context, tree string, labelOf map[string]int) {
	l := &r.trees
	vs := slices.Sorted(maps.Keys(l.published[tree]))
	if len(vs) == 0 {
		r.errorf("chaos: trees: %s was never published", tree)
		return
	}
	var st struct {
		Published int64 `bson:"published"`
		MinKept   int64 `bson:"minKept"`
		Versions  []struct {
			V   int64  `bson:"v"`
			Job string `bson:"job"`
		} `bson:"versions"`
	}
	if err := r.db.Collection(handlers.TreesCollection).FindOne(ctx, bson.M{"_id": tree}).Decode(&st); err != nil {
		r.errorf("chaos: trees: read %s: %v", tree, err)
		return
	}
	if last := vs[len(vs)-1]; st.Published != last {
		r.errorf("chaos: trees: %s publishes version %d; the last version published was %d", tree, st.Published, last)
	}
	wantKept := vs[max(len(vs)-r.cfg.TreeKeep, 0):]
	var kept []int64
	for _, v := range st.Versions {
		kept = append(kept, v.V)
	}
	if !slices.Equal(kept, wantKept) {
		r.errorf("chaos: trees: %s keeps versions %v after a sweep keeping %d; the last published are %v", tree, kept, r.cfg.TreeKeep, wantKept)
	}
	for _, v := range kept {
		version := v
		if v == st.Published {
			version = 0 // the published one, as readers ask for it
		}
		got, err := handlers.ReadTree(ctx, r.db, tree, version)
		if err != nil {
			r.errorf("chaos: trees: read %s version %d after the sweep: %v", tree, v, err)
			continue
		}
		i, ok := labelOf[l.published[tree][v]]
		if got.Version != v || !ok || !sameNodes(l.pubs[i].nodes, got.Nodes) {
			r.errorf("chaos: trees: %s version %d reads back as version %d, not the tree its job %s published", tree, v, got.Version, l.published[tree][v])
		}
	}
	// The node documents the sweep left.
	cur, err := r.db.Collection(handlers.TreeNodesCollection).Find(ctx, bson.M{"tree": tree})
	if err != nil {
		r.errorf("chaos: trees: read the nodes of %s: %v", tree, err)
		return
	}
	var docs []struct {
		Node    string `bson:"node"`
		Version int64  `bson:"version"`
		Deleted bool   `bson:"deleted"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		r.errorf("chaos: trees: read the nodes of %s: %v", tree, err)
		return
	}
	below := map[string]int{}
	for _, d := range docs {
		switch {
		case d.Version < st.MinKept:
			below[d.Node]++
			if d.Deleted {
				r.errorf("chaos: trees: %s: the sweep left the tombstone of node %s at version %d, below the oldest kept (%d)", tree, d.Node, d.Version, st.MinKept)
			}
		case d.Version <= st.Published && !slices.Contains(kept, d.Version):
			r.errorf("chaos: trees: %s: the sweep left node %s of version %d, which was never published (published %d, kept %v)", tree, d.Node, d.Version, st.Published, kept)
		}
	}
	for node, n := range below {
		if n > 1 {
			r.errorf("chaos: trees: %s: the sweep left %d documents of node %s below the oldest kept version %d; one is all a reader needs", tree, n, node, st.MinKept)
		}
	}
}

// duringOutage reports whether t falls in an outage of devdb or the 20 s
// after it, while the clients find it again.
func (r *run) duringOutage(t time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.outages {
		if !t.Before(o[0].Add(-time.Second)) && t.Before(o[1].Add(20*time.Second)) {
			return true
		}
	}
	return false
}
