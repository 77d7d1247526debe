package e2e

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// A test's own calls (its setup, its checks' reads, and the operator
// commands whose failure is not what it checks) are an application's: run
// on a devdb with --faults and --elections (DOCKET_DEVDB_FLAGS), they meet
// MongoDB's failure replies, and send the call again as an application on
// a replica set does (testdb.Retry), so that a refused setup write is not
// taken for a broken guarantee. What the tests check is read from the
// database.

// must runs f, a call the test makes as an application does, sending it
// again after one of MongoDB's failure replies, and fails t on any other
// error. f must be safe to apply twice: a failed send may have applied.
func must(t testing.TB, what string, f func() error) {
	t.Helper()
	require.NoError(t, testdb.Retry(t.Logf, what, f), what)
}

// mustInsert is must for inserts of documents of ids of their own: a
// duplicate key after a resend is the earlier send's insert.
func mustInsert(t testing.TB, what string, f func() error) {
	t.Helper()
	require.NoError(t, testdb.RetryInsert(t.Logf, what, f), what)
}

// insertDocs inserts docs (of ids of their own) into coll as an
// application does.
func insertDocs(t testing.TB, coll *mongo.Collection, docs []any) {
	t.Helper()
	mustInsert(t, "insert into "+coll.Name(), func() error {
		_, err := coll.InsertMany(context.Background(), docs, options.InsertMany().SetOrdered(false))
		return err
	})
}

// enqueueMany enqueues ins as an application does: an enqueue that met a
// failure reply is sent again with the ids it reported, so that a job an
// earlier send inserted is found, not added twice.
func enqueueMany(t testing.TB, q *queue.Client, ins []queue.Insert) []queue.Result {
	t.Helper()
	ins = slices.Clone(ins)
	var res []queue.Result
	must(t, "enqueue", func() (err error) {
		res, err = q.EnqueueMany(context.Background(), ins)
		for i := range res {
			if ins[i].Opts.ID == "" {
				ins[i].Opts.ID = res[i].ID
			}
		}
		return err
	})
	return res
}

// enqueue is enqueueMany of one job.
func enqueue(t testing.TB, q *queue.Client, kind string, args any, opts queue.InsertOpts) queue.Result {
	t.Helper()
	return enqueueMany(t, q, []queue.Insert{{Kind: kind, Args: args, Opts: opts}})[0]
}

// count counts the documents of coll that filter matches.
func count(t testing.TB, coll *mongo.Collection, filter any) int64 {
	t.Helper()
	var n int64
	must(t, "count in "+coll.Name(), func() (err error) {
		n, err = coll.CountDocuments(context.Background(), filter)
		return err
	})
	return n
}

// findAll reads the documents of coll that filter matches into out (a
// pointer to a slice), the whole read again after a failure reply.
func findAll(t testing.TB, coll *mongo.Collection, filter any, out any) {
	t.Helper()
	must(t, "read "+coll.Name(), func() error { return readAll(coll, filter, out) })
}

// readAll reads the documents of coll that filter matches into out.
func readAll(coll *mongo.Collection, filter any, out any) error {
	ctx := context.Background()
	cur, err := coll.Find(ctx, filter)
	if err != nil {
		return err
	}
	return cur.All(ctx, out)
}

// operator runs a command (docketctl, enqueue) as an operator does: one
// that failed with one of MongoDB's failure replies (a non-zero exit whose
// output names the reply) is run again, for up to testdb.RetryFor.
// An enqueue command run again is given the id it printed (--id), as it
// asks. resent says whether the last command was run more than once: a command
// whose first run was applied with its reply lost then reports what it
// finds (say "already paused"), and the test reads the database instead.
type operator struct {
	t      *testing.T
	bin    string
	db     *mongo.Database
	env    []string
	resent bool
}

// rerunWith finds the id an enqueue command that failed asks to be run
// again with, so that it enqueues its job at most once.
var rerunWith = regexp.MustCompile(`rerun with --id (\S+)`)

// run runs the command with args and returns its last run's output and
// exit status.
func (o *operator) run(args ...string) (string, string, int) {
	o.t.Helper()
	o.resent = false
	deadline := time.Now().Add(testdb.RetryFor)
	for try := 1; ; try++ {
		out, stderr, code := run(o.t, o.bin, o.db, o.env, "", args...)
		if code == 0 || !testdb.TransientText(out+stderr) || time.Now().After(deadline) {
			return out, stderr, code
		}
		o.t.Logf("%v (try %d) met a failure reply, run again: %s", args, try, tail(out+stderr, 3))
		o.resent = true
		if m := rerunWith.FindStringSubmatch(out + stderr); m != nil && !slices.Contains(args, "--id") {
			args = append(slices.Clone(args), "--id", m[1])
		}
		time.Sleep(testdb.RetryWait(try))
	}
}

// leaderTTL is fastWorker's --leader-ttl.
const leaderTTL = 3 * time.Second

// electionAllowance is how much longer than without elections a leader's
// work may pause on a devdb run with --elections EVERY/FOR
// (DOCKET_DEVDB_FLAGS): an election refuses every write for FOR, so the
// leader cannot renew its term, may lose it, and a process takes it again
// within a term (ttl). Zero without elections.
func electionAllowance(t testing.TB, ttl time.Duration) time.Duration {
	t.Helper()
	var value string
	flags := testdb.DevDBFlags()
	for i, f := range flags {
		if v, ok := strings.CutPrefix(f, "--elections="); ok {
			value = v
		} else if f == "--elections" && i+1 < len(flags) {
			value = flags[i+1]
		}
	}
	if value == "" {
		return 0
	}
	_, window, ok := strings.Cut(value, "/")
	d, err := time.ParseDuration(window)
	require.True(t, ok && err == nil, "--elections %q is not EVERY/FOR", value)
	return d + ttl
}
