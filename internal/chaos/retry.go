//go:build linux

package chaos

import (
	"context"
	"errors"
	"strings"
	"time"

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

// transientCodes are the replies a replica set sends for a write or a read
// that a client sends again: NotWritablePrimary (10107),
// InterruptedDueToReplStateChange (11602), PrimarySteppedDown (189),
// ShutdownInProgress (91), WriteConcernFailed (64, the write applied),
// MaxTimeMSExpired (50), CursorNotFound (43).
var transientCodes = []int{10107, 11602, 189, 91, 64, 50, 43}

// transientReplies are the same replies as the commands print them, and
// the driver's words for a connection lost before the reply.
var transientReplies = []string{
	"NotWritablePrimary", "InterruptedDueToReplStateChange", "PrimarySteppedDown", "WriteConcernFailed",
	"MaxTimeMSExpired", "CursorNotFound", "connection(", "incomplete read", "connection reset", "EOF",
}

// retryFor bounds the retries of one write: longer than an election.
const retryFor = 30 * time.Second

// transient says whether err is one of MongoDB's failure replies that a
// client sends again, or a connection lost before the reply.
func transient(err error) bool {
	if err == nil {
		return false
	}
	if mongo.IsNetworkError(err) || mongo.IsTimeout(err) {
		return true
	}
	var se mongo.ServerError
	if errors.As(err, &se) {
		for _, c := range transientCodes {
			if se.HasErrorCode(c) {
				return true
			}
		}
	}
	return transientText(err.Error())
}

// transientText says whether a command's error output names a transient
// reply.
func transientText(s string) bool {
	for _, w := range transientReplies {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// retry runs f until it returns nil or an error that is not transient, or
// retryFor has passed; it logs each retry and returns f's last error. A
// duplicate key after a retry is the earlier send's insert: nil.
func (r *run) retry(what string, f func() error) error {
	deadline := time.Now().Add(retryFor)
	for try := 1; ; try++ {
		err := f()
		if try > 1 && mongo.IsDuplicateKeyError(err) {
			return nil // an insert whose earlier send was applied: its reply was lost, or came with a writeConcernError
		}
		if !transient(err) || time.Now().After(deadline) {
			return err
		}
		r.t.Logf("chaos: %s (try %d) met a failure reply, sent again: %v", what, try, err)
		time.Sleep(time.Duration(min(try, 10)) * 100 * time.Millisecond)
	}
}

// command runs bin with r's environment, sending it again while it fails
// with a transient reply (its standard error names one), as retry does.
func (r *run) command(bin, stdin string, args ...string) (out, stderr string, code int) {
	deadline := time.Now().Add(retryFor)
	for try := 1; ; try++ {
		out, stderr, code = runCommand(bin, r.env, stdin, args...)
		if code == 0 || !transientText(stderr) || time.Now().After(deadline) {
			return out, stderr, code
		}
		r.t.Logf("chaos: %s %s (try %d) met a failure reply, run again: %s", bin, strings.Join(args, " "), try, strings.TrimSpace(stderr))
		time.Sleep(time.Duration(min(try, 10)) * 100 * time.Millisecond)
	}
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
