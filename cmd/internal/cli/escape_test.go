package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// hostile are strings another application may store: an OSC clipboard
// write, a line erase, a title, a carriage return, a newline that would
// add a row, a tab that would shift a column, C1 controls (CSI, OSC) and
// bytes that are not UTF-8 (devdb stores U+FFFD for those).
var hostile = map[string]string{
	"kind":    "k\x1b]52;c;ZXZpbA==\a",
	"queue":   "mail\nfake  row  available",
	"id":      "id\r\x1b[2Kok",
	"message": "boom\u009b31m\u009d0;title\u009c",
	"owner":   "w\tx\xff",
	"state":   "dead\x1b[8m",
	"host":    "h\x1b]0;owned\a",
	"version": "v\u009b2J",
	"by":      "ops\x1b[1A",
}

// requireSafe fails when out holds anything a terminal would act on: a
// control character other than newline (and, when tabs is set, tab), a
// C1 control, or bytes that are not UTF-8.
func requireSafe(t *testing.T, out string, tabs bool) {
	t.Helper()
	require.True(t, utf8.ValidString(out), "output is not UTF-8: %q", out)
	for _, r := range out {
		if r == '\n' || (tabs && r == '\t') {
			continue
		}
		require.False(t, r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f), "control character %U reached the terminal: %q", r, out)
	}
}

// TestCtlEscapesForeignDocuments: list, show, stats, workers, retry, cancel
// and pause print every string another application stored escaped: no
// escape sequence, C1 control, carriage return or stray tab reaches the
// terminal, and a newline adds no row; --json keeps the values exact.
func TestCtlEscapesForeignDocuments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	now := time.Now().UTC()
	_, err := db.Collection(queue.DefaultCollection).InsertOne(ctx, bson.D{
		{Key: "_id", Value: hostile["id"]}, {Key: "kind", Value: hostile["kind"]}, {Key: "queue", Value: hostile["queue"]},
		{Key: "state", Value: "dead"}, {Key: "attempt", Value: 1}, {Key: "maxAttempts", Value: 1},
		{Key: "owner", Value: hostile["owner"]}, {Key: "runAt", Value: now}, {Key: "createdAt", Value: now}, {Key: "updatedAt", Value: now},
		{Key: "args", Value: bson.D{{Key: "s", Value: hostile["message"]}}},
		{Key: "errors", Value: bson.A{bson.D{{Key: "attempt", Value: 1}, {Key: "at", Value: now}, {Key: "owner", Value: hostile["owner"]}, {Key: "message", Value: hostile["message"]}}}},
	})
	require.NoError(t, err)
	_, err = db.Collection(queue.DefaultCollection).InsertOne(ctx, bson.D{
		{Key: "_id", Value: "j2"}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "q"}, {Key: "state", Value: hostile["state"]},
		{Key: "createdAt", Value: now}, {Key: "updatedAt", Value: now},
	})
	require.NoError(t, err)
	_, err = db.Collection(queue.DefaultWorkersCollection).InsertOne(ctx, bson.D{
		{Key: "_id", Value: hostile["id"]}, {Key: "host", Value: hostile["host"]}, {Key: "pid", Value: 7}, {Key: "version", Value: hostile["version"]},
		{Key: "queues", Value: bson.A{hostile["queue"]}}, {Key: "lastSeen", Value: now}, {Key: "beatEveryMs", Value: 1000},
	})
	require.NoError(t, err)
	_, err = db.Collection(queue.DefaultQueuesCollection).InsertOne(ctx, bson.D{
		{Key: "_id", Value: hostile["queue"]}, {Key: "paused", Value: true}, {Key: "pausedAt", Value: now}, {Key: "pausedBy", Value: hostile["by"]},
	})
	require.NoError(t, err)

	out, errs, code := runCtl(t, uri, db, "list")
	require.Zero(t, code, errs)
	requireSafe(t, out, false)
	require.Len(t, strings.Split(strings.TrimSuffix(out, "\n"), "\n"), 3, "a header and two jobs, no fake row: %s", out)
	require.Contains(t, out, `"id\r\x1b[2Kok"`)
	require.Contains(t, out, `"k\x1b]52;c;ZXZpbA==\a"`)
	require.Contains(t, out, `"mail\nfake  row  available" (paused)`)
	require.Contains(t, out, `"dead\x1b[8m"`)

	out, errs, code = runCtl(t, uri, db, "show", hostile["id"], "j2")
	require.Zero(t, code, errs)
	requireSafe(t, out, false)
	require.Contains(t, out, `job @AgoAAABpZA0bWzJLb2sA ("id\r\x1b[2Kok")`, "its token, then the id escaped")
	// The byte that is not UTF-8: devdb stores U+FFFD for it; MongoDB
	// stores it as sent (it does not check strings' UTF-8), shown escaped.
	message := `: "boom\u009b31m\u009d0;title\u009c"`
	devdbForm, mongoForm := `by "w\tx`+"\ufffd"+`"`+message, `by "w\tx\xff"`+message
	require.True(t, strings.Contains(out, devdbForm) || strings.Contains(out, mongoForm), "neither %s nor %s in %s", devdbForm, mongoForm, out)

	out, errs, code = runCtl(t, uri, db, "stats", "--exact")
	require.Zero(t, code, errs)
	requireSafe(t, out, false)
	require.Contains(t, out, `PAUSED since`)
	require.Contains(t, out, `by "ops\x1b[1A"`)

	out, errs, code = runCtl(t, uri, db, "workers")
	require.Zero(t, code, errs)
	requireSafe(t, out, false)
	require.Len(t, strings.Split(strings.TrimSuffix(out, "\n"), "\n"), 2, out)
	require.Contains(t, out, `"h\x1b]0;owned\a"`)
	require.Contains(t, out, `"v\u009b2J"`)

	out, errs, code = runCtl(t, uri, db, "cancel", hostile["id"])
	require.Equal(t, 2, code, "a dead job is not cancelled")
	requireSafe(t, out, true)
	requireSafe(t, errs, false)
	out, errs, code = runCtl(t, uri, db, "retry", "--state", "dead")
	require.Zero(t, code, errs)
	requireSafe(t, out, true)
	require.Contains(t, out, `@AgoAAABpZA0bWzJLb2sA ("id\r\x1b[2Kok")`+"\tretried (was dead)")
	out, errs, code = runCtl(t, uri, db, "resume", hostile["queue"])
	require.Zero(t, code, errs)
	requireSafe(t, out, true)

	// --json stays exact.
	out, errs, code = runCtl(t, uri, db, "list", "--json", "--kind", hostile["kind"])
	require.Zero(t, code, errs)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &doc), out)
	require.Equal(t, hostile["kind"], doc["kind"])
	require.Equal(t, hostile["queue"], doc["queue"])
	require.Equal(t, hostile["id"], doc["_id"])
	out, errs, code = runCtl(t, uri, db, "workers", "--json")
	require.Zero(t, code, errs)
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &doc), out)
	require.Equal(t, hostile["host"], doc["host"])
}

