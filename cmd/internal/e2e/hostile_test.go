package e2e

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// workerWrites are the job fields workers, the reaper and the leader
// write (README's schema, ENQUEUE.md, MONGODB.md: a finished parent's
// dependents flag becomes dependentsDue until the leader settles it): a
// hostile document may see them change. Every other field is the app's and must stay as stored.
var workerWrites = map[string]bool{
	"state": true, "attempt": true, "owner": true, "leaseToken": true, "leaseExpiresAt": true, "heartbeatAt": true,
	"cancelRequestedAt": true, "errors": true, "updatedAt": true, "finishedAt": true, "uniqueKey": true,
	"finishedUniqueKey": true, "progress": true, "result": true, "runAt": true, "releasedToken": true,
	"createdAt": true, "waitingOn": true, "dependents": true, "dependentsDue": true, "linking": true,
}

// TestHostileDocumentsCrashNothing inserts, beside normal jobs, hundreds of
// job documents each with one field of another BSON type or an odd value
// (hostilegen_test.go), hostile _ids of every type, and hostile copies of
// the documents in the collections beside the jobs (workers, limits,
// queues, rates, stats, leaders; none in rate_partitions, which holds no
// document to copy when they are made); then runs a worker (claims,
// reaper, leader passes), docketctl's reading commands in text and --json
// (show --json for one batch of ids in 3, workflow for some of the jobs
// with a workflow field), at most 400 of the dashboard's pages (each
// hostile job's page first, a workflow page for one job in 10, then the
// pages they link) and the metrics endpoint. No process panics or exits;
// every normal job finishes; no hostile document is deleted, nor a field
// of the app's changed; no docketctl output holds a control byte or
// invalid UTF-8 (the worker's and dashboard's logs are checked for panics
// only); no page holds a hostile string unescaped or a link with a raw
// character; the metrics are valid UTF-8 and parse. Each key job field is
// given one in 4 of the values and the others one in 11;
// DOCKET_HOSTILE_EVERY=1 gives key fields every value and the others one
// in 2 (minutes on devdb).
func TestHostileDocumentsCrashNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("heavy: hundreds of documents through every process")
	}
	t.Parallel()
	db := testdb.NewDB(t)
	began := time.Now()
	q := newQueue(t, db)
	// docketctl without the race detector: it starts in a third of the
	// time, and the test runs it dozens of times.
	ctl := testdb.BuildBinary(t, "github.com/docketq/docket/cmd/docketctl", false)
	op := &operator{t: t, bin: ctl, db: db}

	w := startWorker(t, db, "W", append([]string{"--http-addr", "127.0.0.1:0", "--queue-stats-interval", "200ms", "--concurrency", "8"}, fastWorker...)...)
	metricsURL := w.httpAddr()
	seedBeside(t, op)
	waitBeside(t, db)
	every := hostileEvery(t)
	beside := insertHostileBeside(t, db, every)
	stored := insertHostileJobs(t, store.Of(q).Collection(), every)
	t.Logf("set up: %s", time.Since(began).Round(time.Millisecond))
	var normal []string
	for i := range 20 {
		normal = append(normal, enqueue(t, q, "noop", bson.M{"i": i}, queue.InsertOpts{}).ID)
	}

	dash := startProc(t, ctlBinary(t), db, "dashboard", nil, "dashboard", "--addr", "127.0.0.1:0", "--log-format", "json")
	dash.waitLog("dashboard: http://", 60*time.Second)
	dashURL := strings.TrimSuffix(regexp.MustCompile(`dashboard: (http://\S+)`).FindStringSubmatch(dash.out.String())[1], "/")

	start := time.Now()
	checkCtl(t, op, stored)
	t.Logf("docketctl: %s", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	checkPages(t, dashURL, stored)
	t.Logf("dashboard: %s", time.Since(start).Round(time.Millisecond))
	checkMetrics(t, metricsURL)
	start = time.Now()
	for _, id := range normal {
		waitJob(t, q, id, time.Minute, "a normal job beside the hostile ones", inState(jobs.StateSucceeded))
	}
	t.Logf("normal jobs: %s", time.Since(start).Round(time.Millisecond))
	checkUnchanged(t, store.Of(q).Collection(), stored)
	checkBesideUnchanged(t, db, beside)

	retakeLease(t, db, w)
	for _, p := range []*proc{w, dash} {
		select {
		case <-p.done:
			t.Fatalf("%s exited:\n%s", p.name, tail(p.out.String(), 40))
		default:
		}
	}
	w.signal(syscall.SIGTERM)
	require.Equal(t, 0, w.wait(30*time.Second))
	dash.signal(syscall.SIGTERM)
	dash.wait(10 * time.Second)
	for _, p := range []*proc{w, dash} {
		noPanic(t, p.name, p.out.String())
	}
}

