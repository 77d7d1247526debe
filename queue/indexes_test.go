package queue

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// indexSpec is what an index declaration says: its name, keys in order,
// and options.
type indexSpec struct {
	name           string
	keys           bson.D
	unique, sparse bool
}

func declared(t *testing.T, models []mongo.IndexModel) []indexSpec {
	t.Helper()
	var out []indexSpec
	for _, m := range models {
		var o options.IndexOptions
		require.NotNil(t, m.Options, "index %v has no options, so no name", m.Keys)
		for _, set := range m.Options.List() {
			require.NoError(t, set(&o))
		}
		require.NotNil(t, o.Name, "index %v has no name: EnsureIndexes would build it on every start", m.Keys)
		keys, ok := m.Keys.(bson.D)
		require.True(t, ok, "index %s: keys must be an ordered bson.D", *o.Name)
		out = append(out, indexSpec{name: *o.Name, keys: keys, unique: o.Unique != nil && *o.Unique, sparse: o.Sparse != nil && *o.Sparse})
	}
	return out
}

// retiredIndexes are names docket used for indexes whose keys have since
// changed. EnsureIndexes goes by name, so a name must never come back with
// other keys: deployments that have the old index would keep it and never
// build the new one.
var retiredIndexes = map[string]bson.D{
	claimIndexV1: {{Key: "state", Value: 1}, {Key: "queue", Value: 1}, {Key: "priority", Value: -1}, {Key: "runAt", Value: 1}},
}

// TestIndexesDeclared pins the index specs the code declares, so that a
// refactor cannot silently drop a key (the claim index once lacked _id and
// kind, which on MongoDB makes every claim on a large backlog a blocking
// in-memory sort), rename an index, or lose unique or sparse.
func TestIndexesDeclared(t *testing.T) {
	want := []indexSpec{
		{name: "claim_v2", keys: bson.D{
			{Key: "state", Value: 1}, {Key: "queue", Value: 1}, {Key: "kind", Value: 1},
			{Key: "priority", Value: -1}, {Key: "runAt", Value: 1}, {Key: "_id", Value: 1},
		}},
		{name: "reap", keys: bson.D{{Key: "state", Value: 1}, {Key: "leaseExpiresAt", Value: 1}}},
		{name: "finished", keys: bson.D{{Key: "state", Value: 1}, {Key: "finishedAt", Value: 1}}},
		{name: "uniqueKey", keys: bson.D{{Key: "uniqueKey", Value: 1}}, unique: true, sparse: true},
		{name: "uniquePeriodKey", keys: bson.D{{Key: "uniquePeriodKey", Value: 1}}, unique: true, sparse: true},
		{name: "capacitySlot", keys: bson.D{{Key: "capacitySlot", Value: 1}}, unique: true, sparse: true},
		{name: "kindRunSlot", keys: bson.D{{Key: "kindRunSlot", Value: 1}}, unique: true, sparse: true},
		{name: "queueRunSlot", keys: bson.D{{Key: "queueRunSlot", Value: 1}}, unique: true, sparse: true},
		{name: "kindPartSlot", keys: bson.D{{Key: "kindPartSlot", Value: 1}}, unique: true, sparse: true},
		{name: "queuePartSlot", keys: bson.D{{Key: "queuePartSlot", Value: 1}}, unique: true, sparse: true},
		{name: "after", keys: bson.D{{Key: "after", Value: 1}}, sparse: true},
		{name: "dependentsDue", keys: bson.D{{Key: "dependentsDue", Value: 1}}, sparse: true},
		{name: "linking", keys: bson.D{{Key: "linking", Value: 1}}, sparse: true},
		{name: "workflow", keys: bson.D{{Key: "workflow", Value: 1}}, sparse: true},
	}
	got := declared(t, jobIndexes())
	require.Equal(t, want, got)

	names := map[string]bool{}
	for _, s := range got {
		require.False(t, names[s.name], "index name %q declared twice", s.name)
		names[s.name] = true
		if old, ok := retiredIndexes[s.name]; ok {
			require.Equal(t, old, s.keys, "index name %q is retired: an index with new keys needs a new name", s.name)
		}
	}
}

// TestClaimIndexServesClaim derives the claim index from the claim's own
// query: its equality fields (those claimFilter matches exactly or with
// $in), then claimSort field for field and direction for direction. Change
// the claim's filter or sort and this fails until the index follows.
func TestClaimIndexServesClaim(t *testing.T) {
	var claim indexSpec
	for _, s := range declared(t, jobIndexes()) {
		if s.name == claimIndex {
			claim = s
		}
	}
	require.NotEmpty(t, claim.keys, "no index named %s", claimIndex)

	var equality []string
	filter, _, claimSort, _ := store.ClaimQuery(store.ClaimParams{Queues: []string{"q"}, Kinds: []string{"k"}}, time.Now().UTC().Truncate(time.Millisecond), "")
	for _, e := range filter {
		op, isOp := e.Value.(bson.D)
		if !isOp || (len(op) == 1 && op[0].Key == "$in") {
			equality = append(equality, e.Key)
		}
	}
	require.Equal(t, []string{"state", "queue", "kind"}, equality)
	require.Len(t, claim.keys, len(equality)+len(claimSort))
	for i, k := range equality {
		require.Equal(t, k, claim.keys[i].Key, "claim index key %d", i)
	}
	for i, s := range claimSort {
		require.Equal(t, s, claim.keys[len(equality)+i], "claim index must end with the claim's sort, in order")
	}
}

// TestEnsureIndexesBuildsDeclared: what EnsureIndexes leaves on the server
// is what Indexes declares, keys in order and direction, and unique.
func TestEnsureIndexesBuildsDeclared(t *testing.T) {
	db := testdb.NewDB(t)
	c, err := New(db, Config{})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, c.EnsureIndexes(ctx))
	require.NoError(t, c.EnsureIndexes(ctx), "a second run finds them all by name")

	specs, err := c.coll.Indexes().ListSpecifications(ctx)
	require.NoError(t, err)
	onServer := map[string]mongo.IndexSpecification{}
	for _, s := range specs {
		onServer[s.Name] = s
	}
	for _, want := range declared(t, jobIndexes()) {
		s, ok := onServer[want.name]
		require.True(t, ok, "index %s not on the server; have %v", want.name, onServer)
		var keys bson.D
		require.NoError(t, bson.Unmarshal(s.KeysDocument, &keys))
		require.Len(t, keys, len(want.keys), "index %s", want.name)
		for i, k := range keys {
			require.Equal(t, want.keys[i].Key, k.Key, "index %s key %d", want.name, i)
			require.EqualValues(t, want.keys[i].Value, k.Value, "index %s key %s direction", want.name, k.Key)
		}
		require.Equal(t, want.unique, s.Unique != nil && *s.Unique, "index %s unique", want.name)
		// sparse is checked on the declaration only: devdb accepts it and
		// does not report it back (see shared/DATABASE.md).
	}
}
