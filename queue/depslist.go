package queue

// A parent's list of its dependents (deps.go's protocol, steps 1 and 3).
//
// The link adds each dependent's _id to its parents' dependentIds, before
// it marks them, so that a parent's settle writes to its own dependents by
// _id (the _id index) rather than searching the collection for the jobs
// whose after holds it: what a parent's end costs grows with its number
// of dependents, not with the collection's size. A dependent's own
// waitingOn stays the truth the settle writes to: a $pull of the parent is
// applied once however often the settle runs, and the release is
// conditioned on waitingOn being empty.
//
// A parent is settled through its list only when the list holds every job
// linked to it: the list is started only on a parent that no link has
// marked yet (with neither dependents nor dependentsDue: an older docket
// marked parents without a list), or added to once started; a parent whose
// list would pass maxListedDependents is flagged dependentsMany. A parent
// without a list, or flagged, is settled by {after: id} (the after index).

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/docketq/docket/internal/store"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

const (
	dependentIdsField   = store.DependentIdsField
	dependentsManyField = store.DependentsManyField
	// maxListedDependents bounds a parent's list so that the parent's
	// document stays within MongoDB's 16 MiB at every other bound
	// (docs/WORKFLOWS.md has the sum): 10,000 ids of 256 bytes take some
	// 2.7 MB, beside after and waitingOn's 10.7 MB and args' 1 MiB.
	maxListedDependents = 10_000
	// idChunk bounds the ids of one $in, so that one command reads a
	// bounded number of documents (devdb pushes an $in of up to 500 ids
	// down to its table's _id lookup).
	idChunk = 500
)

// maxListedKey is the context key of a test's bound on a parent's list,
// in place of maxListedDependents.
type maxListedKey struct{}

// maxListed is the bound on a parent's list for a link under ctx.
func maxListed(ctx context.Context) int {
	if n, ok := ctx.Value(maxListedKey{}).(int); ok {
		return n
	}
	return maxListedDependents
}

// idChunks splits ids into slices of at most idChunk.
func idChunks(ids bson.A) []bson.A {
	var out []bson.A
	for lo := 0; lo < len(ids); lo += idChunk {
		out = append(out, ids[lo:min(lo+idChunk, len(ids))])
	}
	return out
}

// bsonA is vals as a bson.A.
func bsonA[T any](vals []T) bson.A {
	out := make(bson.A, len(vals))
	for i, v := range vals {
		out[i] = v
	}
	return out
}

// idIn is the filter element _id: {$in: ids}.
func idIn(ids bson.A) bson.E {
	return bson.E{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}
}

// prelistedKey is the context key of an InsertWorkflow's prelisted.
type prelistedKey struct{}

// prelisted is the parents an InsertWorkflow inserted with the list of
// every task that waits for them: its links list nothing on them.
type prelisted struct {
	mu  sync.Mutex
	ids map[string]bool
}

// preListed records, for the InsertWorkflow of ctx, that the job with id
// was inserted with the list of every task that waits for it.
func preListed(ctx context.Context, id string) {
	if p, ok := ctx.Value(prelistedKey{}).(*prelisted); ok {
		p.mu.Lock()
		p.ids[id] = true
		p.mu.Unlock()
	}
}

// listedAlready says whether the InsertWorkflow of ctx inserted the
// parent with id with its list of dependents.
func listedAlready(ctx context.Context) func(id string) bool {
	p, ok := ctx.Value(prelistedKey{}).(*prelisted)
	if !ok {
		return func(string) bool { return false }
	}
	return func(id string) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.ids[id]
	}
}

// kinGroup is the parents that get the same dependents listed.
type kinGroup struct {
	kids    bson.A
	parents bson.A
}

