package queue

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Explained is one query docket runs, as the command explain wraps. It and
// the helpers below are exported for the explain tests of the handlers'
// collections (package queue_test).
type Explained struct {
	Name string
	Cmd  bson.D // find, findAndModify, update or delete
	// Index is the index the winning plan must scan; "" for a lookup by _id
	// (IDHACK, EXPRESS_* or an IXSCAN of _id_).
	Index string
	// SortOK, when set, says why a blocking SORT is acceptable here.
	SortOK string
}

// RealMongoDB returns a fresh database on the real MongoDB named by
// DOCKET_TEST_MONGO_URI, and skips t when there is none: devdb (FerretDB)
// answers explain with its own plans, which say nothing about MongoDB's
// query planner.
func RealMongoDB(t *testing.T) *mongo.Database {
	t.Helper()
	if os.Getenv(testdb.EnvMongoURI) == "" {
		t.Skipf("explain checks need a real MongoDB: set %s (devdb is FerretDB, whose explain is not MongoDB's query planner)", testdb.EnvMongoURI)
	}
	db := testdb.NewDB(t)
	var info bson.M
	require.NoError(t, db.RunCommand(context.Background(), bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info))
	for k := range info {
		if strings.Contains(strings.ToLower(k), "ferretdb") {
			t.Skipf("explain checks need a real MongoDB: %s is FerretDB", testdb.EnvMongoURI)
		}
	}
	return db
}

// CheckPlans runs explain (queryPlanner verbosity: nothing is executed or
// written) on each query and fails on a COLLSCAN, on a blocking SORT that
// is not declared acceptable, and on a winning plan that does not scan the
// expected index. It reads the classic engine's plan ({stage, inputStage,
// inputStages}), the slot-based engine's (winningPlan.queryPlan) and a
// sharded cluster's (winningPlan.shards[].winningPlan) alike, by walking
// every "stage" under winningPlan.
func CheckPlans(t *testing.T, db *mongo.Database, qs []Explained) {
	t.Helper()
	for _, q := range qs {
		t.Run(q.Name, func(t *testing.T) {
			var reply bson.Raw
			err := db.RunCommand(context.Background(), bson.D{
				{Key: "explain", Value: q.Cmd},
				{Key: "verbosity", Value: "queryPlanner"},
			}).Decode(&reply)
			require.NoError(t, err)
			require.NoError(t, planProblem(reply, q))
		})
	}
}

// planProblem returns what is wrong with the winning plan of an explain
// reply for q, or nil.
func planProblem(reply bson.Raw, q Explained) error {
	plan, err := reply.LookupErr("queryPlanner", "winningPlan")
	if err != nil {
		return fmt.Errorf("no queryPlanner.winningPlan in %s", reply)
	}
	var stages []string
	indexes := map[string]bool{}
	walkPlan(plan, &stages, indexes)
	summary := fmt.Sprintf("stages %v, indexes %v; plan %s", stages, indexes, plan)
	for _, s := range stages {
		if s == "COLLSCAN" {
			return fmt.Errorf("collection scan: %s", summary)
		}
		if s == "SORT" && q.SortOK == "" {
			return fmt.Errorf("blocking SORT: %s", summary)
		}
	}
	if q.Index == "" {
		if !hasIDLookup(stages, indexes) {
			return fmt.Errorf("expected a lookup by _id: %s", summary)
		}
		return nil
	}
	if !indexes[q.Index] {
		return fmt.Errorf("expected a scan of index %s: %s", q.Index, summary)
	}
	return nil
}

// walkPlan collects the stage names and scanned index names of a plan
// tree, whatever its nesting.
func walkPlan(v bson.RawValue, stages *[]string, indexes map[string]bool) {
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		elems, _ := v.Document().Elements()
		for _, e := range elems {
			switch e.Key() {
			case "stage":
				if s, ok := e.Value().StringValueOK(); ok {
					*stages = append(*stages, s)
				}
			case "indexName":
				if s, ok := e.Value().StringValueOK(); ok {
					indexes[s] = true
				}
			case "rejectedPlans":
				continue
			default:
				walkPlan(e.Value(), stages, indexes)
			}
		}
	case bson.TypeArray:
		vals, _ := v.Array().Values()
		for _, x := range vals {
			walkPlan(x, stages, indexes)
		}
	}
}

