package cli

import (
	"testing"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

// TestWorkflowRefusesTwoObjectsOnALine: a workflow line holding two JSON
// objects is refused as `enqueue batch` refuses it, naming the line, exit
// 2, nothing written; before, the second object was dropped and the
// workflow published without it.
func TestWorkflowRefusesTwoObjectsOnALine(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	in := `{"name": "a", "kind": "noop"}
{"name": "b", "kind": "noop"} {"name": "c", "kind": "noop", "after": ["b"]}
`
	_, errs, code := runEnqueue(t, uri, db, in, "workflow", "--id", "wf")
	require.Equal(t, 2, code, errs)
	require.Contains(t, errs, "line 2: more than one JSON object")
	require.Empty(t, jobIDs(t, db))

	_, errs, code = runEnqueue(t, uri, db, `{"kind": "noop"} {"kind": "noop"}`+"\n", "batch")
	require.Equal(t, 2, code, errs)
	require.Contains(t, errs, "line 1: more than one JSON object")
	require.Empty(t, jobIDs(t, db))
}

// TestEnqueueRefusesNamesThatAreNotUTF8: bytes that are not UTF-8 in a
// line's kind, queue, id, unique key, task name or "after" are refused,
// naming the line and the field, exit 2, nothing written, as `enqueue
// job` refuses them; before, Go's decoder turned them into U+FFFD and the
// job was stored under a name nobody serves.
func TestEnqueueRefusesNamesThatAreNotUTF8(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	_, errs, code := runEnqueue(t, uri, db, "", "job", "--kind", "k\xff")
	require.Equal(t, 2, code, errs)
	require.Contains(t, errs, `kind: "k\xff" is not valid UTF-8`)

	for _, tc := range []struct{ line, want string }{
		{`{"kind": "k` + "\xff" + `"}`, `line 2: kind: "k\xff" is not valid UTF-8`},
		{`{"kind": "k", "queue": "q` + "\xc3" + `"}`, `line 2: queue: "q\xc3" is not valid UTF-8`},
		{`{"kind": "k", "id": "` + "\xfe" + `a\n"}`, `line 2: id: "\xfea\n" is not valid UTF-8`},
		{`{"kind": "k", "uniqueKey": "u` + "\xed\xa0\x80" + `"}`, `line 2: uniqueKey: "u\xed\xa0\x80" is not valid UTF-8`},
		{`{"kind": "k", "after": ["ok", "p` + "\xff" + `"]}`, `line 2: after[1]: "p\xff" is not valid UTF-8`},
		{`{"kind": "k", "args": {"s": "x` + "\xff" + `"}}`, `line 2: args.s: string is not valid UTF-8`},
		{`{"kind": "k\ud800"}`, `line 2: kind: \ud800 is a lone surrogate escape, not a character`},
		{`{"kind": "k", "queue": "q\uDC00\ud83d\ude00"}`, `line 2: queue: \uDC00 is a lone surrogate escape, not a character`},
		{`{"kind": "k", "after": ["\\ud800", "\ud83dx"]}`, `line 2: after[1]: \ud83d is a lone surrogate escape, not a character`},
	} {
		_, errs, code := runEnqueue(t, uri, db, `{"kind": "k"}`+"\n"+tc.line+"\n", "batch")
		require.Equal(t, 2, code, "%q: %s", tc.line, errs)
		require.Contains(t, errs, tc.want, tc.line)
		requireSafe(t, errs, false)
	}
	for _, tc := range []struct{ line, want string }{
		{`{"name": "t` + "\xff" + `", "kind": "k"}`, `line 2: name: "t\xff" is not valid UTF-8`},
		{`{"name": "t", "kind": "k` + "\xff" + `"}`, `line 2: kind: "k\xff" is not valid UTF-8`},
		{`{"name": "t", "kind": "k", "queue": "` + "\x80" + `"}`, `line 2: queue: "\x80" is not valid UTF-8`},
		{`{"name": "t", "kind": "k", "after": ["s` + "\xff" + `"]}`, `line 2: after[0]: "s\xff" is not valid UTF-8`},
	} {
		_, errs, code := runEnqueue(t, uri, db, `{"name": "s", "kind": "k"}`+"\n"+tc.line+"\n", "workflow", "--id", "wf")
		require.Equal(t, 2, code, "%q: %s", tc.line, errs)
		require.Contains(t, errs, tc.want, tc.line)
		requireSafe(t, errs, false)
	}
	require.Empty(t, jobIDs(t, db))

	// Escapes that are characters are taken: a pair, an escaped backslash.
	out, errs, code := runEnqueue(t, uri, db, `{"id": "a", "kind": "k\ud83d\ude00\\ud800\u00e9"}`+"\n", "batch")
	require.Equal(t, 0, code, errs)
	require.Equal(t, "a\n", out)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	j, err := q.Get(t.Context(), "a")
	require.NoError(t, err)
	require.Equal(t, "k\U0001F600\\ud800é", j.Kind)
}
