package cli

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestShowPrintsProgressEscaped: show prints a job's progress as a
// percentage, its message and when it was reported; a progress another
// application wrote (escape sequences in its message, invalid UTF-8, a
// huge message, NaN, a fraction out of range or of another type, a value
// that is no document) prints escaped and bounded, never raw.
func TestShowPrintsProgressEscaped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	at := time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC)
	huge := strings.Repeat("y", 1<<20)
	for id, progress := range map[string]any{
		"plain":   bson.M{"fraction": 0.427, "message": "copying files", "at": at},
		"hostile": bson.M{"fraction": 1, "message": "\x1b]0;pwned\x07\x1b[2J\r\nfake row"},
		"invalid": bson.M{"fraction": 0.5, "message": "bad\xffbytes"},
		"huge":    bson.M{"fraction": 0.1, "message": huge},
		"range":   bson.M{"fraction": 7.5},
		"typed":   bson.M{"fraction": "half"},
		"string":  "\x1b[31mred",
	} {
		_, err := db.Collection("jobs").InsertOne(ctx, bson.M{"_id": id, "kind": "k", "queue": "default", "state": "running", "progress": progress})
		require.NoError(t, err, id)
	}
	show := func(id string) string {
		t.Helper()
		out, errs, code := runCtl(t, testdb.URI(), db, "show", id)
		require.Equal(t, 0, code, errs)
		require.NotContains(t, out, "\x1b", "a raw escape reached the terminal")
		require.NotContains(t, out, "\x07")
		require.NotContains(t, out, "\r")
		require.Less(t, len(out), 4096, "the output is bounded")
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "  progress:") {
				return line
			}
		}
		t.Fatalf("no progress line in %q", out)
		return ""
	}
	require.Equal(t, "  progress:          42% copying files (reported 2026-11-27T20:00:00Z)", show("plain"))
	require.Contains(t, show("hostile"), `100% "\x1b]0;pwned\a\x1b[2J\r\nfake row"`)
	require.Contains(t, show("invalid"), "50% bad\uFFFDbytes")
	require.Contains(t, show("huge"), "10% "+huge[:jobs.MaxProgressMessageBytes])
	// devdb (FerretDB v1) refuses to store NaN, MongoDB stores it: read
	// as any unknown fraction is.
	nan, _ := bson.Marshal(bson.M{"fraction": math.NaN(), "message": "m"})
	var p jobs.ProgressReport
	require.NoError(t, p.UnmarshalBSONValue(byte(bson.TypeEmbeddedDocument), nan))
	require.Equal(t, "? m", progressLine(p))
	require.Equal(t, "  progress:          ?", show("range"))
	require.Equal(t, "  progress:          ?", show("typed"))
	require.Equal(t, "  progress:          ?", show("string"))
}
