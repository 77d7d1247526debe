package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.uber.org/zap"
)

// PublishTreeKind is the job kind that publishes a new version of a tree.
//
// A tree (a catalog of categories and items, a document of sections) is too
// big for one document, yet readers must never see half of a change. The
// pattern is versioning: nothing is updated in place. A publish writes each
// node that changed as a new document with a new version (a removed node as
// a tombstone), then publishes the version with one atomic write to the
// tree's document. A reader reads the tree's published version, then for
// each node its newest document at or below that version among the
// published ones; a version that was never published (its attempt crashed,
// or lost a race) is ignored, and removed by the sweeper.
//
//	trees     {_id: tree, next, published, versions: [{v, job, at}], minKept, jobs: [job]}
//	treeNodes {_id, tree, node, version, parent, data, deleted, draft}
//
// Versions are allocated from the tree's counter after the publisher has
// read the published version, so a new version is always higher than the
// one it was computed against; the publishing write is conditioned on that
// version still being the published one. A publish whose base moved under
// it starts again from the new one: the last publish to complete is the
// tree. A job that published its tree (in any attempt) does not publish it
// again: the publishing write also adds the job's id to the tree's jobs,
// and is conditioned on it not being there yet. The sweeper trims versions
// (readers need only the last few) but never jobs, so a job's publish is
// recognised for good, however long an attempt stalls; a tree written
// before jobs existed has its jobs only in versions, and the sweeper moves
// each job id it trims from versions into jobs in the same write.
//
// Below minKept, readers take every node document as published, without
// finding its version in versions (trimmed). An attempt can stall after
// allocating its version and write its nodes after the sweeper trimmed
// past it; an insert cannot be conditioned on the tree's document, so the
// late documents land below minKept all the same. They must not count: a
// publish writes its node documents as drafts (draft: true), a draft is
// read only while its version is listed in versions, and the sweeper
// clears draft on the documents of the published versions it trims in a
// write before the trim. Below minKept, only documents without draft
// count (those docket wrote before drafts existed have none, and were
// published), and the sweeper removes the drafts left there.
const PublishTreeKind = "publish-tree"

// Collections of the publish-tree handler.
const (
	// TreesCollection holds one document per tree: its published version.
	TreesCollection = "trees"
	// TreeNodesCollection holds every version of every node.
	TreeNodesCollection = "treeNodes"
)

// Limits of a published tree.
const (
	// MaxTreeNodes is the most nodes one tree may have.
	MaxTreeNodes = 10_000
	// MaxTreeIDLen bounds tree and node ids, in bytes.
	MaxTreeIDLen = 200
)

// Errors of the tree read path.
var (
	// ErrTreeNotFound: no version of the tree has been published.
	ErrTreeNotFound = errors.New("tree not found")
	// ErrTreeVersionNotFound: the version asked for was never published,
	// or is no longer kept.
	ErrTreeVersionNotFound = errors.New("tree version not found")
)

// TreeNode is one node of a tree as published and as read.
type TreeNode struct {
	// ID names the node within its tree.
	ID string `bson:"id" json:"id"`
	// Parent is the id of the node's parent; empty for the root.
	Parent string `bson:"parent,omitempty" json:"parent,omitempty"`
	// Data is the node's content, a document.
	Data bson.Raw `bson:"data,omitempty" json:"-"`
}

// PublishTreeArgs are the args of a publish-tree job: the whole tree as it
// is to be. Nodes that did not change are not written again.
type PublishTreeArgs struct {
	Tree  string     `bson:"tree"`
	Nodes []TreeNode `bson:"nodes"`
}

// Kind implements jobs.Args.
func (PublishTreeArgs) Kind() string { return PublishTreeKind }

// Validate implements jobs.Validator: a tree is one root, every other node
// has a parent in the tree, and every node is reached from the root.
func (a PublishTreeArgs) Validate() error {
	if a.Tree == "" || len(a.Tree) > MaxTreeIDLen {
		return jobs.InvalidArgs("tree", "must be 1 to %d bytes", MaxTreeIDLen)
	}
	return validateTree(a.Nodes)
}

