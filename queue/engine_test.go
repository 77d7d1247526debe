package queue_test

import (
	"reflect"
	"testing"

	"github.com/docketq/docket"
	"github.com/docketq/docket/queue"
)

// TestLeaseOperationsAreNotPublic checks that an embedding app cannot
// claim, renew or finish a job behind a worker's lease: the lease-level
// operations are reachable only through internal/store.
func TestLeaseOperationsAreNotPublic(t *testing.T) {
	engineOnly := []string{"Claim", "ClaimBatch", "ReleaseClaim", "Heartbeat", "Complete", "CompleteMany",
		"Cancelled", "Fail", "Release", "Reap", "Clean", "Collection", "WithBatchedCompletion", "HeartbeatMany"}
	for _, typ := range []reflect.Type{reflect.TypeFor[*queue.Client](), reflect.TypeFor[*docket.Client]()} {
		for _, name := range engineOnly {
			if _, ok := typ.MethodByName(name); ok {
				t.Errorf("%s has the engine's method %s: an app could write behind a lease", typ, name)
			}
		}
	}
}
