package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// MaxResultBytes is the largest encoded result a job may store.
const MaxResultBytes = 64 << 10

// ErrResultTooLarge is wrapped by SetResult's error for a result over
// MaxResultBytes.
var ErrResultTooLarge = errors.New("result too large")

// ErrNoResultHere is SetResult's error outside a handler run by a worker.
var ErrNoResultHere = errors.New("no job to set a result for: SetResult takes the context a worker gave the handler")

// ResultSlot holds the result a handler sets while it runs; the worker
// that runs the handler makes one (WithResultSlot) and stores what it
// holds with the job when the job succeeds.
type ResultSlot struct {
	mu  sync.Mutex
	raw bson.Raw
}

type resultKey struct{}

// WithResultSlot returns ctx for a handler, with slot to receive its
// result. A worker gives its handlers such a context; a test of a handler
// may use it to see what the handler sets.
func WithResultSlot(ctx context.Context, slot *ResultSlot) context.Context {
	return context.WithValue(ctx, resultKey{}, slot)
}

// Result returns the result set in s, nil if none.
func (s *ResultSlot) Result() bson.Raw {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw
}

// SetResult records v, which must encode to a BSON document of at most
// MaxResultBytes (a struct, a map, bson.D) holding what args may hold
// (CheckArgs), as the result of the job whose handler ctx is. When the job
// succeeds, the result is stored with it by the write that records its
// success (the job's result field), where the jobs that wait for it read
// it (docket.Client.ParentResults). A later call replaces it; a
// failed attempt stores none. The error is permanent: returned by the
// handler, it ends the job dead, since a retry would produce the same.
func SetResult(ctx context.Context, v any) error {
	slot, ok := ctx.Value(resultKey{}).(*ResultSlot)
	if !ok {
		return ErrNoResultHere
	}
	raw, err := bson.Marshal(v)
	if err != nil {
		return Permanent(fmt.Errorf("result: must be a document (a struct, a map or bson.D), got %T: %w", v, err))
	}
	if len(raw) > MaxResultBytes {
		return Permanent(fmt.Errorf("result: %d bytes is over the %d-byte limit: %w; store a large result elsewhere and return where", len(raw), MaxResultBytes, ErrResultTooLarge))
	}
	if err := CheckArgs(raw); err != nil {
		return Permanent(fmt.Errorf("result: %w", err))
	}
	slot.mu.Lock()
	slot.raw = raw
	slot.mu.Unlock()
	return nil
}