func hasIDLookup(stages []string, indexes map[string]bool) bool {
	if indexes["_id_"] {
		return true
	}
	for _, s := range stages {
		if s == "IDHACK" || strings.HasPrefix(s, "EXPRESS") {
			return true
		}
	}
	return false
}

// TestExplainJobsQueries: on a real MongoDB, each query docket runs on the
// jobs collection, built by the code that runs it where that code is a
// function (the claim's filter, sort and update), uses its index without a
// collection scan or a blocking sort.
func TestExplainJobsQueries(t *testing.T) {
	db := RealMongoDB(t)
	c, err := New(db, Config{})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, c.EnsureIndexes(ctx))
	seedBacklog(t, c)

	t0 := time.Now().UTC().Truncate(time.Millisecond)
	p := store.ClaimParams{Owner: "w", Queues: []string{"default", "q1"}, Kinds: []string{"k0", "k1", "k2"}, Lease: time.Minute}
	filter, update, claimSort, claimWindow := store.ClaimQuery(p, t0, "token")
	coll := c.coll.Name()
	stamp := append(append(bson.D{}, filter...), bson.E{Key: "$or", Value: bson.A{
		bson.D{{Key: "_id", Value: "j1"}, {Key: "attempt", Value: 0}, {Key: "updatedAt", Value: t0}},
		bson.D{{Key: "_id", Value: "j2"}, {Key: "attempt", Value: 0}, {Key: "updatedAt", Value: t0}},
	}})
	fence := bson.D{{Key: "_id", Value: "j1"}, {Key: "state", Value: jobs.StateRunning}, {Key: "leaseToken", Value: "token"}}
	CheckPlans(t, db, []Explained{
		{Name: "claim findAndModify", Index: claimIndex, Cmd: bson.D{
			{Key: "findAndModify", Value: coll}, {Key: "query", Value: filter}, {Key: "sort", Value: claimSort},
			{Key: "update", Value: update}, {Key: "new", Value: true},
		}},
		{Name: "batch claim find", Index: claimIndex, Cmd: bson.D{
			{Key: "find", Value: coll}, {Key: "filter", Value: filter}, {Key: "sort", Value: claimSort},
			{Key: "limit", Value: 10 * claimWindow},
		}},
		{Name: "batch claim stamp", Index: "", Cmd: bson.D{
			{Key: "update", Value: coll}, {Key: "updates", Value: bson.A{bson.D{
				{Key: "q", Value: stamp}, {Key: "u", Value: update}, {Key: "multi", Value: true},
			}}},
		}},
		{Name: "batch claim read back", Index: "", SortOK: "sorts the at most claimBatch jobs it fetched by _id", Cmd: bson.D{
			{Key: "find", Value: coll}, {Key: "filter", Value: bson.D{
				{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"j1", "j2"}}}},
				{Key: "state", Value: jobs.StateRunning}, {Key: "leaseToken", Value: "token"},
			}}, {Key: "sort", Value: claimSort},
		}},
		{Name: "fenced write (heartbeat, complete, fail)", Index: "", Cmd: bson.D{
			{Key: "update", Value: coll}, {Key: "updates", Value: bson.A{bson.D{
				{Key: "q", Value: fence}, {Key: "u", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "updatedAt", Value: t0}}}}},
			}}},
		}},
		{Name: "reap find", Index: "reap", Cmd: bson.D{
			{Key: "find", Value: coll}, {Key: "filter", Value: bson.D{
				{Key: "state", Value: jobs.StateRunning},
				{Key: "leaseExpiresAt", Value: bson.D{{Key: "$lt", Value: t0}}},
			}}, {Key: "projection", Value: bson.D{{Key: "args", Value: 0}}}, {Key: "limit", Value: 500},
		}},
		{Name: "retention find", Index: "finished", Cmd: bson.D{
			{Key: "find", Value: coll}, {Key: "filter", Value: bson.D{
				{Key: "state", Value: jobs.StateSucceeded},
				{Key: "finishedAt", Value: bson.D{{Key: "$lt", Value: t0}}},
			}}, {Key: "projection", Value: bson.D{{Key: "_id", Value: 1}}}, {Key: "limit", Value: 500},
		}},
		{Name: "retention delete", Index: "", Cmd: bson.D{
			{Key: "delete", Value: coll}, {Key: "deletes", Value: bson.A{bson.D{
				{Key: "q", Value: bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"j1", "j2"}}}}, {Key: "state", Value: jobs.StateSucceeded}}},
				{Key: "limit", Value: 0},
			}}},
		}},
		{Name: "unique key lookup", Index: "uniqueKey", Cmd: bson.D{
			{Key: "find", Value: coll}, {Key: "filter", Value: bson.D{{Key: "uniqueKey", Value: "u1"}}},
			{Key: "projection", Value: bson.D{{Key: "_id", Value: 1}}}, {Key: "limit", Value: 1},
		}},
		{Name: "occupied capacity slots", Index: capacityIndex, Cmd: bson.D{
			{Key: "find", Value: coll}, {Key: "filter", Value: bson.D{{Key: capacitySlotField, Value: bson.D{{Key: "$gte", Value: "q1/"}, {Key: "$lt", Value: "q10"}}}}},
			{Key: "projection", Value: bson.D{{Key: "_id", Value: 0}, {Key: capacitySlotField, Value: 1}}},
		}},
		{Name: "stranded capacity slots", Index: capacityIndex, Cmd: bson.D{
			{Key: "update", Value: coll}, {Key: "updates", Value: bson.A{bson.D{
				{Key: "q", Value: bson.D{{Key: "$or", Value: bson.A{
					bson.D{{Key: capacitySlotField, Value: bson.D{{Key: "$type", Value: "null"}}}},
					bson.D{
						{Key: capacitySlotField, Value: bson.D{{Key: "$exists", Value: true}}},
						{Key: "state", Value: bson.D{{Key: "$nin", Value: bson.A{jobs.StateAvailable, jobs.StateRunning}}}},
					},
				}}}},
				{Key: "u", Value: bson.D{{Key: "$unset", Value: bson.D{{Key: capacitySlotField, Value: ""}}}}},
				{Key: "multi", Value: true},
			}}},
		}},
	})
}

