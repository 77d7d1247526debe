package testdb

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// FaultyDB starts a devdb of the test's own with flags added to those of
// EnvDevDBFlags (say "--faults cursorkill=1 --seed 1", docs/EMBEDDED-SERVER.md)
// and returns a database on it for this test alone. The test may not be
// parallel (the flags reach devdb through the environment). Skipped on a
// real MongoDB, which sends no reply on request.
func FaultyDB(t *testing.T, flags string) *mongo.Database {
	t.Helper()
	return FaultyDBWith(t, flags, options.Client())
}

// FaultyDBWith is FaultyDB whose client is made with opts (a command
// monitor, say) and the devdb's URI.
func FaultyDBWith(t *testing.T, flags string, opts *options.ClientOptions) *mongo.Database {
	t.Helper()
	SkipOnRealMongo(t, "injects MongoDB's failure replies with a devdb of its own: "+flags)
	t.Setenv(EnvDevDBFlags, strings.TrimSpace(strings.Join(append(DevDBFlags(), flags), " ")))
	d := StartDevDB(t, "")
	c, err := mongo.Connect(opts.ApplyURI(d.URI()))
	if err != nil {
		t.Fatalf("testdb: connect to %s: %v", d.URI(), err)
	}
	// Registered after StartDevDB's stop, so run before it.
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c.Database(dbName(t.Name()))
}

// CursorKilledDB is FaultyDB on a devdb that kills every cursor at its first
// getMore, as MongoDB does after an idle timeout, an operator's killCursors
// or a restart: a read of more than a find's first batch (101 documents)
// meets CursorNotFound.
func CursorKilledDB(t *testing.T) *mongo.Database {
	t.Helper()
	return FaultyDB(t, "--faults cursorkill=1 --seed 1")
}

// RequireCursorKilled fails t unless err is MongoDB's CursorNotFound (43).
func RequireCursorKilled(t testing.TB, err error) {
	t.Helper()
	var se mongo.ServerError
	if !errors.As(err, &se) || !se.HasErrorCode(43) {
		t.Fatalf("want CursorNotFound (43), got %v", err)
	}
}