func validateTree(nodes []TreeNode) error {
	if len(nodes) == 0 || len(nodes) > MaxTreeNodes {
		return jobs.InvalidArgs("nodes", "must hold 1 to %d nodes, not %d", MaxTreeNodes, len(nodes))
	}
	children := map[string][]string{}
	ids := map[string]bool{}
	root := ""
	for i, n := range nodes {
		field := fmt.Sprintf("nodes[%d]", i)
		switch {
		case n.ID == "" || len(n.ID) > MaxTreeIDLen:
			return jobs.InvalidArgs(field+".id", "must be 1 to %d bytes", MaxTreeIDLen)
		case ids[n.ID]:
			return jobs.InvalidArgs(field+".id", "%q appears twice", n.ID)
		case n.Parent == "" && root != "":
			return jobs.InvalidArgs(field+".parent", "missing: %q would be a second root beside %q", n.ID, root)
		case n.Parent == n.ID:
			return jobs.InvalidArgs(field+".parent", "node %q is its own parent", n.ID)
		}
		ids[n.ID] = true
		if n.Parent == "" {
			root = n.ID
		} else {
			children[n.Parent] = append(children[n.Parent], n.ID)
		}
	}
	if root == "" {
		return jobs.InvalidArgs("nodes", "no root: every node has a parent")
	}
	for i, n := range nodes {
		if n.Parent != "" && !ids[n.Parent] {
			return jobs.InvalidArgs(fmt.Sprintf("nodes[%d].parent", i), "%q is not a node of the tree", n.Parent)
		}
	}
	reached := 0
	for stack := []string{root}; len(stack) > 0; {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		reached++
		stack = append(stack, children[id]...)
	}
	if reached != len(nodes) {
		return jobs.InvalidArgs("nodes", "%d of %d nodes are not reached from the root %q (a cycle)", len(nodes)-reached, len(nodes), root)
	}
	return nil
}

// Steps of a publish-tree job, reported to Deps.Hook after each write.
const (
	stepTreeAllocate = "tree:allocate"
	stepTreeNodes    = "tree:nodes"
	stepTreePublish  = "tree:publish"
)

// treeColls returns the trees and tree nodes collections of db, written
// with majority and read from the primary.
func treeColls(db *mongo.Database) (trees, nodes *mongo.Collection) {
	o := options.Collection().SetWriteConcern(writeconcern.Majority()).SetReadPreference(readpref.Primary())
	return db.Collection(TreesCollection, o), db.Collection(TreeNodesCollection, o)
}

// setupTree creates the index that makes a node's version unique, and the
// one readers use.
func setupTree(ctx context.Context, db *mongo.Database) error {
	_, nodes := treeColls(db)
	return queue.EnsureIndexes(ctx, nodes, []mongo.IndexModel{{
		Keys:    bson.D{{Key: "tree", Value: 1}, {Key: "node", Value: 1}, {Key: "version", Value: 1}},
		Options: options.Index().SetName("tree_node_version").SetUnique(true),
	}})
}

func registerTree(reg *jobs.Registry, d Deps) error {
	trees, nodes := treeColls(d.DB)
	h := &treeHandler{d: d, trees: trees, nodes: nodes, log: d.logger().Named("publish-tree")}
	return jobs.Register(reg, h.work, jobs.KindOptions{})
}

type treeHandler struct {
	d            Deps
	trees, nodes *mongo.Collection
	log          *zap.Logger
}

// maxPublishRounds bounds how often one attempt starts again because
// another publish of the same tree completed first.
const maxPublishRounds = 8