// retakeLease overwrites the leader's lease with fields of types no
// elector writes (an invalid regex token, a document owner, a string
// version), and waits for the worker to lead again.
func retakeLease(t *testing.T, db *mongo.Database, w *proc) {
	t.Helper()
	before := strings.Count(w.out.String(), `"msg":"leading"`)
	must(t, "overwrite the lease", func() error {
		_, err := db.Collection("leaders").UpdateMany(context.Background(), bson.D{}, bson.D{{Key: "$set", Value: bson.D{
			{Key: "token", Value: bson.Regex{Pattern: "a[", Options: "i"}}, {Key: "owner", Value: bson.D{{Key: "x", Value: hostileMarker}}},
			{Key: "version", Value: "\x1b[31m"},
		}}})
		return err
	})
	require.Eventually(t, func() bool { return strings.Count(w.out.String(), `"msg":"leading"`) > before }, 4*leaderTTL+electionAllowance(t, leaderTTL),
		50*time.Millisecond, "the worker never led again after another program overwrote the lease")
}

// hostileEvery is 4, or DOCKET_HOSTILE_EVERY: one in how many hostile
// values each field is given.
func hostileEvery(t *testing.T) int {
	t.Helper()
	s := os.Getenv("DOCKET_HOSTILE_EVERY")
	if s == "" {
		return 4
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, "DOCKET_HOSTILE_EVERY")
	return max(n, 1)
}

// seedBeside makes one real document in each collection beside the jobs
// that the operator's commands write, so that hostile copies have their
// fields.
func seedBeside(t *testing.T, op *operator) {
	t.Helper()
	for _, args := range [][]string{
		{"limit", "kind:hostile", "3"}, {"limit", "kind:hostilep", "2", "--per", "customerId"},
		{"limit", "rate", "kind:hostile", "5/s", "--burst", "2"}, {"limit", "rate", "kind:hostilep", "5/s", "--per", "customerId"},
		{"capacity", "hostile-capacity", "5"}, {"pause", "hostile-paused"},
	} {
		_, stderr, code := op.run(args...)
		require.Equal(t, 0, code, "%v: %s", args, stderr)
	}
}

// besideCollections are the collections beside the jobs.
var besideCollections = []string{
	store.DefaultWorkersCollection, store.DefaultLimitsCollection, store.DefaultQueuesCollection,
	store.DefaultRatePartsCollection, queue.DefaultStatsCollection, "leaders",
}

// waitBeside waits for the worker's registry entry, the leader's lease
// and its counts.
func waitBeside(t *testing.T, db *mongo.Database) {
	t.Helper()
	for _, c := range []string{store.DefaultWorkersCollection, queue.DefaultStatsCollection, "leaders"} {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			n, err := db.Collection(c).CountDocuments(context.Background(), bson.D{})
			assert.NoError(ct, err)
			assert.Positive(ct, n, "no document in %s yet", c)
		}, time.Minute, 100*time.Millisecond)
	}
}

