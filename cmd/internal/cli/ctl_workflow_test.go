package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// enqueueWorkflow enqueues a small workflow "wf-1" through Enqueue with
// After (extract → transform → load; check after extract, cancelled, which
// cancels audit after it; report after extract and load, run anyway), and
// one task another application wrote: _id 7, a hostile name, waiting for
// extract. The workflow and workflowTask fields are written directly, as
// the builder will. unrelated is a job outside it.
func enqueueWorkflow(t *testing.T, db *mongo.Database) {
	t.Helper()
	ctx := context.Background()
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	for _, j := range []struct {
		id    string
		after []string
	}{{"extract", nil}, {"transform", []string{"extract"}}, {"load", []string{"transform"}}, {"check", []string{"extract"}},
		{"audit", []string{"check"}}, {"report", []string{"extract", "load"}}, {"unrelated", nil}} {
		_, err := q.Enqueue(ctx, "etl", bson.M{}, queue.InsertOpts{ID: j.id, After: j.after, AfterRunAnyway: j.id == "report"})
		require.NoError(t, err)
	}
	_, err = q.CancelJobID(ctx, queue.StringJobID("check"))
	require.NoError(t, err)
	coll := db.Collection(queue.DefaultCollection)
	_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: int32(7)}, {Key: "kind", Value: "k\x1b]52;c;ZXZpbA==\a"}, {Key: "state", Value: "dead\x1b[8m"},
		{Key: "after", Value: bson.A{"extract"}}, {Key: "workflow", Value: "wf-1"}, {Key: "workflowTask", Value: "t\r\x1b[2Kfake\nrow"}})
	require.NoError(t, err)
	for _, name := range []string{"extract", "transform", "load", "check", "audit", "report"} {
		_, err := coll.UpdateByID(ctx, name, bson.M{"$set": bson.M{"workflow": "wf-1", "workflowTask": name + "-task"}})
		require.NoError(t, err)
	}
	_, err = coll.UpdateByID(ctx, "extract", bson.M{"$set": bson.M{"result": bson.M{"rows": 7, "pad": strings.Repeat("x", 2000)}}})
	require.NoError(t, err)
}

// TestCtlWorkflow: `docketctl workflow wf-1` lists the workflow's tasks,
// parents before dependents, with what each waits on, why one was
// cancelled and the size of a result; a job's id (not a workflow's) lists
// its graph through after, bounded by --limit and saying how many it left
// out; hostile names and states are escaped; --json is exact.
func TestCtlWorkflow(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	enqueueWorkflow(t, db)

	out, stderr, code := runCtl(t, uri, db, "workflow", "wf-1")
	require.Equal(t, 0, code, stderr)
	requireSafe(t, out, false)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Equal(t, "workflow wf-1: 7 tasks, parents before dependents", lines[0])
	require.Equal(t, `by state: 3 blocked, 1 available, 2 cancelled, 1 "dead\x1b[8m"`, lines[1])
	require.Len(t, lines, 10, out)
	rows := map[string]string{}
	var order []string
	for _, l := range lines[3:] {
		f := strings.Fields(l)
		order = append(order, f[1])
		rows[f[1]] = strings.Join(f, " ")
	}
	// Parents first; ties by creation; the foreign task (no createdAt) last.
	require.Equal(t, []string{"extract", "transform", "load", "check", "audit", "report", "@EAcAAAA"}, order)
	require.Equal(t, "extract-task extract available 0/25 - 2.0 KB -", rows["extract"])
	require.Equal(t, "transform-task transform blocked 0/25 extract - -", rows["transform"])
	require.Equal(t, "check-task check cancelled 0/25 - - -", rows["check"], "a cancelled job waits for nothing")
	require.Equal(t, "audit-task audit cancelled 0/25 - - cancelled: parent check ended cancelled", rows["audit"])
	require.Equal(t, "report-task report blocked 0/25 extract,load (runs anyway) - -", rows["report"])
	require.Equal(t, `"t\r\x1b[2Kfake\nrow" @EAcAAAA ({"$numberInt":"7"}) "dead\x1b[8m" 0/0 - - -`, rows["@EAcAAAA"])

	// A job's id: the jobs connected to it, unrelated left out; the
	// foreign job by its token.
	out, stderr, code = runCtl(t, uri, db, "workflow", "load")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "job load and the jobs connected to it through after")
	require.Contains(t, out, "report-task")
	require.Contains(t, out, "@EAcAAAA")
	require.NotContains(t, out, "unrelated")
	out, stderr, code = runCtl(t, uri, db, "workflow", "--limit", "3", "@EAcAAAA")
	require.Equal(t, 0, code, stderr)
	requireSafe(t, out, false)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 7, out)
	require.Contains(t, out, ", 7 in all, parents before dependents\n")
	require.Contains(t, out, "\ntasks 1 to 3 of 7 shown (--offset, --limit)\n")
	require.Equal(t, "more: --offset 3\n", stderr)
	out, stderr, code = runCtl(t, uri, db, "workflow", "unrelated")
	require.Equal(t, 0, code, stderr)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 4, "a job alone is its own graph: %s", out)

	out, stderr, code = runCtl(t, uri, db, "workflow", "--json", "wf-1")
	require.Equal(t, 0, code, stderr)
	var v struct {
		Workflow string
		Tasks    []struct {
			ID, IDText, Name, State, Cancelled string
			WaitingOn                          []string
			ResultBytes                        *int
		}
		LeftOut, Total int
		States         []struct {
			State string
			N     int
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, "wf-1", v.Workflow)
	require.Equal(t, 7, v.Total)
	require.Zero(t, v.LeftOut)
	require.Len(t, v.States, 4)
	require.Equal(t, "dead\x1b[8m", v.States[3].State, "--json is exact")
	require.Len(t, v.Tasks, 7)
	require.Equal(t, "extract", v.Tasks[0].ID)
	require.NotNil(t, v.Tasks[0].ResultBytes)
	require.Greater(t, *v.Tasks[0].ResultBytes, 2000)
	require.Equal(t, "t\r\x1b[2Kfake\nrow", v.Tasks[6].Name, "--json is exact")
	require.Equal(t, "@EAcAAAA", v.Tasks[6].ID)
	require.Equal(t, "cancelled: parent check ended cancelled", v.Tasks[4].Cancelled)

	// The job of the workflow's id, not a task of it (a builder's gate),
	// is listed with the tasks and said to be their gate.
	_, err := db.Collection(queue.DefaultCollection).InsertOne(context.Background(), bson.D{{Key: "_id", Value: "wf-1"}, {Key: "kind", Value: "docket.workflow"},
		{Key: "state", Value: "succeeded"}, {Key: "createdAt", Value: time.Unix(0, 0)}})
	require.NoError(t, err)
	out, stderr, code = runCtl(t, uri, db, "workflow", "wf-1")
	require.Equal(t, 0, code, stderr)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	require.Equal(t, "workflow wf-1: 7 tasks and the job of its id (its gate: the tasks wait for it; succeeded, it published them), parents before dependents", lines[0])
	require.Equal(t, "docket.workflow wf-1 succeeded 0/0 - - -", strings.Join(strings.Fields(lines[3]), " "))

	_, stderr, code = runCtl(t, uri, db, "workflow", "nope")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "no workflow and no job with id nope")
}

