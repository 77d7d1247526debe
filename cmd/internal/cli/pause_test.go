package cli

import (
	"testing"

	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestPauseAndResumeCommands: pause and resume report, queue by queue,
// what they changed and what already stood so, and record who paused
// (--by, else the operator).
func TestPauseAndResumeCommands(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	pausedBy := func(q string) string {
		t.Helper()
		raw, err := db.Collection("queues").FindOne(t.Context(), bson.M{"_id": q}).Raw()
		require.NoError(t, err)
		by, _ := raw.Lookup("pausedBy").StringValueOK()
		return by
	}

	out, errs, code := runCtl(t, uri, db, "pause", "--by", "ops", "a")
	require.Zero(t, code, errs)
	require.Contains(t, out, "a\tpaused: workers stop claiming from it within 1s; running jobs finish\n")
	require.Equal(t, "ops", pausedBy("a"))
	out, errs, code = runCtl(t, uri, db, "pause", "a", "b")
	require.Zero(t, code, errs)
	require.Contains(t, out, "a\talready paused; nothing changed\n")
	require.Contains(t, out, "b\tpaused")
	require.Equal(t, operator(), pausedBy("b"))

	out, errs, code = runCtl(t, uri, db, "resume", "a", "c")
	require.Zero(t, code, errs)
	require.Contains(t, out, "a\tresumed: workers claim from it again within 1s\n")
	require.Contains(t, out, "c\tnot paused; nothing changed\n")
}