// insertHostileBeside copies each document of the collections beside the
// jobs with one top-level field given a hostile value, under an _id of
// its own (the real ones stay: the processes' own work goes on), adds
// documents whose _id is of each type, and returns the ones stored, by
// collection, as read back.
func insertHostileBeside(t *testing.T, db *mongo.Database, every int) map[string][]bson.Raw {
	t.Helper()
	vals := hostileValues()
	stored := map[string][]bson.Raw{}
	for _, name := range besideCollections {
		coll := db.Collection(name)
		var docs []bson.D
		findAll(t, coll, bson.D{}, &docs)
		var out []any
		var real bson.A
		for di, d := range docs {
			real = append(real, d[0].Value)
			for fi, e := range d[1:] {
				for vi, hv := range vals {
					if (vi+fi+di)%(4*every) == 0 {
						c := setField(d, e.Key, hv)
						c[0].Value = besideID(d[0].Value, fmt.Sprintf("%d-%d-%d", di, fi, vi), vi)
						out = append(out, c)
					}
				}
			}
		}
		for vi, hv := range vals {
			if len(docs) > 0 && !hv.missing && vi%every == 0 {
				out = append(out, setField(docs[0], "_id", hv))
			}
		}
		insertEach(t, coll, out)
		var got []bson.Raw
		findAll(t, coll, bson.D{{Key: "_id", Value: bson.D{{Key: "$nin", Value: real}}}}, &got)
		stored[name] = got
		t.Logf("%s: %d hostile documents stored", name, len(got))
	}
	return stored
}

// besideKept are the collections beside the jobs whose documents no
// process deletes or rewrites unless told (the registry drops processes
// long stopped, the leader rewrites its counts and its lease).
var besideKept = []string{store.DefaultLimitsCollection, store.DefaultQueuesCollection}

// checkBesideUnchanged checks that the hostile documents of besideKept are
// there as stored.
func checkBesideUnchanged(t *testing.T, db *mongo.Database, stored map[string][]bson.Raw) {
	t.Helper()
	for _, name := range besideKept {
		for _, before := range stored[name] {
			id := before.Lookup("_id")
			var after bson.Raw
			err := testdb.Retry(t.Logf, "read a hostile document", func() (err error) {
				after, err = db.Collection(name).FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Raw()
				return err
			})
			if err != nil {
				t.Errorf("%s %s: %v (before: %.300s)", name, id, err, before)
			} else if !bytes.Equal(before, after) {
				t.Errorf("%s %s changed from %.300s to %.300s", name, id, before, after)
			}
		}
	}
}

// besideID is the _id of a hostile copy of a document whose _id is id: an
// id of the same shape (a limit's "kind:…", a queue's name) that varies,
// some with hostile characters.
func besideID(id any, n string, vi int) any {
	s, ok := id.(string)
	if !ok {
		return fmt.Sprint(id) + "-" + n
	}
	if vi%4 == 0 {
		return s + "-" + n + "\x1b[31m" + hostileMarker
	}
	return s + "-" + n
}

// insertEach inserts docs one at a time and returns how many were
// stored: the test server refuses some values (devdb: NaN, Infinity,
// decimal128, minKey, maxKey, code, symbol, undefined, nested arrays)
// and some _ids (arrays, regexes, duplicates) that MongoDB stores or
// refuses; a refused one is left out.
func insertEach(t *testing.T, coll *mongo.Collection, docs []any) int {
	t.Helper()
	stored := 0
	refused := map[string]int{}
	for _, d := range docs {
		_, err := coll.InsertOne(context.Background(), d)
		if err == nil {
			stored++
			continue
		}
		msg := err.Error()
		if i := strings.Index(msg, "("); i > 0 && !strings.Contains(msg, "connection") {
			msg = msg[:i]
		}
		refused[msg]++
	}
	if len(refused) > 0 {
		t.Logf("%s refused %d of %d documents: %v", coll.Name(), len(docs)-stored, len(docs), refused)
	}
	return stored
}

// insertHostileJobs inserts hostileJobs and returns each stored one as the
// server read it back.
func insertHostileJobs(t *testing.T, coll *mongo.Collection, every int) []bson.Raw {
	t.Helper()
	hj := hostileJobs(time.Now(), every)
	docs := make([]any, len(hj))
	for i, j := range hj {
		docs[i] = j.doc
	}
	n := insertEach(t, coll, docs)
	var stored []bson.Raw
	cur, err := coll.Find(context.Background(), bson.D{{Key: "kind", Value: bson.D{{Key: "$ne", Value: "noop"}}}})
	require.NoError(t, err)
	require.NoError(t, cur.All(context.Background(), &stored))
	cur, err = coll.Find(context.Background(), bson.D{{Key: "kind", Value: "noop"}})
	require.NoError(t, err)
	var more []bson.Raw
	require.NoError(t, cur.All(context.Background(), &more))
	stored = append(stored, more...)
	t.Logf("%d hostile jobs generated, %d stored, %d read back", len(hj), n, len(stored))
	return stored
}

