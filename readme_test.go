//lint:file-ignore SA4006 the README's admin lines run as written, each err set in turn

package docket_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap/zaptest"
)

// EmailArgs is the args type the README's "From Go" snippet registers,
// as the README declares it.
// --- README args ---
type EmailArgs struct {
	To string `bson:"to"`
}

func (EmailArgs) Kind() string { return "email" }

func (EmailArgs) InsertOpts() docket.InsertOpts { return docket.InsertOpts{MaxAttempts: 5} }

// --- end args ---

// TestReadmeFromGo runs the README's "From Go" snippet as it is written, on
// a fresh database (the server's URI and the database's name are the
// test's, and the handler body is the test's), and checks that the README
// holds the snippet line for line, so the two cannot drift apart.
func TestReadmeFromGo(t *testing.T) {
	t.Parallel()
	uri, dbName := testdb.URI(), testdb.NewDB(t).Name()
	ctx := context.Background()
	logger := zaptest.NewLogger(t)
	sent := make(chan string, 1)
	send := func(_ context.Context, a EmailArgs) error { sent <- a.To; return nil }

	// --- README ---
	mc, _ := mongo.Connect(options.Client().ApplyURI(uri))
	client, err := docket.NewClient(mc.Database(dbName), docket.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	docket.MustAddHandler(client, func(ctx context.Context, j *jobs.Job, a EmailArgs) error {
		return send(ctx, a)
	}, jobs.KindOptions{Timeout: time.Minute})
	if err := client.Start(ctx); err != nil { // indexes, pool, reaper, leader, periodic jobs
		t.Fatal(err)
	}
	defer client.Stop(context.Background()) // graceful: stops claiming, waits, then cancels

	res, err := client.Insert(ctx, EmailArgs{To: "a@example.com"},
		&docket.InsertOpts{Priority: 5, UniqueKey: "welcome:a@example.com"})
	// res.ID; res.Duplicate is true when an unfinished job already held the key.
	// --- end ---
	t.Cleanup(func() { _ = mc.Disconnect(context.Background()) })
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, "a@example.com", <-sent)
	require.Eventually(t, func() bool {
		j, err := client.JobGet(ctx, res.JobID())
		return err == nil && j.State == jobs.StateSucceeded && j.MaxAttempts == 5
	}, 20*time.Second, 20*time.Millisecond)

	// The README's admin lines, run as written.
	// --- README admin ---
	page, err := client.JobList(ctx, &docket.JobListParams{
		JobFilter: docket.JobFilter{States: []jobs.State{jobs.StateDead}}, Limit: 50})
	_, err = client.JobRetry(ctx, &docket.JobRetryParams{JobFilter: docket.JobFilter{JobIDs: []docket.JobID{res.JobID()}}})
	_, err = client.QueuePause(ctx, "email", &docket.QueuePauseOpts{By: "ops"})
	// --- end admin ---
	require.NoError(t, err)
	require.Empty(t, page.Jobs)

	requireDocHolds(t, "README.md", "readme_test.go", "// --- README args ---\n", "// --- end args ---", nil)
	fromGo := strings.NewReplacer("t.Fatal(err)", "log.Fatal(err)", "(uri)", `("mongodb://127.0.0.1:27017")`,
		"(dbName)", `("app")`, "return send(ctx, a)", "return sendEmail(ctx, a.To)")
	requireDocHolds(t, "README.md", "readme_test.go", "// --- README ---\n", "\t// --- end ---", fromGo)
	requireDocHolds(t, "README.md", "readme_test.go", "// --- README admin ---\n", "\t// --- end admin ---", nil)
}

// requireDocHolds checks that doc holds, line for line, the code of the
// test file src between the lines begin and end (one tab of indent
// dropped, then the test's own names replaced by the doc's with fix), so
// that a doc's code that a test runs and the doc cannot drift apart.
func requireDocHolds(t *testing.T, doc, src, begin, end string, fix *strings.Replacer) {
	t.Helper()
	code, err := os.ReadFile(src)
	require.NoError(t, err)
	text, err := os.ReadFile(doc)
	require.NoError(t, err)
	part := string(code)
	i := strings.Index(part, begin)
	require.GreaterOrEqual(t, i, 0, "%s has no line %q", src, begin)
	part = part[i+len(begin):]
	j := strings.Index(part, end)
	require.GreaterOrEqual(t, j, 0, "%s has no line %q", src, end)
	for _, line := range strings.Split(strings.TrimRight(part[:j], "\n"), "\n") {
		line = strings.TrimPrefix(line, "\t")
		if fix != nil {
			line = fix.Replace(line)
		}
		if !strings.Contains(string(text), line+"\n") {
			t.Errorf("%s lacks this line of %s, which the test runs:\n%s", doc, src, line)
		}
	}
}
