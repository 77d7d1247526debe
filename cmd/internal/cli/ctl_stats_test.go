package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// statsFixture makes db hold three available jobs of queue q, kind k.
func statsFixture(t *testing.T) (*mongo.Database, *queue.Client) {
	t.Helper()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	for range 3 {
		_, err := q.Enqueue(context.Background(), "k", bson.M{}, queue.InsertOpts{Queue: "q"})
		require.NoError(t, err)
	}
	return db, q
}

// TestStatsFallsBackToExact: with no counts stored by a leader (no worker
// ran), stats counts now and says why; with counts stored malformed, it
// says that too and does not fail.
func TestStatsFallsBackToExact(t *testing.T) {
	t.Parallel()
	db, _ := statsFixture(t)
	out, errs, code := runCtl(t, testdb.URI(), db, "stats")
	require.Zero(t, code, errs)
	require.True(t, strings.HasPrefix(out, "counted now, exactly: no counts stored by a leader yet (is a worker running?)\n"), out)
	require.Regexp(t, `(?m)^q +k +3 +0 +0 +0 +0 `, out)

	_, err := db.Collection(queue.DefaultStatsCollection).InsertOne(context.Background(),
		bson.M{"_id": "counts", "countedAt": "yesterday", "queues": bson.A{bson.M{"queue": "q", "counts": 5}}})
	require.NoError(t, err)
	out, errs, code = runCtl(t, testdb.URI(), db, "stats")
	require.Zero(t, code, errs)
	require.Contains(t, out, "counted now, exactly: the stored counts are malformed: countedAt is a string, not a time\n")
	require.Regexp(t, `(?m)^q +k +3 +0 +0 +0 +0 `, out)

	out, errs, code = runCtl(t, testdb.URI(), db, "stats", "--json")
	require.Zero(t, code, errs)
	var doc statsJSON
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	require.Equal(t, "exact", doc.Source)
	require.Contains(t, doc.Note, "malformed")
	require.EqualValues(t, 3, doc.Queues[0].Counts["k"]["available"])
}

// TestStatsReadsTheLeadersCounts: stats prints the counts the leader
// stored (not the collection's, which differ here), how old they are and
// who counted; --json says the same; --exact counts the collection; counts
// far older than their leader's pace are flagged stale.
func TestStatsReadsTheLeadersCounts(t *testing.T) {
	t.Parallel()
	db, q := statsFixture(t)
	ctx := context.Background()
	at := store.Of(q).ServerTime(ctx).Add(-12 * time.Second).Truncate(time.Millisecond)
	stored := queue.StoredStats{CountedAt: at, By: "w1", Every: 15 * time.Second, Took: time.Second,
		Queues: []queue.QueueStats{{Queue: "q", Counts: map[string]map[jobs.State]int64{"k": {"available": 42, "dead": 1}}}}}
	ok, err := q.StoreStats(ctx, stored)
	require.NoError(t, err)
	require.True(t, ok)

	out, errs, code := runCtl(t, testdb.URI(), db, "stats")
	require.Zero(t, code, errs)
	require.Regexp(t, `^as of 1[2-9]s ago \(`+at.Format(time.RFC3339)+`\), counted by w1, the elected leader, every 15s; --exact counts now\n`, out)
	require.Regexp(t, `(?m)^q +k +42 +0 +0 +1 +0 `, out)
	require.NotContains(t, out, "STALE")

	out, errs, code = runCtl(t, testdb.URI(), db, "stats", "--json")
	require.Zero(t, code, errs)
	var doc statsJSON
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	require.Equal(t, "leader", doc.Source)
	require.Equal(t, "w1", doc.CountedBy)
	require.InDelta(t, 12, doc.AgeSeconds, 8)
	require.EqualValues(t, 15, doc.EverySeconds)
	require.False(t, doc.Stale)
	require.EqualValues(t, 42, doc.Queues[0].Counts["k"]["available"])

	out, errs, code = runCtl(t, testdb.URI(), db, "stats", "--exact")
	require.Zero(t, code, errs)
	require.True(t, strings.HasPrefix(out, "counted now, exactly (--exact)\n"), out)
	require.Regexp(t, `(?m)^q +k +3 +0 +0 +0 +0 `, out)

	// Ten minutes old (older than the stored counts, so stored afresh).
	stored.CountedAt = store.Of(q).ServerTime(ctx).Add(-10 * time.Minute)
	_, err = db.Collection(queue.DefaultStatsCollection).DeleteMany(ctx, bson.M{})
	require.NoError(t, err)
	ok, err = q.StoreStats(ctx, stored)
	require.NoError(t, err)
	require.True(t, ok)
	out, errs, code = runCtl(t, testdb.URI(), db, "stats")
	require.Zero(t, code, errs)
	require.Contains(t, out, "STALE: no leader has counted since; is a worker running?")
}