func (h *treeHandler) work(ctx context.Context, job *jobs.Job, args PublishTreeArgs) error {
	for range maxPublishRounds {
		st, err := readTreeState(ctx, h.trees, args.Tree, true)
		if err != nil {
			return err
		}
		if st.publishedBy(job.ID) {
			return nil // an earlier attempt of this job published it
		}
		current, err := resolveTree(ctx, h.nodes, args.Tree, st, st.Published, h.log)
		if err != nil {
			return err
		}
		version, err := h.allocate(ctx, args.Tree)
		if err != nil {
			return err
		}
		if err := h.d.step(ctx, stepTreeAllocate); err != nil {
			return err
		}
		if docs := treeDiff(args.Tree, version, current, args.Nodes); len(docs) > 0 {
			if _, err := h.nodes.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
				return fmt.Errorf("tree %q: write version %d: %w", args.Tree, version, err)
			}
		}
		if err := h.d.step(ctx, stepTreeNodes); err != nil {
			return err
		}
		publishedAs := bson.E{Key: "published", Value: st.Published}
		if st.Published == 0 {
			publishedAs.Value = bson.D{{Key: "$in", Value: bson.A{nil, int64(0)}}}
		}
		// Conditioned on the base and on the job not having published:
		// an attempt that stalled anywhere before this write and resumes
		// after another attempt published finds its job in jobs.
		res, err := h.trees.UpdateOne(ctx, bson.D{{Key: "_id", Value: args.Tree}, publishedAs, {Key: "jobs", Value: bson.D{{Key: "$ne", Value: job.ID}}}}, bson.D{
			{Key: "$set", Value: bson.D{{Key: "published", Value: version}}},
			{Key: "$push", Value: bson.D{
				{Key: "versions", Value: treeVersion{V: version, Job: job.ID, At: time.Now().UTC()}},
				{Key: "jobs", Value: job.ID},
			}},
		})
		if err != nil {
			return fmt.Errorf("tree %q: publish version %d: %w", args.Tree, version, err)
		}
		if err := h.d.step(ctx, stepTreePublish); err != nil {
			return err
		}
		if res.MatchedCount == 1 {
			h.log.Info("published a tree", job.LogFields(zap.String("tree", args.Tree), zap.Int64("version", version))...)
			return nil
		}
		// Another publish completed since we read the tree (perhaps by
		// another attempt of this job: the next round finds it in jobs):
		// its version is the new base. Ours is abandoned; the sweeper
		// removes it.
	}
	return fmt.Errorf("tree %q: other publishes kept completing first; retrying", args.Tree)
}

// allocate takes a new version of tree, higher than every version taken
// before it.
func (h *treeHandler) allocate(ctx context.Context, tree string) (int64, error) {
	var got struct {
		Next int64 `bson:"next"`
	}
	err := h.trees.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: tree}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "next", Value: int64(1)}}}},
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Decode(&got)
	if err != nil {
		return 0, fmt.Errorf("tree %q: allocate a version: %w", tree, err)
	}
	return got.Next, nil
}

// treeVersion is one published version of a tree.
type treeVersion struct {
	V   int64     `bson:"v"`
	Job string    `bson:"job"`
	At  time.Time `bson:"at"`
}

// treeState is a tree's document.
type treeState struct {
	Published int64         `bson:"published"`
	Versions  []treeVersion `bson:"versions"`
	// MinKept: every node document of a lower version belongs to a
	// published version (the sweeper removed the rest), so readers need
	// not find it in Versions, which the sweeper trims.
	MinKept int64 `bson:"minKept"`
	// Jobs are the ids of every job that published a version, never
	// trimmed (versions is). Not read by readers.
	Jobs []any `bson:"jobs"`
	// SweptTo is the minKept whose superseded documents the sweeper last
	// removed; below MinKept, it has yet to (see sweepTree). Read apart
	// (readTreeState): only the sweep uses it, and a value of another type
	// reads as none, so the sweep redoes its removal and writes it anew.
	SweptTo int64 `bson:"-"`
}

// publishedBy reports whether job published a version of the tree.
func (s treeState) publishedBy(job string) bool {
	return slices.ContainsFunc(s.Versions, func(v treeVersion) bool { return v.Job == job }) ||
		slices.ContainsFunc(s.Jobs, func(j any) bool { return j == job })
}

// kept reports whether version v is published and still kept.
func (s treeState) kept(v int64) bool {
	return v >= s.MinKept && slices.ContainsFunc(s.Versions, func(tv treeVersion) bool { return tv.V == v })
}

