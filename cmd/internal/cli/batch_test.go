package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// runEnqueue runs the enqueue command in-process against uri and db.
func runEnqueue(t *testing.T, uri string, db *mongo.Database, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	setUp(t, db)
	var out, errb bytes.Buffer
	args = append(args, "--mongo-uri", uri, "--db", db.Name(), "--mongo-timeout", "3s")
	code = Enqueue(args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), code
}

// setUpDBs holds the names of the databases setUp made.
var setUpDBs sync.Map

// setUp makes db's indexes once, as on a database docket already runs
// on, so that a command's own set-up (a listing of them) fits in its short
// --mongo-timeout on a loaded machine: creating them took over 3 s there.
func setUp(t *testing.T, db *mongo.Database) {
	t.Helper()
	if _, done := setUpDBs.LoadOrStore(db.Name(), true); done {
		return
	}
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(context.Background()))
}

// jobIDs returns the ids of the jobs in db, sorted.
func jobIDs(t *testing.T, db *mongo.Database) []string {
	t.Helper()
	cur, err := db.Collection("jobs").Find(context.Background(), bson.D{}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	require.NoError(t, err)
	var docs []struct {
		ID string `bson:"_id"`
	}
	require.NoError(t, cur.All(context.Background(), &docs))
	ids := make([]string, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
	}
	sort.Strings(ids)
	return ids
}

func sortedFields(s string) []string {
	f := strings.Fields(s)
	sort.Strings(f)
	return f
}

// batchLines returns n lines of noop jobs.
func batchLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "{\"kind\": \"noop\", \"args\": {\"i\": %d}}\n", i)
	}
	return b.String()
}

func serverAddr(t *testing.T) string {
	u, err := url.Parse(testdb.URI())
	require.NoError(t, err)
	return u.Host
}

// TestBatchRefusesWhatTheServerWouldRefuseAndWritesNothing: lines whose
// args a server refuses, among valid lines, fail the batch before the
// first write, each named by its line and key path; before, the
// unordered insert wrote the valid lines and printed no id.
func TestBatchRefusesWhatTheServerWouldRefuseAndWritesNothing(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	for _, tc := range []struct {
		name string
		line string
		want string
	}{
		{"dot key", `{"kind": "k", "args": {"a": {"b.c": 1}}}`, `line 2: args.a: key "b.c" contains '.'`},
		{"dollar key", `{"kind": "k", "args": {"$set": {"x": 1}}}`, `line 2: args: key "$set" starts with '$'`},
		{"duplicate key", `{"kind": "k", "args": {"a": 1, "a": 2}}`, `line 2: args: key "a" appears twice`},
		{"duplicate key in an array of documents", `{"kind": "k", "args": {"l": [{"x": 1}, {"y": 1, "y": 2}]}}`, `line 2: args.l[1]: key "y" appears twice`},
		{"empty key", `{"kind": "k", "args": {"": 1}}`, `line 2: args: key "" is empty`},
		{"NaN", `{"kind": "k", "args": {"n": {"$numberDouble": "NaN"}}}`, "line 2: args.n: NaN"},
		{"decimal128", `{"kind": "k", "args": {"n": {"$numberDecimal": "1.5"}}}`, "line 2: args.n: decimal128"},
		{"nested array", `{"kind": "k", "args": {"m": [[1, 2]]}}`, "line 2: args.m[0]: an array directly inside an array"},
		{"same id as line 1", `{"id": "a", "kind": "k"}`, `line 2: id: "a" is also the id of line 1`},
		{"id too long", `{"id": "` + strings.Repeat("i", 300) + `", "kind": "k"}`, "line 2: id: 300 bytes is over the 256-byte limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := `{"id": "a", "kind": "k"}` + "\n" + tc.line + "\n" + `{"kind": "k"}` + "\n"
			out, stderr, code := runEnqueue(t, uri, db, in, "batch")
			require.Equal(t, 2, code, stderr)
			require.Contains(t, stderr, tc.want)
			require.Contains(t, stderr, "1 of 3 lines invalid; nothing was written")
			require.Empty(t, out)
		})
	}
	require.Empty(t, jobIDs(t, db), "an invalid line must write nothing")

	// Every invalid line is named, up to ten, then counted.
	var b strings.Builder
	for i := range 15 {
		fmt.Fprintf(&b, "{\"kind\": \"k\", \"args\": {\"a.%d\": 1}}\n{\"kind\": \"k\"}\n", i)
	}
	_, stderr, code := runEnqueue(t, uri, db, b.String(), "batch")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "line 1: args")
	require.Contains(t, stderr, "line 19: args")
	require.NotContains(t, stderr, "line 21:")
	require.Contains(t, stderr, "... and 5 more invalid lines")
	require.Contains(t, stderr, "15 of 30 lines invalid")

	// The same from a file.
	file := filepath.Join(t.TempDir(), "jobs.jsonl")
	require.NoError(t, os.WriteFile(file, []byte("{\"kind\": \"k\"}\n{\"kind\": \"k\", \"args\": {\"$x\": 1}}\n"), 0o600))
	_, stderr, code = runEnqueue(t, uri, db, "", "batch", "--file", file)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `line 2: args: key "$x" starts with '$'`)
	require.Empty(t, jobIDs(t, db))
}