// groupByDependents groups the parents of ds, but those listed already,
// by the dependents of ds that wait for them (a fan-in's parents share one
// group, so one write lists the child on all of them).
func groupByDependents(ds []dependent, listed func(string) bool) []*kinGroup {
	kidsOf := map[string]bson.A{}
	var order []string
	for _, d := range ds {
		for _, p := range d.waitingOn {
			if listed(p) {
				continue
			}
			if _, ok := kidsOf[p]; !ok {
				order = append(order, p)
			}
			kidsOf[p] = append(kidsOf[p], d.id)
		}
	}
	byKey := map[string]*kinGroup{}
	var out []*kinGroup
	for _, p := range order {
		kids := kidsOf[p]
		var key strings.Builder
		for _, k := range kids {
			fmt.Fprintf(&key, "%T:%v\x00", asID(k), asID(k))
		}
		g, ok := byKey[key.String()]
		if !ok {
			g = &kinGroup{kids: kids}
			byKey[key.String()] = g
			out = append(out, g)
		}
		g.parents = append(g.parents, p)
	}
	return out
}

// listDependents adds the ids of ds to the lists of the parents they wait
// for, or flags dependentsMany the parents whose list the add would take
// past its bound; it writes nothing to a parent marked without a list.
// Safe to repeat ($addToSet).
func (c *Client) listDependents(ctx context.Context, ds []dependent) error {
	var models []mongo.WriteModel
	for _, g := range groupByDependents(ds, listedAlready(ctx)) {
		for _, ids := range idChunks(g.parents) {
			models = append(models, listModels(ids, g.kids, maxListed(ctx))...)
		}
	}
	if len(models) == 0 {
		return nil
	}
	if _, err := c.coll.BulkWrite(ctx, models); err != nil {
		return fmt.Errorf("queue: list %d jobs on their parents: %w", len(ds), err)
	}
	return nil
}

// listModels are the writes that list kids on the parents ids, whose lists
// hold at most bound: the add where the list has room for all of kids
// (its element bound-len(kids) missing, so the list ends at most bound
// long), the flag where it has not. More kids than bound flag the parents
// at once.
func listModels(ids, kids bson.A, bound int) []mongo.WriteModel {
	notFlagged := bson.E{Key: dependentsManyField, Value: bson.D{{Key: "$ne", Value: true}}}
	flag := bson.D{{Key: "$set", Value: bson.D{{Key: dependentsManyField, Value: true}}}}
	if len(kids) > bound {
		return []mongo.WriteModel{mongo.NewUpdateManyModel().SetFilter(bson.D{idIn(ids), notFlagged}).SetUpdate(flag)}
	}
	full := fmt.Sprintf("%s.%d", dependentIdsField, bound-len(kids))
	listable := bson.E{Key: "$or", Value: bson.A{
		bson.D{{Key: dependentIdsField, Value: bson.D{{Key: "$type", Value: "array"}}}},
		bson.D{
			{Key: dependentIdsField, Value: bson.D{{Key: "$exists", Value: false}}},
			noDependents,
			store.NotDue,
		},
	}}
	return []mongo.WriteModel{
		mongo.NewUpdateManyModel().
			SetFilter(bson.D{idIn(ids), {Key: full, Value: bson.D{{Key: "$exists", Value: false}}}, listable}).
			SetUpdate(bson.D{{Key: "$addToSet", Value: bson.D{{Key: dependentIdsField, Value: bson.D{{Key: "$each", Value: kids}}}}}}),
		mongo.NewUpdateManyModel().
			SetFilter(bson.D{idIn(ids), {Key: full, Value: bson.D{{Key: "$exists", Value: true}}}, notFlagged}).
			SetUpdate(flag),
	}
}

// dependentsMatch returns the filter elements that select, among them,
// every job that waits for the parent with id, read as raw (its
// dependentIds and dependentsMany): _id among its list, a chunk at a time,
// or, for a parent without a complete list of strings, after holding id.
func dependentsMatch(id any, raw bson.Raw) []bson.E {
	whole := []bson.E{{Key: afterField, Value: id}}
	if many, _ := raw.Lookup(dependentsManyField).BooleanOK(); many {
		return whole
	}
	arr, ok := raw.Lookup(dependentIdsField).ArrayOK()
	if !ok {
		return whole
	}
	vals, err := arr.Values()
	if err != nil {
		return whole
	}
	ids := make(bson.A, len(vals))
	for i, v := range vals {
		// Another app's element of another type: a regex in an $in
		// matches by pattern, a number is not a job's id.
		if v.Type != bson.TypeString {
			return whole
		}
		ids[i] = v
	}
	var out []bson.E
	for _, chunk := range idChunks(ids) {
		out = append(out, idIn(chunk))
	}
	return out
}