// TestWorkersFromTheFutureAreShownAsSuspicious: a registry document stamped
// an hour ahead is not listed as alive; with --all it is listed, flagged.
func TestWorkersFromTheFutureAreShownAsSuspicious(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	_, err = db.Collection(queue.DefaultWorkersCollection).InsertOne(ctx, bson.D{
		{Key: "_id", Value: "forged"}, {Key: "host", Value: "h"}, {Key: "lastSeen", Value: store.Of(q).ServerTime(ctx).Add(time.Hour)}, {Key: "beatEveryMs", Value: 1000},
	})
	require.NoError(t, err)
	out, errs, code := runCtl(t, testdb.URI(), db, "workers")
	require.Zero(t, code, errs)
	require.NotContains(t, out, "forged")
	require.Contains(t, errs, "no worker process is alive")
	out, errs, code = runCtl(t, testdb.URI(), db, "workers", "--all")
	require.Zero(t, code, errs)
	require.Regexp(t, `forged .* 59m59\.\d+s in the future \(SUSPICIOUS: not a beat; not counted alive\)`, out)
	out, errs, code = runCtl(t, testdb.URI(), db, "workers", "--all", "--json")
	require.Zero(t, code, errs)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &doc), out)
	require.Equal(t, false, doc["alive"])
	require.Equal(t, true, doc["future"])
}

