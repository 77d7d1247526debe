package e2e

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// python is Debian's Python, which has python3-pymongo (.ci/run and make
// test install it).
const python = "/usr/bin/python3"

// TestPythonAppEnqueuesByTheDocumentedSchema: a Python program inserts jobs
// with pymongo, knowing only the README's schema; a worker runs them.
func TestPythonAppEnqueuesByTheDocumentedSchema(t *testing.T) {
	t.Parallel()
	if out, err := exec.Command(python, "-c", "import pymongo").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import pymongo (install Debian's python3-pymongo, as .ci/run does): %v\n%s", python, err, out)
	}
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	ctx := context.Background()
	_, stderr, code := (&operator{t: t, bin: enqueueBinary(t), db: db}).run("seed", "--users", "3", "--accounts", "0", "--comments", "4")
	require.Equal(t, 0, code, stderr)

	out, err := exec.Command(python, "testdata/enqueue.py", testdb.URI(), db.Name()).CombinedOutput()
	require.NoError(t, err, "%s", out)
	ids := strings.Fields(string(out))
	require.Len(t, ids, 3)

	w := startWorker(t, db, "W", fastWorker...)
	friends := waitJob(t, q, ids[0], time.Minute, "succeeded", inState(jobs.StateSucceeded))
	require.Equal(t, 1, friends.Attempt)
	waitJob(t, q, ids[1], time.Minute, "succeeded", inState(jobs.StateSucceeded))
	bad := waitJob(t, q, ids[2], time.Minute, "dead", inState(jobs.StateDead))
	require.Contains(t, bad.Errors[0].Message, "invalid args")

	var u1, u2, u3 bson.M
	users := db.Collection(handlers.UsersCollection)
	for id, u := range map[string]*bson.M{"u1": &u1, "u2": &u2, "u3": &u3} {
		must(t, "read user "+id, func() error { return users.FindOne(ctx, bson.M{"_id": id}).Decode(u) })
	}
	require.Equal(t, bson.A{"u2"}, u1["friends"])
	require.Equal(t, bson.A{"u1"}, u2["friends"])
	require.Equal(t, "Ada from Python", u3["name"])
	require.Zero(t, count(t, db.Collection(handlers.CommentsCollection), bson.M{"uid": "u3", "uname": bson.M{"$ne": "Ada from Python"}}))

	w.signal(syscall.SIGTERM)
	require.Equal(t, 0, w.wait(30*time.Second))
}

// TestWorkerBinaryHasNoFerretDB: FerretDB is for devdb and tests only.
func TestWorkerBinaryHasNoFerretDB(t *testing.T) {
	t.Parallel()
	for _, pkg := range []string{"github.com/docketq/docket/cmd/worker", "github.com/docketq/docket/cmd/enqueue"} {
		bin := testdb.BuildBinary(t, pkg, false)
		out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "go.mongodb.org/mongo-driver/v2")
		require.NotContains(t, string(out), "FerretDB", "%s links FerretDB", pkg)
	}
}
