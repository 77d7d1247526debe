package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

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

	out, stderr, code := run(t, bin, db, nil, "", "job", "--kind", "record", "--args", `{"n": 1, "s": "x"}`, "--priority", "3", "--queue", "q1", "--max-attempts", "4")
	require.Equal(t, 0, code, stderr)
	id := strings.TrimSpace(out)
	j, err := q.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "record", j.Kind)
	require.Equal(t, "q1", j.Queue)
	require.Equal(t, 3, j.Priority)
	require.Equal(t, 4, j.MaxAttempts)
	require.Equal(t, int32(1), j.Args.Lookup("n").Int32())

	out, stderr, code = run(t, bin, db, nil, "", "job", "--kind", "record", "--delay", "1h", "--unique-key", "u")
	require.Equal(t, 0, code, stderr)
	first := strings.TrimSpace(out)
	j, err = q.Get(ctx, first)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Hour), j.RunAt, time.Minute)
	out, stderr, code = run(t, bin, db, nil, "", "job", "--kind", "record", "--unique-key", "u")
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

	out, stderr, code = run(t, bin, db, nil, "", "cancel", ids[1])
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "cancelled")
	j, err = q.Get(ctx, ids[1])
	require.NoError(t, err)
	require.Equal(t, jobs.StateCancelled, j.State)

	n, err := q.Collection().CountDocuments(ctx, bson.M{})
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
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
		{"cancel unknown id", "", []string{"cancel", "nope"}, "job not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := run(t, bin, db, nil, tc.stdin, tc.args...)
			require.Equal(t, 2, code, stderr)
			require.Contains(t, stderr, tc.want)
		})
	}
	n, err := q.Collection().CountDocuments(context.Background(), bson.M{})
	require.NoError(t, err)
	require.Zero(t, n)
}