// seedBacklog inserts a backlog shaped like a busy deployment's: jobs in
// every state, several queues, kinds and priorities, most runnable, some
// scheduled later, so that the planner chooses among indexes on data.
func seedBacklog(t *testing.T, c *Client) {
	t.Helper()
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	states := []jobs.State{jobs.StateAvailable, jobs.StateAvailable, jobs.StateAvailable, jobs.StateRunning, jobs.StateSucceeded, jobs.StateDead}
	docs := make([]any, 0, 3000)
	for i := range 3000 {
		s := states[i%len(states)]
		d := bson.D{
			{Key: "_id", Value: fmt.Sprintf("seed-%05d", i)},
			{Key: "kind", Value: fmt.Sprintf("k%d", i%5)},
			{Key: "queue", Value: []string{"default", "q1", "q2"}[i%3]},
			{Key: "state", Value: s},
			{Key: "priority", Value: i % 4},
			{Key: "runAt", Value: t0.Add(time.Duration(i%7-3) * time.Minute)},
			{Key: "attempt", Value: 0},
			{Key: "args", Value: bson.D{{Key: "n", Value: i}}},
			{Key: "createdAt", Value: t0},
			{Key: "updatedAt", Value: t0},
		}
		switch s {
		case jobs.StateRunning:
			d = append(d, bson.E{Key: "leaseToken", Value: fmt.Sprintf("tok-%d", i)}, bson.E{Key: "leaseExpiresAt", Value: t0.Add(time.Duration(i%5-2) * time.Minute)})
		case jobs.StateSucceeded, jobs.StateDead:
			d = append(d, bson.E{Key: "finishedAt", Value: t0.Add(-time.Duration(i%48) * time.Hour)})
		}
		if i%10 == 0 {
			d = append(d, bson.E{Key: "uniqueKey", Value: fmt.Sprintf("u%d", i)})
		}
		docs = append(docs, d)
	}
	_, err := c.coll.InsertMany(context.Background(), docs)
	require.NoError(t, err)
}