// readTreeState reads tree's document. Readers pass withJobs false: the
// jobs list only grows, and only publishers need it.
func readTreeState(ctx context.Context, trees *mongo.Collection, tree string, withJobs bool) (treeState, error) {
	opts := options.FindOne()
	if !withJobs {
		opts.SetProjection(bson.D{{Key: "jobs", Value: 0}})
	}
	raw, err := trees.FindOne(ctx, bson.D{{Key: "_id", Value: tree}}, opts).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return treeState{}, nil
	}
	if err != nil {
		return treeState{}, fmt.Errorf("tree %q: read its document: %w", tree, err)
	}
	var st treeState
	err = checkTreeDoc(raw)
	if err == nil {
		err = bson.Unmarshal(raw, &st)
	}
	if v, ok := raw.Lookup("sweptTo").AsInt64OK(); ok {
		st.SweptTo = v
	}
	if err != nil {
		// Another app wrote the tree's document with a field of another
		// type: no publish can be decided on it, now or on a retry.
		return treeState{}, jobs.Permanent(fmt.Errorf("tree %q: its document in %s is not docket's (%w): %s", tree, TreesCollection, err, raw))
	}
	return st, nil
}

// checkTreeDoc names the first field of a tree's document that a publish
// or a sweep could not use: the counters must be integers (published and
// minKept may be null: none yet), versions and jobs arrays.
func checkTreeDoc(raw bson.Raw) error {
	for _, f := range []string{"next", "published", "minKept"} {
		v, err := raw.LookupErr(f)
		if err != nil {
			continue
		}
		switch v.Type {
		case bson.TypeInt32, bson.TypeInt64:
		case bson.TypeNull:
			if f == "next" {
				return fmt.Errorf("field %q is null, not an integer", f)
			}
		default:
			return fmt.Errorf("field %q is a %s, not an integer", f, v.Type)
		}
	}
	for _, f := range []string{"versions", "jobs"} {
		v, err := raw.LookupErr(f)
		if err != nil {
			continue
		}
		if v.Type != bson.TypeArray {
			return fmt.Errorf("field %q is a %s, not an array", f, v.Type)
		}
	}
	arr, ok := raw.Lookup("versions").ArrayOK()
	if !ok {
		return nil
	}
	vs, err := arr.Values()
	if err != nil {
		return fmt.Errorf("field \"versions\": %w", err)
	}
	for i, v := range vs {
		var tv treeVersion
		doc, ok := v.DocumentOK()
		if !ok {
			return fmt.Errorf("field \"versions[%d]\" is a %s, not a document", i, v.Type)
		}
		if err := bson.Unmarshal(doc, &tv); err != nil {
			return fmt.Errorf("field \"versions[%d]\": %w", i, err)
		}
	}
	return nil
}

// nodeDoc is one version of one node.
type nodeDoc struct {
	ID      string   `bson:"_id"`
	Tree    string   `bson:"tree"`
	Node    string   `bson:"node"`
	Version int64    `bson:"version"`
	Parent  string   `bson:"parent,omitempty"`
	Data    bson.Raw `bson:"data,omitempty"`
	Deleted bool     `bson:"deleted,omitempty"`
	// Draft is set on every document a publish writes, and cleared by the
	// sweeper once the version is published and about to be trimmed:
	// below minKept, a draft is a late write of a version never published.
	Draft bool `bson:"draft,omitempty"`
}

// resolveTree returns the nodes of tree at version target: for each node,
// its newest document at or below target that belongs to a published
// version, unless that is a tombstone. A document belongs to a published
// version when its version is listed in versions, or is below minKept and
// it is not a draft (see PublishTreeKind).
func resolveTree(ctx context.Context, nodes *mongo.Collection, tree string, st treeState, target int64, log *zap.Logger) (map[string]nodeDoc, error) {
	out := map[string]nodeDoc{}
	if target == 0 {
		return out, nil
	}
	published := bson.A{}
	for _, v := range st.Versions {
		if v.V <= target {
			published = append(published, v.V)
		}
	}
	cur, err := nodes.Find(ctx, bson.D{
		{Key: "tree", Value: tree},
		{Key: "version", Value: bson.D{{Key: "$lte", Value: target}}},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: "version", Value: bson.D{{Key: "$in", Value: published}}}},
			bson.D{{Key: "version", Value: bson.D{{Key: "$lt", Value: st.MinKept}}}, notDraft},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("tree %q: read version %d: %w", tree, target, err)
	}
	defer closeCursor(ctx, cur)
	newest := map[string]nodeDoc{}
	for cur.Next(ctx) {
		if f := treeScanMet.Load(); f != nil && !(*f)(cur.Current) {
			continue
		}
		var d nodeDoc
		if err := bson.Unmarshal(cur.Current, &d); err != nil {
			log.Warn("skipping a tree node document that does not decode", zap.String("tree", tree), zap.Error(err))
			continue
		}
		if old, ok := newest[d.Node]; !ok || d.Version > old.Version {
			newest[d.Node] = d
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("tree %q: read version %d: %w", tree, target, err)
	}
	for id, d := range newest {
		if !d.Deleted {
			out[id] = d
		}
	}
	return out, nil
}

