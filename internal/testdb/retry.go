package testdb

import (
	"errors"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// A test's own calls (its setup, the checks' reads, and the calls a
// harness makes in a worker's or an operator's place) are an
// application's: under devdb's --faults and --elections they meet
// MongoDB's failure replies too. On a replica set the driver retries such
// a write once, and an election ends within seconds; devdb is a
// standalone, so the driver never retries there (docs/EMBEDDED-SERVER.md).
// Retry sends them again as an application on a replica set would, for as
// long as an election may last, so that a refused setup write is not
// taken for a broken guarantee. A write sent again must be idempotent or
// harmless to apply twice: its first send may have been applied (a lost
// reply, a writeConcernError).

// transientCodes are the replies a replica set sends for a write or a read
// that a client sends again: NotWritablePrimary (10107),
// InterruptedDueToReplStateChange (11602), PrimarySteppedDown (189),
// ShutdownInProgress (91), WriteConcernFailed (64, the write applied),
// MaxTimeMSExpired (50), CursorNotFound (43).
var transientCodes = []int{10107, 11602, 189, 91, 64, 50, 43}

// transientReplies are the same replies as docket's commands print them,
// and the driver's words for a connection lost before the reply.
var transientReplies = []string{
	"NotWritablePrimary", "InterruptedDueToReplStateChange", "PrimarySteppedDown", "WriteConcernFailed",
	"MaxTimeMSExpired", "CursorNotFound", "connection(", "incomplete read", "connection reset", "EOF",
}

// RetryFor bounds the retries of one call: longer than an election.
const RetryFor = 30 * time.Second

// Transient reports whether err is one of MongoDB's failure replies that a
// client sends again, or a connection lost before the reply.
func Transient(err error) bool {
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
	return TransientText(err.Error())
}

// TransientText reports whether a command's error output names a
// transient reply (Transient's, as text).
func TransientText(s string) bool {
	for _, w := range transientReplies {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// Retry calls f until it returns nil or an error that is not Transient, or
// RetryFor has passed, and returns f's last error. Before each new call it
// passes what, the try and the error to logf (t.Logf, say) and waits a
// little longer each time.
func Retry(logf func(format string, args ...any), what string, f func() error) error {
	deadline := time.Now().Add(RetryFor)
	for try := 1; ; try++ {
		err := f()
		if !Transient(err) || time.Now().After(deadline) {
			return err
		}
		logf("%s (try %d) met a failure reply, sent again: %v", what, try, err)
		time.Sleep(RetryWait(try))
	}
}

// RetryInsert is Retry for a call that inserts documents of ids of its
// own: a duplicate key after a retry is the earlier send's insert, whose
// reply was lost or came with a writeConcernError, and counts as done.
func RetryInsert(logf func(format string, args ...any), what string, f func() error) error {
	tries := 0
	return Retry(logf, what, func() error {
		tries++
		err := f()
		if tries > 1 && mongo.IsDuplicateKeyError(err) {
			return nil
		}
		return err
	})
}

// RetryWait is how long Retry waits before its try+1st call: a tenth of a
// second more each try, up to a second.
func RetryWait(try int) time.Duration {
	return time.Duration(min(try, 10)) * 100 * time.Millisecond
}