// TestCtlWorkflowPages: `docketctl workflow --limit N --offset M` reads a
// workflow a page at a time, every task on one page, saying which tasks
// it shows of how many and printing the next --offset on stderr (as list
// prints --after); a task waiting on many parents lists the first ten
// and counts the rest (--json: the first hundred, and the count).
func TestCtlWorkflowPages(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	var parents bson.A
	var docs []any
	for i := range 120 {
		id := fmt.Sprintf("wp-%03d", i)
		parents = append(parents, id)
		docs = append(docs, bson.D{{Key: "_id", Value: id}, {Key: "kind", Value: "k"}, {Key: "state", Value: "available"},
			{Key: "createdAt", Value: time.Unix(int64(i), 0)}, {Key: "workflow", Value: "wf-p"}})
	}
	docs = append(docs, bson.D{{Key: "_id", Value: "wt"}, {Key: "kind", Value: "k"}, {Key: "state", Value: "blocked"}, {Key: "createdAt", Value: time.Unix(500, 0)},
		{Key: "workflow", Value: "wf-p"}, {Key: "after", Value: parents}, {Key: "waitingOn", Value: parents}})
	_, err := db.Collection(queue.DefaultCollection).InsertMany(context.Background(), docs)
	require.NoError(t, err)

	var seen []string
	for off := 0; off < 121; off += 50 {
		out, stderr, code := runCtl(t, uri, db, "workflow", "--limit", "50", "--offset", fmt.Sprint(off), "wf-p")
		require.Equal(t, 0, code, stderr)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Equal(t, "workflow wf-p: 121 tasks, parents before dependents", lines[0])
		require.Equal(t, "by state: 1 blocked, 120 available", lines[1])
		last := min(off+50, 121)
		require.Equal(t, fmt.Sprintf("tasks %d to %d of 121 shown (--offset, --limit)", off+1, last), lines[len(lines)-1])
		for _, l := range lines[3 : len(lines)-1] {
			seen = append(seen, strings.Fields(l)[1])
		}
		if last < 121 {
			require.Equal(t, fmt.Sprintf("more: --offset %d\n", last), stderr)
		} else {
			require.Empty(t, stderr, "the last page")
			require.Equal(t, "k wt blocked 0/0 wp-000,wp-001,wp-002,wp-003,wp-004,wp-005,wp-006,wp-007,wp-008,wp-009 and 110 more - -",
				strings.Join(strings.Fields(lines[len(lines)-2]), " "))
		}
	}
	require.Len(t, seen, 121)
	require.Equal(t, "wp-000", seen[0])
	require.Equal(t, "wt", seen[120])

	out, stderr, code := runCtl(t, uri, db, "workflow", "--offset", "200", "wf-p")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "\nno tasks from --offset 200: there are 121\n")
	_, stderr, code = runCtl(t, uri, db, "workflow", "--offset", "-1", "wf-p")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--offset: -1 is negative")

	out, stderr, code = runCtl(t, uri, db, "workflow", "--json", "--offset", "120", "wf-p")
	require.Equal(t, 0, code, stderr)
	var v struct {
		Offset, Total, LeftOut int
		Tasks                  []struct {
			WaitingOn      []string
			WaitingOnCount int
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, 120, v.Offset)
	require.Equal(t, 121, v.Total)
	require.Equal(t, 120, v.LeftOut)
	require.Len(t, v.Tasks, 1)
	require.Len(t, v.Tasks[0].WaitingOn, 100)
	require.Equal(t, 120, v.Tasks[0].WaitingOnCount)
}