// notDraft selects the node documents that are not drafts: draft absent
// (as the sweeper leaves it, and as docket wrote every document before
// drafts) or anything but true.
var notDraft = bson.E{Key: "draft", Value: bson.D{{Key: "$ne", Value: true}}}

// treeDiff returns the documents that make version of tree hold want, given
// the nodes current holds: a new document for each node added or changed, a
// tombstone for each node removed.
func treeDiff(tree string, version int64, current map[string]nodeDoc, want []TreeNode) []any {
	var docs []any
	keep := map[string]bool{}
	for _, n := range want {
		keep[n.ID] = true
		if old, ok := current[n.ID]; ok && old.Parent == n.Parent && bytes.Equal(normData(old.Data), normData(n.Data)) {
			continue
		}
		docs = append(docs, nodeDoc{ID: uuid.NewString(), Tree: tree, Node: n.ID, Version: version, Parent: n.Parent, Data: n.Data, Draft: true})
	}
	for id := range current {
		if !keep[id] {
			docs = append(docs, nodeDoc{ID: uuid.NewString(), Tree: tree, Node: id, Version: version, Deleted: true, Draft: true})
		}
	}
	return docs
}

// normData makes an absent document and an empty one compare equal.
func normData(d bson.Raw) bson.Raw {
	if len(d) == 0 {
		return bson.Raw{5, 0, 0, 0, 0}
	}
	return d
}

// Tree is a consistent snapshot of one published version of a tree.
type Tree struct {
	// ID names the tree.
	ID string
	// Version is the published version read.
	Version int64
	// Nodes are the tree's nodes, the root first, then in id order.
	Nodes []TreeNode
}

// afterTreeRead, when set by a test, runs in ReadTree between reading the
// nodes and checking that the version is still kept.
var afterTreeRead atomic.Pointer[func()]

// treeScanMet, when set by a test, is called with each node document a
// tree read's cursor returns; false drops the document, as a MongoDB cursor
// (no snapshot) does not return one deleted before the scan reached it.
var treeScanMet atomic.Pointer[func(bson.Raw) bool]

// maxReadRounds bounds how often ReadTree reads again because the sweeper
// removed the version it was reading.
const maxReadRounds = 5

// ReadTree returns version of tree (0: the published one) as one complete
// snapshot: never part of one version and part of another, never a version
// that was not published. It fails with ErrTreeNotFound when nothing was
// ever published, ErrTreeVersionNotFound for a version never published or
// no longer kept.
func ReadTree(ctx context.Context, db *mongo.Database, tree string, version int64) (*Tree, error) {
	for range maxReadRounds {
		t, again, err := readTreeRound(ctx, db, tree, version)
		if err != nil || !again {
			return t, err
		}
	}
	return nil, fmt.Errorf("handlers: tree %q: the sweeper kept removing the version being read; try again", tree)
}