// TestPlanProblem checks the explain reader on the shapes MongoDB's
// documentation gives for explain output ("Explain Results"): the classic
// engine's stage tree, the slot-based engine's winningPlan.queryPlan, and a
// sharded cluster's winningPlan.shards[]. It needs no server, so it runs on
// devdb too and keeps the real-MongoDB test honest.
func TestPlanProblem(t *testing.T) {
	parse := func(s string) bson.Raw {
		t.Helper()
		var r bson.Raw
		require.NoError(t, bson.UnmarshalExtJSON([]byte(s), false, &r))
		return r
	}
	claim := Explained{Index: "claim_v2"}
	for _, tc := range []struct {
		name, reply string
		q           Explained
		wantErr     string
	}{
		{"classic sort merge", `{"queryPlanner": {"winningPlan": {"stage": "UPDATE", "inputStage": {"stage": "LIMIT", "inputStage": {"stage": "FETCH",
			"inputStage": {"stage": "SORT_MERGE", "inputStages": [{"stage": "IXSCAN", "indexName": "claim_v2"}, {"stage": "IXSCAN", "indexName": "claim_v2"}]}}}},
			"rejectedPlans": [{"stage": "SORT", "inputStage": {"stage": "COLLSCAN"}}]}}`, claim, ""},
		{"classic blocking sort", `{"queryPlanner": {"winningPlan": {"stage": "FETCH", "inputStage": {"stage": "SORT",
			"inputStage": {"stage": "IXSCAN", "indexName": "claim"}}}}}`, claim, "blocking SORT"},
		{"blocking sort declared acceptable", `{"queryPlanner": {"winningPlan": {"stage": "SORT",
			"inputStage": {"stage": "FETCH", "inputStage": {"stage": "IXSCAN", "indexName": "_id_"}}}}}`, Explained{SortOK: "few"}, ""},
		{"slot-based collection scan", `{"queryPlanner": {"winningPlan": {"queryPlan": {"stage": "LIMIT", "inputStage": {"stage": "COLLSCAN"}},
			"slotBasedPlan": {"slots": "...", "stages": "[1] limit 1 [2] scan s1 s2"}}}}`, claim, "collection scan"},
		{"slot-based index scan", `{"queryPlanner": {"winningPlan": {"queryPlan": {"stage": "FETCH", "inputStage": {"stage": "IXSCAN", "indexName": "reap"}},
			"slotBasedPlan": {"stages": "[1] nlj"}}}}`, Explained{Index: "reap"}, ""},
		{"wrong index", `{"queryPlanner": {"winningPlan": {"stage": "FETCH", "inputStage": {"stage": "IXSCAN", "indexName": "reap"}}}}`,
			Explained{Index: "finished"}, "expected a scan of index finished"},
		{"sharded, one shard scans", `{"queryPlanner": {"winningPlan": {"stage": "SHARD_MERGE", "shards": [
			{"shardName": "s0", "winningPlan": {"stage": "FETCH", "inputStage": {"stage": "IXSCAN", "indexName": "claim_v2"}}},
			{"shardName": "s1", "winningPlan": {"stage": "COLLSCAN"}}]}}}`, claim, "collection scan"},
		{"id lookup", `{"queryPlanner": {"winningPlan": {"stage": "UPDATE", "inputStage": {"stage": "IDHACK"}}}}`, Explained{}, ""},
		{"express id lookup", `{"queryPlanner": {"winningPlan": {"stage": "EXPRESS_IXSCAN", "keyPattern": "{ _id: 1 }"}}}`, Explained{}, ""},
		{"id expected, other index", `{"queryPlanner": {"winningPlan": {"stage": "FETCH", "inputStage": {"stage": "IXSCAN", "indexName": "claim_v2"}}}}`,
			Explained{}, "expected a lookup by _id"},
		{"not an explain reply", `{"queryPlanner": {"Plan": ["SCAN jobs"]}}`, claim, "no queryPlanner.winningPlan"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := planProblem(parse(tc.reply), tc.q)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
