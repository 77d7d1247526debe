package store

import (
	"context"
	"time"

	"github.com/docketq/docket/jobs"
)

// HeartbeatManyWithStall is c.HeartbeatMany running stall before each of
// its commands after the first ("read", "renew cancelled"), as if the
// process stalled between them.
func HeartbeatManyWithStall(ctx context.Context, c *Store, leases []Lease, d time.Duration, stall func(step string)) (map[Lease]Beat, error) {
	return c.heartbeatMany(ctx, leases, nil, d, stall)
}

// HeartbeatManyReportingWithStall is HeartbeatManyWithStall writing
// progress as HeartbeatMany does.
func HeartbeatManyReportingWithStall(ctx context.Context, c *Store, leases []Lease, progress map[Lease]jobs.ProgressReport, d time.Duration, stall func(step string)) (map[Lease]Beat, error) {
	return c.heartbeatMany(ctx, leases, progress, d, stall)
}