// TestBatchLineIDsMakeARerunInsertOnlyWhatIsMissing: lines that carry an
// id, and lines whose id derives from --batch-id, are each inserted once
// however often the batch runs; the report counts both.
func TestBatchLineIDsMakeARerunInsertOnlyWhatIsMissing(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	batch := uuid.Must(uuid.NewV7()).String()
	in := "{\"id\": \"order-1\", \"kind\": \"noop\"}\n" + batchLines(3)
	out, stderr, code := runEnqueue(t, uri, db, in, "batch", "--batch-id", batch)
	require.Equal(t, 0, code, stderr)
	ids := strings.Fields(out)
	require.Len(t, ids, 4)
	require.Equal(t, "order-1", ids[0])
	require.Contains(t, stderr, "4 inserted, 0 already there, 0 not inserted")
	require.NotContains(t, stderr, "\r", "no progress drawn when stderr is not a terminal")
	for _, id := range ids[1:] {
		u, err := uuid.Parse(id)
		require.NoError(t, err)
		require.Equal(t, uuid.Version(7), u.Version())
	}
	require.Less(t, ids[1], ids[2], "a batch's ids sort by line")

	// The same input with two more lines: only those are inserted.
	out, stderr, code = runEnqueue(t, uri, db, in+batchLines(2), "batch", "--batch-id", batch)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "2 inserted, 4 already there, 0 not inserted")
	require.Len(t, strings.Fields(out), 6)
	require.Equal(t, sortedFields(out), jobIDs(t, db))

	_, stderr, code = runEnqueue(t, uri, db, in, "batch", "--batch-id", "nope")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `--batch-id: "nope" is not a UUID`)
}

// TestBatchLostReplyIsSettledAndTheBatchGoesOn: the reply of the second
// insert is lost after the server applied it; the batch finds those jobs
// in the collection and goes on: every line inserted once, exit 0.
func TestBatchLostReplyIsSettledAndTheBatchGoesOn(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	proxy := newLostReplyProxy(t, serverAddr(t), 2, false)
	out, stderr, code := runEnqueue(t, proxy.uri(), db, batchLines(2500), "batch")
	<-proxy.dropped
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "2500 inserted, 0 already there, 0 not inserted")
	require.Len(t, strings.Fields(out), 2500)
	require.Equal(t, sortedFields(out), jobIDs(t, db))
}