// TestStatsWorkIsBounded: stats over stored counts sends no command to the
// jobs collection however many jobs it holds: a hello and one find of one
// document for the counts, and the small queues collection's reads.
func TestStatsWorkIsBounded(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	ctx := context.Background()
	const n = 5000
	docs := make([]any, 0, 1000)
	for i := range n {
		docs = append(docs, bson.M{"_id": fmt.Sprintf("j%05d", i), "kind": "k", "queue": "q", "state": "available", "runAt": time.Now()})
		if len(docs) == cap(docs) {
			_, err := db.Collection(queue.DefaultCollection).InsertMany(ctx, docs)
			require.NoError(t, err)
			docs = docs[:0]
		}
	}
	plain, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	counted, err := plain.CountStats(ctx)
	require.NoError(t, err)
	_, err = plain.StoreStats(ctx, counted)
	require.NoError(t, err)

	client, cmdsOf := testdb.Monitored(t)
	q, err := queue.New(client.Database(db.Name()), queue.Config{})
	require.NoError(t, err)
	var out bytes.Buffer
	e := &env{ctx: ctx, base: ctx, q: q, stdout: &out}
	require.NoError(t, ctlStats(flag.NewFlagSet("stats", flag.ContinueOnError))(e, nil))
	require.Regexp(t, fmt.Sprintf(`(?m)^q +k +%d `, n), out.String())
	cmds := cmdsOf()
	require.Equal(t, 1, countOf(cmds, "find "+queue.DefaultStatsCollection), cmds)
	for _, c := range cmds {
		require.NotEqual(t, queue.DefaultCollection, strings.TrimPrefix(c, strings.SplitN(c, " ", 2)[0]+" "), "a command on the jobs collection: %v", cmds)
		require.NotEqual(t, "aggregate", strings.SplitN(c, " ", 2)[0], cmds)
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, v := range list {
		if v == s {
			n++
		}
	}
	return n
}

// TestStatsEscapesForeignNames: names and a leader id another application
// wrote into the stored counts (control characters, an escape sequence, a
// newline that would add a row) reach the terminal escaped; --json keeps
// them exact.
func TestStatsEscapesForeignNames(t *testing.T) {
	t.Parallel()
	db, q := statsFixture(t)
	ctx := context.Background()
	by := "w\x1b]52;c;ZXZpbA==\x07"
	queueName, kind := "mail\nq  k  99", "k\x1b[2K"
	_, err := q.StoreStats(ctx, queue.StoredStats{
		CountedAt: time.Now().UTC(), Every: 15 * time.Second, By: by,
		Queues: []queue.QueueStats{{Queue: queueName, Counts: map[string]map[jobs.State]int64{kind: {"available": 1}}}},
	})
	require.NoError(t, err)
	out, errs, code := runCtl(t, testdb.URI(), db, "stats")
	require.Zero(t, code, errs)
	require.NotContains(t, out, "\x1b", "an escape sequence reached the terminal")
	require.NotContains(t, out, "\x07")
	require.Contains(t, out, `counted by "w\x1b]52;c;ZXZpbA==\a"`)
	require.Regexp(t, `(?m)^"mail\\nq  k  99" +"k\\x1b\[2K" +1 `, out)
	require.NotRegexp(t, `(?m)^q  k  99`, out, "a newline in a name added a row")

	out, errs, code = runCtl(t, testdb.URI(), db, "stats", "--json")
	require.Zero(t, code, errs)
	var doc statsJSON
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	require.Equal(t, by, doc.CountedBy)
	require.Equal(t, queueName, doc.Queues[0].Queue)
}
