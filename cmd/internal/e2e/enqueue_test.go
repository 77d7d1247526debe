package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestEnqueueCommand(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	bin := enqueueBinary(t)
	ctx := context.Background()
	enq := &operator{t: t, bin: bin, db: db}
	ctl := &operator{t: t, bin: ctlBinary(t), db: db}

	out, stderr, code := enq.run("job", "--kind", "record", "--args", `{"n": 1, "s": "x"}`, "--priority", "3", "--queue", "q1", "--max-attempts", "4")
	require.Equal(t, 0, code, stderr)
	id := strings.TrimSpace(out)
	var j *jobs.Job
	must(t, "read", func() (err error) { j, err = q.Get(ctx, id); return err })
	require.Equal(t, "record", j.Kind)
	require.Equal(t, "q1", j.Queue)
	require.Equal(t, 3, j.Priority)
	require.Equal(t, 4, j.MaxAttempts)
	require.Equal(t, int32(1), j.Args.Lookup("n").Int32())

	out, stderr, code = enq.run("job", "--kind", "record", "--delay", "1h", "--unique-key", "u")
	require.Equal(t, 0, code, stderr)
	first := strings.TrimSpace(out)
	must(t, "read", func() (err error) { j, err = q.Get(ctx, first); return err })
	require.WithinDuration(t, time.Now().Add(time.Hour), j.RunAt, time.Minute)
	out, stderr, code = enq.run("job", "--kind", "record", "--unique-key", "u")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, first, strings.TrimSpace(out))
	require.Contains(t, stderr, "unique key")

	lines := `{"kind": "record", "args": {"i": 1}}
# a comment
{"kind": "record", "args": {"i": 2}, "priority": 2, "delay": "5m"}
`
	out, stderr, code = run(t, bin, db, nil, lines, "batch")
	require.Equal(t, 0, code, stderr)
	ids := strings.Fields(out)
	require.Len(t, ids, 2)

	out, stderr, code = ctl.run("cancel", ids[1])
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "cancelled")
	must(t, "read", func() (err error) { j, err = q.Get(ctx, ids[1]); return err })
	require.Equal(t, jobs.StateCancelled, j.State)

	require.EqualValues(t, 4, count(t, store.Of(q).Collection(), bson.M{}))
}

func TestEnqueueRejectsBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	bin := enqueueBinary(t)
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"no kind", "", []string{"job"}, "--kind is required"},
		{"args an array", "", []string{"job", "--kind", "k", "--args", "[1,2]"}, "args must be a JSON object"},
		{"args not json", "", []string{"job", "--kind", "k", "--args", "{nope"}, "args are not valid JSON"},
		{"negative delay", "", []string{"job", "--kind", "k", "--delay", "-5s"}, "delay: -5s must not be negative"},
		{"bad run-at", "", []string{"job", "--kind", "k", "--run-at", "tomorrow"}, "--run-at"},
		{"unknown command", "", []string{"jbo"}, `unknown command "jbo"`},
		{"batch with a bad line", "{\"kind\": \"k\"}\n{\"kind\": \"k\", \"args\": \"x\"}\n", []string{"batch"}, "line 2: args must be a JSON object"},
		{"batch unknown field", "{\"kind\": \"k\", \"prio\": 1}\n", []string{"batch"}, `line 1: json: unknown field "prio"`},
		{"batch missing kind", "{\"args\": {}}\n", []string{"batch"}, "line 1: kind: must not be empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := run(t, bin, db, nil, tc.stdin, tc.args...)
			require.Equal(t, 2, code, stderr)
			require.Contains(t, stderr, tc.want)
		})
	}
	n, err := store.Of(q).Collection().CountDocuments(context.Background(), bson.M{})
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestEnqueueHandlerCommands(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	bin := enqueueBinary(t)
	ctx := context.Background()
	enq := &operator{t: t, bin: bin, db: db}
	ctl := &operator{t: t, bin: ctlBinary(t), db: db}
	out, stderr, code := enq.run("seed", "--users", "3", "--accounts", "2", "--balance", "500", "--comments", "5")
	require.Equal(t, 0, code, stderr)
	if !enq.resent { // else the first run's seed, its reply lost, counts as there
		require.Contains(t, out, "users: 3 created")
	}
	out, _, code = enq.run("seed", "--users", "3", "--accounts", "2", "--comments", "5")
	require.Equal(t, 0, code)
	require.Contains(t, out, "users: 0 created, 3 already there")

	for _, tc := range []struct {
		args []string
		kind string
	}{
		{[]string{"add-friend", "--user-a", "u1", "--user-b", "u2"}, "add-friend"},
		{[]string{"rename", "--user", "u1", "--name", "Ada"}, "rename-user"},
	} {
		out, stderr, code := enq.run(tc.args...)
		require.Equal(t, 0, code, stderr)
		var j *jobs.Job
		must(t, "read", func() (err error) { j, err = q.Get(ctx, strings.TrimSpace(out)); return err })
		require.Equal(t, tc.kind, j.Kind)
	}
	out, stderr, code = enq.run("transfer", "--from", "a1", "--to", "a2", "--amount", "150", "--tx-id", "pay-0")
	require.Equal(t, 0, code, stderr)
	fields := strings.Fields(out)
	require.Len(t, fields, 3, out)
	var j *jobs.Job
	must(t, "read", func() (err error) { j, err = q.Get(ctx, fields[0]); return err })
	require.Equal(t, "transfer", j.Kind)
	require.Equal(t, fields[2], j.Args.Lookup("txId").StringValue())

	// Cancelling a transfer's job cancels the transfer: recovery rolls it
	// back instead of applying it.
	out, stderr, code = ctl.run("cancel", fields[0])
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "cancelled")
	var tx bson.Raw
	must(t, "read", func() (err error) {
		tx, err = db.Collection("transactions").FindOne(ctx, bson.M{"_id": fields[2]}).Raw()
		return err
	})
	require.NotZero(t, tx.Lookup("cancelRequestedAt").Type, "the transfer is asked to cancel: %s", tx)

	// A transfer run again with its --tx-id (its first run's reply lost,
	// say) makes no second transaction and no second job.
	args := []string{"transfer", "--from", "a1", "--to", "a2", "--amount", "150", "--tx-id", "pay-1"}
	first, stderr, code := enq.run(args...)
	require.Equal(t, 0, code, stderr)
	again, stderr, code := enq.run(args...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, first, again)
	require.EqualValues(t, 1, count(t, db.Collection("transactions"), bson.M{"_id": "pay-1"}))

	// show prints a job another application wrote with fields of other
	// types as it is stored.
	insertDocs(t, store.Of(q).Collection(), []any{bson.M{"_id": "odd", "kind": "noop", "attempt": "x", "state": "running", "errors": 5}})
	out, stderr, code = ctl.run("show", "--json", "odd")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `"attempt":"x"`)
	out, stderr, code = ctl.run("show", "odd")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "attempt:           x")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"add-friend", "--user-a", "u1", "--user-b", "u1"}, "invalid args"},
		{[]string{"add-friend", "--user-a", "u1"}, "userB"},
		{[]string{"rename", "--user", "u1", "--name", ""}, "newName"},
		{[]string{"rename", "--user", "u1", "--name", strings.Repeat("x", 101)}, "newName"},
		{[]string{"transfer", "--from", "a1", "--to", "a2", "--amount", "0"}, "amount"},
		{[]string{"transfer", "--from", "a1", "--to", "a1", "--amount", "5"}, "invalid transfer"},
		{[]string{"transfer", "--from", "a1", "--to", "nope", "--amount", "5"}, "nope"},
		{[]string{"transfer", "--from", "a1", "--to", "a2", "--amount", "1.5"}, "invalid value"},
		{[]string{"transfer", "--reverse", "no-such-tx"}, "no-such-tx"},
		{[]string{"transfer", "--from", "a1", "--to", "a2", "--amount", "151", "--tx-id", "pay-1"}, "transaction id taken"},
		{[]string{"seed", "--users", "-1"}, "must not be negative"},
	} {
		_, stderr, code := enq.run(tc.args...)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want, "%v", tc.args)
	}
	require.EqualValues(t, 5, count(t, store.Of(q).Collection(), bson.M{}), "bad input must enqueue nothing")

	// A --tx-id holding a terminal's escape code is printed escaped.
	out, stderr, code = enq.run("transfer", "--from", "a1", "--to", "a2", "--amount", "150", "--tx-id", "pay\x1b[2J")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, out, "\x1b", "the id's escape code reached the terminal: %q", out)
	require.Contains(t, out, `"pay\x1b[2J"`)
}