// TestCtlRefusesBadFilters: list --since or --until with a duration that is
// not positive, and pause with a queue name enqueue would refuse, are
// refused with a message naming the flag or the name, exit 2, nothing
// written.
func TestCtlRefusesBadFilters(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	for _, args := range [][]string{{"list", "--since", "-1h"}, {"list", "--since", "0s"}, {"list", "--until=-5m"}} {
		_, errs, code := runCtl(t, uri, db, args...)
		require.Equal(t, 2, code, "%v: %s", args, errs)
		require.Contains(t, errs, "is not a positive duration ago", args)
	}
	_, errs, code := runCtl(t, uri, db, "list", "--since", "1h")
	require.Zero(t, code, errs)
	for _, name := range []string{"mail\xff", "mail\x1b[2K"} {
		_, errs, code := runCtl(t, uri, db, "pause", name)
		require.Equal(t, 2, code, errs)
		require.Contains(t, errs, "queue name")
		requireSafe(t, errs, false)
	}
	n, err := db.Collection(queue.DefaultQueuesCollection).CountDocuments(context.Background(), bson.D{})
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestEnqueueRefusesControlCharactersInNames: `enqueue job` and `enqueue
// batch` refuse a kind or queue with a control character, naming the
// field (and the line), exit 2, nothing written.
func TestEnqueueRefusesControlCharactersInNames(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	for _, args := range [][]string{
		{"job", "--kind", "k\x1b[2K"},
		{"job", "--kind", "k", "--queue", "q\nq"},
		{"job", "--kind", "k\u009b"},
	} {
		_, errs, code := runEnqueue(t, uri, db, "", args...)
		require.Equal(t, 2, code, "%q: %s", args, errs)
		require.Contains(t, errs, "control character")
		requireSafe(t, errs, false)
	}
	_, errs, code := runEnqueue(t, uri, db, `{"kind": "k"}`+"\n"+`{"kind": "k\u001b]0;x\u0007"}`+"\n"+`{"kind": "k", "queue": "a\tb"}`+"\n", "batch")
	require.Equal(t, 2, code, errs)
	require.Contains(t, errs, "line 2: kind: ")
	require.Contains(t, errs, "line 3: queue: ")
	require.Contains(t, errs, "2 of 3 lines invalid; nothing was written")
	requireSafe(t, errs, false)
	require.Empty(t, jobIDs(t, db))
}

// TestCtlWorkersShowsProcessLimits: workers lists each process's limits,
// in name order, "-" for none, every name escaped as shown: one another
// application stored with an escape sequence or a newline reaches the
// terminal quoted, adding no row; one holding ',' or '=' is quoted so that
// it reads as one entry. --json keeps them exact, {} for none.
func TestCtlWorkersShowsProcessLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	for id, limits := range map[string]map[string]int{"limited": {"queue:reports": 3, "kind:email": 2}, "unlimited": nil} {
		require.NoError(t, q.Beat(ctx, queue.WorkerInfo{ID: id, Host: "h", PID: 1, Queues: []string{"reports"}, Concurrency: 4,
			ProcessLimits: limits, StartedAt: time.Now(), BeatEvery: time.Minute}))
	}
	foreign := map[string]int{"kind:k\x1b]0;owned\a": 2, "queue:a\nfake  row": 1, "kind:a,b=9": 5}
	limits := bson.A{}
	for name, n := range foreign {
		limits = append(limits, bson.D{{Key: "name", Value: name}, {Key: "n", Value: n}})
	}
	_, err = db.Collection(queue.DefaultWorkersCollection).InsertOne(ctx, bson.D{
		{Key: "_id", Value: "foreign"}, {Key: "host", Value: "h"}, {Key: "lastSeen", Value: store.Of(q).ServerTime(ctx)}, {Key: "beatEveryMs", Value: 60_000},
		{Key: "processLimits", Value: limits},
	})
	require.NoError(t, err)

	out, errs, code := runCtl(t, testdb.URI(), db, "workers")
	require.Zero(t, code, errs)
	requireSafe(t, out, false)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 4, "a header and three processes, no fake row: %s", out)
	require.Regexp(t, `^id\s+host\s+pid\s+version\s+queues\s+concurrency\s+running\s+limits\s+started\s+last seen$`, lines[0])
	rows := map[string]string{}
	for _, l := range lines[1:] {
		rows[strings.Fields(l)[0]] = l
	}
	require.Regexp(t, `\sreports\s+4\s+0\s+kind:email=2,queue:reports=3\s`, rows["limited"])
	require.Regexp(t, `\sreports\s+4\s+0\s+-\s`, rows["unlimited"])
	require.Contains(t, rows["foreign"], ` "kind:a,b=9"=5,"kind:k\x1b]0;owned\a"=2,"queue:a\nfake  row"=1 `)

	out, errs, code = runCtl(t, testdb.URI(), db, "workers", "--json")
	require.Zero(t, code, errs)
	got := map[string]map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var doc struct {
			ID            string         `json:"id"`
			ProcessLimits map[string]int `json:"processLimits"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &doc), line)
		require.NotNil(t, doc.ProcessLimits, "an object, not null: %s", line)
		got[doc.ID] = doc.ProcessLimits
	}
	require.Equal(t, map[string]map[string]int{"limited": {"kind:email": 2, "queue:reports": 3}, "unlimited": {}, "foreign": foreign}, got)
}

// TestProcessLimitsCell: the workers table's limits cell for names devdb
// stores with U+FFFD in place of bytes that are not UTF-8 as well: each
// escaped by shown.
func TestProcessLimitsCell(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		limits map[string]int
		want   string
	}{
		{nil, "-"},
		{map[string]int{}, "-"},
		{map[string]int{"queue:reports": 3, "kind:email": 2}, "kind:email=2,queue:reports=3"},
		{map[string]int{"kind:m\xff": 2, "kind:\u009b2J": 1}, `"kind:m\xff"=2,"kind:\u009b2J"=1`},
		{map[string]int{`"kind:q`: 1, "kind:a=b": 2}, `"\"kind:q"=1,"kind:a=b"=2`},
	} {
		got := processLimitsCell(c.limits)
		require.Equal(t, c.want, got, "%#v", c.limits)
		requireSafe(t, got, false)
	}
}