// checkCtl runs docketctl's reading commands and checks what they print.
func checkCtl(t *testing.T, op *operator, stored []bson.Raw) {
	t.Helper()
	var tokens []string
	for _, d := range stored {
		// One argument holds at most 128 KiB (Linux's MAX_ARG_STRLEN):
		// a longer id is read on the dashboard only.
		if tok := queue.JobIDOf(d).Token(); len(tok) < 100<<10 {
			tokens = append(tokens, tok)
		}
	}
	cmds := [][]string{
		{"stats"}, {"stats", "--json"}, {"stats", "--exact"}, {"stats", "--exact", "--json"},
		{"list", "--limit", "1000"}, {"list", "--json", "--limit", "1000"}, {"list", "--state", "dead", "--limit", "1000"},
		{"list", "--state", "running,blocked", "--limit", "1000"},
		{"workers"}, {"workers", "--all"}, {"workers", "--all", "--json"}, {"limit"}, {"capacity"},
	}
	for len(tokens) > 0 {
		n, size := 0, 0
		for n < len(tokens) && n < 40 && (n == 0 || size+len(tokens[n]) < 64<<10) {
			size += len(tokens[n])
			n++
		}
		cmds = append(cmds, append([]string{"show"}, tokens[:n]...))
		if len(cmds)%3 == 0 {
			cmds = append(cmds, append([]string{"show", "--json"}, tokens[:n]...))
		}
		tokens = tokens[n:]
	}
	for i, d := range stored {
		if tok := queue.JobIDOf(d).Token(); len(tok) < 100<<10 && (i%40 == 0 || d.Lookup("workflow").Type != 0 && i%8 == 0) {
			cmds = append(cmds, []string{"workflow", tok}, []string{"workflow", []string{"--json", "--dot"}[i%2], tok})
		}
	}
	for _, args := range cmds {
		// Run once: a command that met a failure reply is a finding.
		out, stderr, code := run(t, op.bin, op.db, nil, "", args...)
		if code == 1 || code > 2 {
			t.Errorf("docketctl %.80q exited %d: %.500s", args, code, tail(stderr, 5))
		} else if code != 0 {
			t.Logf("docketctl %.80q exited %d: %.300s", args, code, tail(stderr, 3))
		}
		terminalSafe(t, fmt.Sprintf("docketctl %.60q", args), out+stderr)
		noPanic(t, fmt.Sprintf("docketctl %.60q", args), out+stderr)
	}
}

// terminalSafe fails when out holds a control byte other than newline and
// tab, or is not valid UTF-8.
func terminalSafe(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		i := strings.IndexFunc(out, func(r rune) bool { return r == utf8.RuneError })
		t.Errorf("%s printed invalid UTF-8: …%q…", what, out[max(0, i-60):min(len(out), i+20)])
	}
	for i, r := range out {
		if (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f) {
			t.Errorf("%s printed control character %U: …%q…", what, r, out[max(0, i-60):min(len(out), i+20)])
			return
		}
	}
}

// noPanic fails when a process's output shows a panic.
func noPanic(t *testing.T, what, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(strings.ToLower(line), "panic") || strings.Contains(line, "goroutine ") {
			t.Errorf("%s: %.300s", what, line)
			return
		}
	}
}

var attrURL = regexp.MustCompile(`(?i)(?:href|src|action|formaction)\s*=\s*"([^"]*)"`)