// readTreeRound is one read of ReadTree; again reports that the sweeper
// removed documents it read meanwhile, and the latest is to be read again.
func readTreeRound(ctx context.Context, db *mongo.Database, tree string, version int64) (t *Tree, again bool, err error) {
	trees, nodes := treeColls(db)
	st, err := readTreeState(ctx, trees, tree, false)
	if err != nil {
		return nil, false, err
	}
	if st.Published == 0 {
		return nil, false, fmt.Errorf("handlers: tree %q: %w", tree, ErrTreeNotFound)
	}
	target := version
	if target == 0 {
		target = st.Published
	}
	if !st.kept(target) {
		return nil, false, fmt.Errorf("handlers: tree %q version %d: %w", tree, target, ErrTreeVersionNotFound)
	}
	got, err := resolveTree(ctx, nodes, tree, st, target, zap.NewNop())
	if err != nil {
		return nil, false, err
	}
	if f := afterTreeRead.Load(); f != nil {
		(*f)()
	}
	// The sweeper removes a version's documents only once it no longer
	// keeps the version: if it still does, what was read is whole.
	after, err := readTreeState(ctx, trees, tree, false)
	if err != nil {
		return nil, false, err
	}
	if !after.kept(target) {
		if version != 0 {
			return nil, false, fmt.Errorf("handlers: tree %q version %d: %w", tree, target, ErrTreeVersionNotFound)
		}
		return nil, true, nil
	}
	whole, err := stillThere(ctx, nodes, tree, got, after.MinKept)
	if err != nil || !whole {
		return nil, !whole, err
	}
	t = &Tree{ID: tree, Version: target}
	for _, d := range got {
		t.Nodes = append(t.Nodes, TreeNode{ID: d.Node, Parent: d.Parent, Data: d.Data})
	}
	slices.SortFunc(t.Nodes, func(a, b TreeNode) int {
		switch {
		case a.Parent == "" && b.Parent != "":
			return -1
		case b.Parent == "" && a.Parent != "":
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	if err := validateTree(t.Nodes); err != nil {
		return nil, false, fmt.Errorf("handlers: tree %q version %d is not a whole tree: %w", tree, target, err)
	}
	return t, false, nil
}

// stillThere reports whether the documents of got that the sweeper may
// have removed during the read (those at or below minKept, as read after
// it) are all still there. A MongoDB cursor is no snapshot: a scan that
// spans the sweeper's removal can meet a removed node's old document
// before its removal and reach its tombstone's place after the tombstone's.
// The sweeper removes the old document first, so a read that took it finds
// it gone here.
func stillThere(ctx context.Context, nodes *mongo.Collection, tree string, got map[string]nodeDoc, minKept int64) (bool, error) {
	var ids bson.A
	for _, d := range got {
		if d.Version <= minKept {
			ids = append(ids, d.ID)
		}
	}
	for len(ids) > 0 {
		batch := ids[:min(len(ids), 1000)]
		ids = ids[len(batch):]
		n, err := nodes.CountDocuments(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: batch}}}})
		if err != nil {
			return false, fmt.Errorf("handlers: tree %q: check that the documents read are still there: %w", tree, err)
		}
		if n != int64(len(batch)) {
			return false, nil
		}
	}
	return true, nil
}

// DefaultTreeKeep is how many published versions of each tree the sweeper
// keeps readable.
const DefaultTreeKeep = 5

// SweepTrees removes, in every tree, the node documents of versions that
// were never published and can no longer be (their publish lost a race or
// crashed), and keeps keep published versions readable, removing the
// documents only older versions needed. It returns how many documents it
// removed. A reader never sees the difference: a version stops being kept
// (in the tree's document) before any document it needs is removed, and a
// reader checks that its version is still kept after reading.
func SweepTrees(ctx context.Context, db *mongo.Database, keep int, log *zap.Logger) (int, error) {
	if keep < 1 {
		return 0, fmt.Errorf("handlers: sweep trees: keep %d must be at least 1", keep)
	}
	trees, nodes := treeColls(db)
	cur, err := trees.Find(ctx, bson.D{{Key: "published", Value: bson.D{{Key: "$gt", Value: 0}}}}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("handlers: sweep trees: %w", err)
	}
	defer closeCursor(ctx, cur)
	var ids []string
	for cur.Next(ctx) {
		if id, ok := cur.Current.Lookup("_id").StringValueOK(); ok {
			ids = append(ids, id)
		}
	}
	if err := cur.Err(); err != nil {
		return 0, fmt.Errorf("handlers: sweep trees: %w", err)
	}
	removed := 0
	for _, id := range ids {
		n, err := sweepTree(ctx, trees, nodes, id, keep)
		removed += n
		if jobs.IsPermanent(err) {
			// Another app's document: leave it, sweep the other trees.
			log.Warn("not sweeping a tree whose document is not docket's", zap.String("tree", id), zap.Error(err))
			continue
		}
		if err != nil {
			return removed, err
		}
		if n > 0 {
			log.Info("swept a tree", zap.String("tree", id), zap.Int("removed", n))
		}
	}
	return removed, nil
}

