package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// runCtl runs docketctl in-process against uri and db.
func runCtl(t *testing.T, uri string, db *mongo.Database, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	args = append(args[:1:1], append([]string{"--mongo-uri", uri, "--db", db.Name(), "--mongo-timeout", "3s"}, args[1:]...)...)
	code = Ctl(args, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), code
}

// TestCapacityCommands: `docketctl capacity q 2` bounds q; the third
// `enqueue job` exits 3 with "queue q is full (capacity 2)"; a batch
// enqueues the jobs of other queues, names the refused lines and exits 3;
// stats and `capacity` alone show it; `capacity q off` lifts it.
func TestCapacityCommands(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()

	out, errs, code := runCtl(t, uri, db, "capacity", "q", "2")
	require.Zero(t, code, errs)
	require.Contains(t, out, "q\tcapacity 2 (0 admitted")
	_, errs, code = runCtl(t, uri, db, "capacity", "q", "-1")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "whole number")
	_, _, code = runCtl(t, uri, db, "capacity", "q")
	require.Equal(t, 2, code)

	for range 2 {
		_, errs, code := runEnqueue(t, uri, db, "", "job", "--kind", "noop", "--queue", "q")
		require.Zero(t, code, errs)
	}
	out, errs, code = runEnqueue(t, uri, db, "", "job", "--kind", "noop", "--queue", "q")
	require.Equal(t, ExitQueueFull, code)
	require.Empty(t, out, "no id printed: nothing was added")
	require.Contains(t, errs, "enqueue job: queue q is full (capacity 2)\n")

	lines := `{"kind": "noop", "queue": "q"}
{"kind": "noop", "queue": "other"}
{"kind": "noop", "queue": "q"}
{"kind": "noop"}
`
	out, errs, code = runEnqueue(t, uri, db, lines, "batch")
	require.Equal(t, ExitQueueFull, code, errs)
	require.Len(t, strings.Fields(out), 2, "the two jobs of unbounded queues are in")
	require.Contains(t, errs, "2 inserted")
	require.Contains(t, errs, "2 refused (queue q is full (capacity 2))")
	require.Contains(t, errs, "refused, their queue full: lines 1, 3")
	require.Contains(t, errs, "queue q is full (capacity 2)\n")
	n, err := db.Collection("jobs").CountDocuments(context.Background(), bson.M{"queue": "q"})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)

	out, errs, code = runCtl(t, uri, db, "stats")
	require.Zero(t, code, errs)
	require.Contains(t, out, "queue q: capacity 2, 2 admitted and unfinished")
	out, errs, code = runCtl(t, uri, db, "capacity")
	require.Zero(t, code, errs)
	require.Regexp(t, `(?m)^q +2 +2 `, out)

	out, errs, code = runCtl(t, uri, db, "capacity", "q", "off")
	require.Zero(t, code, errs)
	require.Contains(t, out, "unbounded")
	_, errs, code = runEnqueue(t, uri, db, "", "job", "--kind", "noop", "--queue", "q")
	require.Zero(t, code, errs)
}

// TestOrderCommands: products are created and shown by docketctl; `enqueue
// order` checks its args before writing and enqueues an order job.
func TestOrderCommands(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	out, errs, code := runCtl(t, uri, db, "product", "create", "tv", "3")
	require.Zero(t, code, errs)
	require.Equal(t, "tv\tstock 3\n", out)
	_, errs, code = runCtl(t, uri, db, "product", "create", "tv", "3")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "already exists")
	_, _, code = runCtl(t, uri, db, "product", "create", "x", "-2")
	require.Equal(t, 2, code)

	_, errs, code = runEnqueue(t, uri, db, "", "order", "--product", "tv", "--quantity", "0")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "quantity")
	out, errs, code = runEnqueue(t, uri, db, "", "order", "--product", "tv", "--order-id", "o1")
	require.Zero(t, code, errs)
	var job struct {
		Kind string `bson:"kind"`
		Args struct {
			OrderID  string `bson:"orderId"`
			Product  string `bson:"product"`
			Quantity int64  `bson:"quantity"`
		} `bson:"args"`
	}
	require.NoError(t, db.Collection("jobs").FindOne(context.Background(), bson.M{"_id": strings.TrimSpace(out)}).Decode(&job))
	require.Equal(t, "order", job.Kind)
	require.Equal(t, "o1", job.Args.OrderID)
	require.Equal(t, "tv", job.Args.Product)
	require.EqualValues(t, 1, job.Args.Quantity)

	out, errs, code = runCtl(t, uri, db, "product", "show", "tv")
	require.Zero(t, code, errs)
	require.Contains(t, out, "stock 3\tsold 0\torders placed 0")
	_, _, code = runCtl(t, uri, db, "product", "show", "nope")
	require.Equal(t, 2, code)
}
