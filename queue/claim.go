package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ClaimParams say which jobs a worker may claim and for how long.
type ClaimParams struct {
	// Owner is the claiming worker's id.
	Owner string
	// Queues are the queues the worker serves.
	Queues []string
	// Kinds are the kinds the worker has handlers for.
	Kinds []string
	// Lease is how long the claim holds the job unless renewed.
	Lease time.Duration
}

// Lease identifies one claim of a job: every write by the holder is fenced
// on it.
type Lease struct {
	// JobID is the claimed job.
	JobID string
	// Token is the claim's fresh token.
	Token string
}

// claimSort is the claim order: highest priority, then longest runnable,
// then oldest.
var claimSort = bson.D{{Key: "priority", Value: -1}, {Key: "runAt", Value: 1}, {Key: "_id", Value: 1}}

// Claim takes the best runnable job with one atomic findAndModify, stamping
// it running with p.Owner, a fresh lease token and a lease expiry. It
// returns nil and no error when there is nothing to claim.
func (c *Client) Claim(ctx context.Context, p ClaimParams) (*jobs.Job, error) {
	if len(p.Queues) == 0 || len(p.Kinds) == 0 {
		return nil, errors.New("queue: claim needs at least one queue and one kind")
	}
	t := now()
	filter := bson.D{
		{Key: "state", Value: jobs.StateAvailable},
		{Key: "queue", Value: bson.D{{Key: "$in", Value: p.Queues}}},
		{Key: "kind", Value: bson.D{{Key: "$in", Value: p.Kinds}}},
		{Key: "runAt", Value: bson.D{{Key: "$lte", Value: t}}},
	}
	update := bson.D{
		{Key: "$set", Value: bson.D{
			{Key: "state", Value: jobs.StateRunning},
			{Key: "owner", Value: p.Owner},
			{Key: "leaseToken", Value: uuid.NewString()},
			{Key: "leaseExpiresAt", Value: t.Add(p.Lease)},
			{Key: "heartbeatAt", Value: t},
			{Key: "updatedAt", Value: t},
		}},
		{Key: "$inc", Value: bson.D{{Key: "attempt", Value: 1}}},
	}
	opts := options.FindOneAndUpdate().SetSort(claimSort).SetReturnDocument(options.After)
	var j jobs.Job
	err := c.coll.FindOneAndUpdate(ctx, filter, update, opts).Decode(&j)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("queue: claim: %w", err)
	}
	return &j, nil
}

// LeaseOf returns the lease that j carries.
func LeaseOf(j *jobs.Job) Lease { return Lease{JobID: j.ID, Token: j.LeaseToken} }