func sweepTree(ctx context.Context, trees, nodes *mongo.Collection, tree string, keep int) (int, error) {
	// With jobs: the trim below adds to it, so it must be an array.
	st, err := readTreeState(ctx, trees, tree, true)
	if err != nil {
		return 0, err
	}
	published := bson.A{}
	for _, v := range st.Versions {
		published = append(published, v.V)
	}
	// 1. Versions below the published one that were never published can
	// never be: publishing needs the published version to be the one the
	// publish started from, which is below the version it took. Below
	// minKept, such a version's documents are drafts (written late by an
	// attempt that stalled after allocating it).
	res, err := nodes.DeleteMany(ctx, bson.D{
		{Key: "tree", Value: tree},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: "version", Value: bson.D{{Key: "$gte", Value: st.MinKept}, {Key: "$lt", Value: st.Published}, {Key: "$nin", Value: published}}}},
			bson.D{{Key: "version", Value: bson.D{{Key: "$lt", Value: st.MinKept}}}, {Key: "draft", Value: true}},
		}},
	})
	if err != nil {
		return 0, fmt.Errorf("tree %q: remove abandoned versions: %w", tree, err)
	}
	removed := int(res.DeletedCount)
	if len(st.Versions) <= keep {
		// A trim applied by an earlier pass that stopped before its
		// removal (its reply lost or carrying a writeConcernError, a
		// refused delete, a crash) left the documents below minKept:
		// removed now, since no trim will come until the next publish.
		if st.MinKept > 0 && st.SweptTo < st.MinKept {
			n, err := removeSuperseded(ctx, trees, nodes, tree, st.MinKept)
			return removed + n, err
		}
		return removed, nil
	}
	// 2. Stop keeping the oldest versions, conditioned on no publish since
	// the read, before removing anything they needed.
	// The job ids of the versions trimmed go to jobs in the same write, so
	// a job is always found in one or the other (a publish by this version
	// put it in both; one by the previous version only in versions).
	kept := st.Versions[len(st.Versions)-keep:]
	minKept := kept[0].V
	trimmedJobs, trimmed := bson.A{}, bson.A{}
	for _, v := range st.Versions[:len(st.Versions)-keep] {
		trimmed = append(trimmed, v.V)
		if v.Job != "" {
			trimmedJobs = append(trimmedJobs, v.Job)
		}
	}
	// The trimmed versions' documents stop being drafts first: once below
	// minKept, only documents that are not drafts are read. They belong to
	// published versions (listed in versions), so clearing draft changes
	// nothing a reader sees now, and is harmless if the trim below does not
	// happen. Every document of a version is written before its publish, by
	// the one round that allocated it, so none can land after this.
	if _, err := nodes.UpdateMany(ctx,
		bson.D{{Key: "tree", Value: tree}, {Key: "version", Value: bson.D{{Key: "$in", Value: trimmed}}}, {Key: "draft", Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "draft", Value: ""}}}}); err != nil {
		return removed, fmt.Errorf("tree %q: publish the documents of the versions it trims: %w", tree, err)
	}
	update := bson.D{{Key: "$set", Value: bson.D{{Key: "versions", Value: kept}, {Key: "minKept", Value: minKept}}}}
	if len(trimmedJobs) > 0 {
		update = append(update, bson.E{Key: "$addToSet", Value: bson.D{{Key: "jobs", Value: bson.D{{Key: "$each", Value: trimmedJobs}}}}})
	}
	upd, err := trees.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: tree}, {Key: "published", Value: st.Published}, {Key: "minKept", Value: minKeptAsRead(st.MinKept)}},
		update)
	if err != nil {
		return removed, fmt.Errorf("tree %q: trim its versions: %w", tree, err)
	}
	if upd.MatchedCount == 0 {
		return removed, nil // published or swept meanwhile: next pass
	}
	n, err := removeSuperseded(ctx, trees, nodes, tree, minKept)
	return removed + n, err
}

