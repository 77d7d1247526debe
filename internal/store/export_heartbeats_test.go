package store

import (
	"context"
	"time"
)

// HeartbeatManyWithStall is c.HeartbeatMany running stall before each of
// its commands after the first ("read", "renew cancelled"), as if the
// process stalled between them.
func HeartbeatManyWithStall(ctx context.Context, c *Store, leases []Lease, d time.Duration, stall func(step string)) (map[Lease]Beat, error) {
	return c.heartbeatMany(ctx, leases, d, stall)
}