// checkPages crawls the dashboard from its front pages, and reads each
// hostile job's page and workflow page.
func checkPages(t *testing.T, base string, stored []bson.Raw) {
	t.Helper()
	todo := []string{"/", "/jobs", "/workers", "/jobs?state=dead", "/jobs?state=running", "/jobs?state=blocked", "/jobs?state=available"}
	for i, d := range stored {
		tok := queue.JobIDOf(d).Token()
		todo = append(todo, "/jobs/"+tok)
		if i%10 == 0 {
			todo = append(todo, "/workflows/"+tok)
		}
		if wf, ok := d.Lookup("workflow").StringValueOK(); ok && wf != "" {
			todo = append(todo, "/workflows/"+queue.StringJobID(wf).Token())
		}
	}
	seen := map[string]bool{}
	c := http.Client{Timeout: 10 * time.Second}
	crawled := 0
	for len(todo) > 0 && crawled < 400 {
		p := todo[0]
		todo = todo[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		crawled++
		body, code, err := get(&c, base+p)
		if err != nil {
			t.Errorf("GET %.200s: %v", p, err)
			continue
		}
		if code >= 500 && code != http.StatusServiceUnavailable {
			t.Errorf("GET %.200s: %d: %.300s", p, code, body)
		}
		for _, link := range pageSafe(t, p, body) {
			// Every link is a GET: an action's link is its confirmation
			// page, and only its form's POST acts.
			if strings.HasPrefix(link, "/jobs") || strings.HasPrefix(link, "/workflows/") || strings.HasPrefix(link, "/queues/") || link == "/workers" {
				todo = append(todo, link)
			}
		}
	}
	t.Logf("read %d dashboard pages", crawled)
}

func get(c *http.Client, url string) (string, int, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, err
}

// pageSafe checks one page and returns its links.
func pageSafe(t *testing.T, path, body string) []string {
	t.Helper()
	// A control byte in a page's text is shown by no browser as more
	// than a box: only markup matters there.
	for _, s := range []string{hostileMarker, "<img src=x onerror"} {
		if i := strings.Index(body, s); i >= 0 {
			t.Errorf("page %.120s holds %q raw: …%q…", path, s, body[max(0, i-100):min(len(body), i+60)])
		}
	}
	if !utf8.ValidString(body) {
		t.Errorf("page %.120s is not valid UTF-8", path)
	}
	var links []string
	for _, m := range attrURL.FindAllStringSubmatch(body, -1) {
		u := html.UnescapeString(m[1])
		if i := strings.IndexFunc(u, func(r rune) bool { return !urlSafe(r) }); i >= 0 {
			t.Errorf("page %.120s links to %.200q: raw %q", path, u, u[i:i+1])
			continue
		}
		if lower := strings.ToLower(u); strings.HasPrefix(lower, "javascript:") || strings.HasPrefix(lower, "data:") || strings.HasPrefix(lower, "//") {
			t.Errorf("page %.120s links to %.200q", path, u)
			continue
		}
		links = append(links, u)
	}
	return links
}

// urlSafe reports whether r may stand raw in a URL (RFC 3986).
func urlSafe(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-._~:/?#[]@!$&'()*+,;=%", r)
}

// checkMetrics reads the worker's metrics: valid UTF-8, no control bytes
// in labels, and parseable.
func checkMetrics(t *testing.T, base string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	body, code, err := get(&c, base+"/metrics")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, body)
	require.True(t, utf8.ValidString(body), "metrics are not valid UTF-8")
	terminalSafe(t, "/metrics", body)
	var p expfmt.TextParser
	_, err = p.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
}

// checkUnchanged checks that every hostile job is still there, with the
// app's fields as stored.
func checkUnchanged(t *testing.T, coll *mongo.Collection, stored []bson.Raw) {
	t.Helper()
	ctx := context.Background()
	for _, before := range stored {
		id := before.Lookup("_id")
		var after bson.Raw
		err := testdb.Retry(t.Logf, "read a hostile job", func() (err error) {
			after, err = coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
			return err
		})
		if err != nil {
			t.Errorf("job %s: %v (before: %.300s)", id, err, before)
			continue
		}
		elems, _ := before.Elements()
		for _, e := range elems {
			k := e.Key()
			if workerWrites[k] {
				continue
			}
			if v := after.Lookup(k); v.Type != e.Value().Type || !slices.Equal(v.Value, e.Value().Value) {
				t.Errorf("job %s: %s changed from %.200s to %.200s", id, k, e.Value(), v)
			}
		}
	}
}
