package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestLedgerCommands: `enqueue ledger-transfer` enqueues the job,
// `docketctl ledger balance` shows the balance, and `docketctl ledger
// verify` exits 0, then 1 naming the account once its cache drifts.
func TestLedgerCommands(t *testing.T) {
	db := testdb.NewDB(t)
	ctx := context.Background()
	require.NoError(t, handlers.Setup(ctx, db))
	require.NoError(t, handlers.OpenLedgerAccount(ctx, db, "a1", 1_000))
	require.NoError(t, handlers.OpenLedgerAccount(ctx, db, "a2", 0))
	run := func(tool func([]string, *strings.Reader, *bytes.Buffer, *bytes.Buffer) int, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		full := append([]string{args[0], "--mongo-uri", testdb.URI(), "--db", db.Name()}, args[1:]...)
		code := tool(full, strings.NewReader(""), &out, &errb)
		return code, out.String(), errb.String()
	}
	enqueue := func(a []string, in *strings.Reader, o, e *bytes.Buffer) int { return Enqueue(a, in, o, e) }
	ctl := func(a []string, in *strings.Reader, o, e *bytes.Buffer) int { return Ctl(a, in, o, e) }

	code, out, errs := run(enqueue, "ledger-transfer", "--from", "a1", "--to", "a2", "--amount", "250")
	require.Equal(t, 0, code, errs)
	jobID := strings.TrimSpace(out)
	code, _, errs = run(enqueue, "ledger-transfer", "--from", "a1", "--to", "a1", "--amount", "5")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "same account")

	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	reg := jobs.NewRegistry()
	require.NoError(t, handlers.Register(reg, handlers.Deps{DB: db, Queue: q}))
	h, _, _ := reg.Lookup(handlers.LedgerTransferKind)
	j, err := q.Get(ctx, jobID)
	require.NoError(t, err)
	require.NoError(t, h.Work(ctx, j))

	code, out, errs = run(ctl, "ledger", "balance", "a2")
	require.Equal(t, 0, code, errs)
	require.Equal(t, "a2\t250\n", out)
	code, _, errs = run(ctl, "ledger", "balance", "ghost")
	require.Equal(t, 2, code)
	require.Contains(t, errs, `account "ghost": not found`)

	code, out, errs = run(ctl, "ledger", "verify")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "matches")
	_, err = db.Collection(handlers.LedgerAccountsCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: "a1"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "cache.balance", Value: int64(5)}}}})
	require.NoError(t, err)
	code, out, errs = run(ctl, "ledger", "verify")
	require.Equal(t, 1, code)
	require.Contains(t, out, "a1: cache 5 at seqId 0, log 1000")
	require.Contains(t, errs, "1 ledger accounts drifted from the log: a1")

	code, _, _ = run(ctl, "ledger", "frobnicate")
	require.Equal(t, 2, code)
}
