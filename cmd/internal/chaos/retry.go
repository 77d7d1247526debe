//go:build linux

package chaos

import (
	"context"
	"errors"
	"strings"

	"github.com/docketq/docket/internal/testdb"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// The run's own writes (its setup, and the load it enqueues through the Go
// client and the commands) are an application's, not docket's workers':
// under devdb's --faults and --elections they meet MongoDB's failure
// replies too. On a replica set the driver retries such a write once, and
// an election ends within seconds; devdb is a standalone, so the driver
// never retries there (docs/EMBEDDED-SERVER.md). The run retries them as
// an application on a replica set would, for as long as an election may
// last, so that a refused setup write is not taken for a broken
// guarantee. Every retried write is idempotent or, when its first send may
// have been applied (a lost reply, a writeConcernError), harmless to apply
// twice: an id the retry finds there, or a second transfer of money.

// transient and transientText are testdb's classification of MongoDB's
// failure replies, which every harness shares.
var (
	transient     = testdb.Transient
	transientText = testdb.TransientText
)

// retry runs f until it returns nil or an error that is not transient, or
// testdb.RetryFor has passed; it logs each retry and returns f's last
// error. A duplicate key after a retry is the earlier send's insert: nil.
func (r *run) retry(what string, f func() error) error {
	return testdb.RetryInsert(r.t.Logf, "chaos: "+what, f)
}

// command runs bin with r's environment, sending it again while it fails
// with a transient reply (its standard error names one), as retry does.
func (r *run) command(bin, stdin string, args ...string) (out, stderr string, code int) {
	_ = testdb.Retry(r.t.Logf, "chaos: "+bin+" "+strings.Join(args, " "), func() error {
		out, stderr, code = runCommand(bin, r.env, stdin, args...)
		if code != 0 && transientText(stderr) {
			return errors.New(strings.TrimSpace(stderr))
		}
		return nil
	})
	return out, stderr, code
}

// readAll reads every document of coll into out for a check, retrying a
// failure reply (a killed cursor, a time limit); it fails the run on any
// other error.
func (r *run) readAll(ctx context.Context, what string, coll *mongo.Collection, out any) {
	r.t.Helper()
	err := r.retry("read "+what, func() error {
		cur, err := coll.Find(ctx, bson.M{})
		if err != nil {
			return err
		}
		return cur.All(ctx, out)
	})
	if err != nil {
		r.fatalf("chaos: read %s: %v", what, err)
	}
}