// removeSuperseded is the sweep's step 3 for a tree trimmed to minKept: it
// removes the node documents below minKept that no reader needs, then
// records that it did (sweptTo), so that a pass that stopped before it is
// finished by the next.
func removeSuperseded(ctx context.Context, trees, nodes *mongo.Collection, tree string, minKept int64) (int, error) {
	removed := 0
	// 3. Below minKept every node needs only its newest document, and not
	// even that when it is a tombstone; a draft there is the late write of
	// a version never published (an attempt that stalled after allocating
	// it), which no reader takes: removed too. At minKept, a published
	// version still listed, drafts count.
	cur, err := nodes.Find(ctx, bson.D{{Key: "tree", Value: tree}, {Key: "version", Value: bson.D{{Key: "$lte", Value: minKept}}}},
		options.Find().SetProjection(bson.D{{Key: "node", Value: 1}, {Key: "version", Value: 1}, {Key: "deleted", Value: 1}, {Key: "draft", Value: 1}}))
	if err != nil {
		return removed, fmt.Errorf("tree %q: read old versions: %w", tree, err)
	}
	defer closeCursor(ctx, cur)
	var docs []nodeDoc
	for cur.Next(ctx) {
		var d nodeDoc
		if bson.Unmarshal(cur.Current, &d) == nil {
			docs = append(docs, d)
		}
	}
	if err := cur.Err(); err != nil {
		return removed, fmt.Errorf("tree %q: read old versions: %w", tree, err)
	}
	older, tombs := supersededBelow(docs, minKept)
	// The tombstones go last, in deletes of their own: MongoDB applies a
	// deleteMany one document at a time while readers read, and a
	// tombstone removed before an older document of its node would let a
	// reader take that document and bring the node back.
	for _, gone := range []bson.A{older, tombs} {
		n, err := deleteIDs(ctx, nodes, gone)
		removed += n
		if err != nil {
			return removed, fmt.Errorf("tree %q: remove superseded versions: %w", tree, err)
		}
	}
	// Conditioned on minKept: a later trim's removal is still to do.
	if _, err := trees.UpdateOne(ctx, bson.D{{Key: "_id", Value: tree}, {Key: "minKept", Value: minKept}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "sweptTo", Value: minKept}}}}); err != nil {
		return removed, fmt.Errorf("tree %q: record its sweep: %w", tree, err)
	}
	return removed, nil
}

// supersededBelow returns, of docs (a tree's node documents at or below
// minKept), those no reader needs: older are the drafts below minKept and
// the documents of a node older than its newest; tombs the newest ones
// that are tombstones.
func supersededBelow(docs []nodeDoc, minKept int64) (older, tombs bson.A) {
	newest := map[string]nodeDoc{}
	for _, d := range docs {
		if d.Draft && d.Version < minKept {
			older = append(older, d.ID)
			continue
		}
		if old, ok := newest[d.Node]; !ok || d.Version > old.Version {
			newest[d.Node] = d
		}
	}
	for _, d := range docs {
		n, ok := newest[d.Node]
		switch {
		case !ok || d.Draft && d.Version < minKept:
		case n.ID != d.ID:
			older = append(older, d.ID)
		case n.Deleted:
			tombs = append(tombs, d.ID)
		}
	}
	return older, tombs
}

// deleteIDs deletes the documents of coll whose ids are ids, 1,000 ids a
// command, and returns how many it deleted.
func deleteIDs(ctx context.Context, coll *mongo.Collection, ids bson.A) (int, error) {
	removed := 0
	for len(ids) > 0 {
		batch := ids[:min(len(ids), 1000)]
		ids = ids[len(batch):]
		res, err := coll.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: batch}}}})
		if err != nil {
			return removed, err
		}
		removed += int(res.DeletedCount)
	}
	return removed, nil
}

func minKeptAsRead(v int64) any {
	if v == 0 {
		return bson.D{{Key: "$in", Value: bson.A{nil, int64(0)}}}
	}
	return v
}