// TestBatchFailureReportsExactlyAndARerunFinishesIt: the reply of the
// second insert is lost and the server is then unreachable, so nothing
// can be looked up. The batch prints the ids of the first chunk, says
// which lines are not (or not known to be) inserted, exits 1 and prints
// the --batch-id to rerun with; the rerun inserts only the missing jobs.
// Before, the command exited 1 with no id and a rerun doubled the jobs.
func TestBatchFailureReportsExactlyAndARerunFinishesIt(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	proxy := newLostReplyProxy(t, serverAddr(t), 2, true)
	in := batchLines(2500)
	out, stderr, code := runEnqueue(t, proxy.uri(), db, in, "batch")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "1000 inserted, 0 already there, 1500 not inserted (1000 of which may have been: looking them up failed)")
	require.Contains(t, stderr, "not inserted: lines 2001-2500")
	require.Contains(t, stderr, "not known whether inserted: lines 1001-2000")
	printed := strings.Fields(out)
	require.Len(t, printed, 1000)
	i := strings.Index(stderr, "--batch-id ")
	require.Positive(t, i, stderr)
	batch := strings.Fields(stderr[i+len("--batch-id "):])[0]

	inDB := jobIDs(t, db)
	require.Len(t, inDB, 2000, "the lost insert was applied")

	proxy.heal()
	out, stderr, code = runEnqueue(t, testdb.URI(), db, in, "batch", "--batch-id", batch)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "500 inserted, 2000 already there, 0 not inserted")
	require.Equal(t, printed, strings.Fields(out)[:1000], "the same lines, the same ids")
	require.Len(t, jobIDs(t, db), 2500, "no job doubled")
}

// TestJobLostReply: one job whose insert reply is lost is found and
// reported inserted; when it cannot be looked up, the command says so,
// exits 1 and names the --id to rerun with, and the rerun adds nothing.
func TestJobLostReply(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	proxy := newLostReplyProxy(t, serverAddr(t), 1, false)
	out, stderr, code := runEnqueue(t, proxy.uri(), db, "", "job", "--kind", "noop")
	<-proxy.dropped
	require.Equal(t, 0, code, stderr)
	require.Equal(t, jobIDs(t, db), strings.Fields(out))

	db2 := testdb.NewDB(t)
	proxy = newLostReplyProxy(t, serverAddr(t), 1, true)
	out, stderr, code = runEnqueue(t, proxy.uri(), db2, "", "job", "--kind", "noop", "--id", "mail:42")
	require.Equal(t, 1, code, stderr)
	require.Empty(t, out)
	require.Contains(t, stderr, "mail:42: not known whether inserted (looking it up failed); rerun with --id mail:42")
	out, stderr, code = runEnqueue(t, testdb.URI(), db2, "", "job", "--kind", "noop", "--id", "mail:42")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "mail:42\n", out)
	require.Contains(t, stderr, "mail:42: already there: not added again")
	require.Equal(t, []string{"mail:42"}, jobIDs(t, db2))
}

// TestProgressLine: the progress line's count, rate and time left, drawn
// only on a terminal and only for a batch that runs past a second.
func TestProgressLine(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	p := newProgress(&buf, true, 100000)
	p.now = func() time.Time { return now }
	p.start = now
	p.update(1000)
	require.Empty(t, buf.String(), "nothing in the first second")
	now = now.Add(4 * time.Second)
	p.update(20000)
	require.Equal(t, "\renqueue batch: 20000/100000 jobs (20%), 5000 jobs/s, ETA 16s\x1b[K", buf.String())
	buf.Reset()
	now = now.Add(100 * time.Millisecond)
	p.update(21000)
	require.Empty(t, buf.String(), "redrawn at most every 200ms")
	p.clear()
	require.Equal(t, "\r\x1b[K", buf.String())

	buf.Reset()
	off := newProgress(&buf, false, 10)
	off.start = now.Add(-time.Hour)
	off.update(5)
	off.clear()
	require.Empty(t, buf.String())

	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	require.False(t, isTerminal(w), "a pipe is not a terminal")
	require.False(t, isTerminal(&buf))
}

func TestLineRanges(t *testing.T) {
	require.Equal(t, "3, 7-9, 12", lineRanges([]int{3, 7, 8, 9, 12}))
	var many []int
	for i := range 50 {
		many = append(many, i*2)
	}
	s := lineRanges(many)
	require.Contains(t, s, "... (30 more ranges) ...")
	require.True(t, strings.HasPrefix(s, "0, 2, 4"))
	require.True(t, strings.HasSuffix(s, "96, 98"))
}
