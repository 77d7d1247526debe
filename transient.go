package docket

import (
	"errors"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// transientReadCodes are the replies after which MongoDB's drivers read
// again (the retryable reads specification: a replica set's election, a
// node shutting down, a network fault between nodes), and those after which
// a read started afresh may succeed: CursorNotFound (43, the server killed
// the cursor) and MaxTimeMSExpired (50).
var transientReadCodes = []int{
	6,     // HostUnreachable
	7,     // HostNotFound
	43,    // CursorNotFound
	50,    // MaxTimeMSExpired
	89,    // NetworkTimeout
	91,    // ShutdownInProgress
	134,   // ReadConcernMajorityNotAvailableYet
	189,   // PrimarySteppedDown
	262,   // ExceededTimeLimit
	9001,  // SocketException
	10107, // NotWritablePrimary
	11600, // InterruptedAtShutdown
	11602, // InterruptedDueToReplStateChange
	13435, // NotPrimaryNoSecondaryOk
	13436, // NotPrimaryOrSecondary
}

// transientRead reports whether a read that failed with err may succeed
// when sent again: a network error or timeout, or one of
// transientReadCodes.
func transientRead(err error) bool {
	if mongo.IsNetworkError(err) || mongo.IsTimeout(err) {
		return true
	}
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return false
	}
	for _, c := range transientReadCodes {
		if se.HasErrorCode(c) {
			return true
		}
	}
	return false
}
