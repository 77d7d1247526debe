package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Beat is what HeartbeatMany learned of one lease.
type Beat struct {
	// Renewal is the lease's renewal when Err is nil.
	Renewal
	// Err is nil when the lease was renewed. It wraps jobs.ErrLeaseLost when the
	// lease no longer holds its job (reaped, claimed again, finished,
	// deleted), ErrOutcomeUnknown when reading the lease back failed, and is
	// another error when the renewal itself failed (its outcome unknown
	// too).
	Err error
}

// HeartbeatMany extends each of leases by d from now, with one updateMany
// for all of them, and returns what it learned of each lease. The caller
// bounds the leases of a call (a worker sends at most its beatCommand), so
// that a command stays far below the server's 16 MB and its $or short
// enough to plan. Each job is matched on its own lease, {_id, state:
// running, leaseToken}, so a lease that was lost is never renewed,
// whatever happened to the others.
//
// progress holds, for some of the leases, the progress their handlers
// reported (jobs.Progress) since their last renewal: it is written into
// the job's progress field in the same fenced write as the renewal, so a
// lease that was lost writes nothing, and the renewal still costs one
// update command (a statement per job with progress, and one for the
// others).
//
// The usual case costs that one command: the updateMany renews only the
// jobs without a cancel request, and when it matched every lease, every
// lease was renewed and none was asked to stop. Otherwise a find reads
// the leases back: a job that no longer carries its lease is lost; one
// whose expiry reads at least the new one was renewed; the rest (those
// asked to stop, whose handlers are still winding down) are renewed by a
// second updateMany, read back again only when it did not match them all.
//
// A renewal, progress and all, is idempotent (same token, a later
// expiry): after an error, when the server may have applied the update and
// lost its reply, calling again is harmless. The error is returned when
// nothing can be said of any lease (wrapping ErrOutcomeUnknown when the
// read back failed); a lease whose own outcome is unknown has it in its
// Beat.
func (s *Store) HeartbeatMany(ctx context.Context, leases []Lease, progress map[Lease]jobs.ProgressReport, d time.Duration) (map[Lease]Beat, error) {
	return s.heartbeatMany(ctx, leases, progress, d, nil)
}

// heartbeatMany is HeartbeatMany with a test hook, between, run
// before each command after the first: "read" and "renew cancelled".
func (s *Store) heartbeatMany(ctx context.Context, leases []Lease, progress map[Lease]jobs.ProgressReport, d time.Duration, between func(step string)) (map[Lease]Beat, error) {
	if d <= 0 {
		return nil, fmt.Errorf("store: heartbeat: duration %s must be positive", d)
	}
	uniq := make([]Lease, 0, len(leases))
	seen := make(map[Lease]bool, len(leases))
	for _, l := range leases {
		if l.Token == "" {
			return nil, fmt.Errorf("store: heartbeat job %q: the lease has no token", l.JobID)
		}
		if !seen[l] {
			seen[l] = true
			uniq = append(uniq, l)
		}
	}
	out := make(map[Lease]Beat, len(uniq))
	if len(uniq) == 0 {
		return out, nil
	}
	if err := s.renewLeases(ctx, uniq, progress, d, between, out); err != nil {
		return nil, err
	}
	return out, nil
}

// renewLeases renews leases (distinct) and records each one's Beat in
// out. The error is returned when nothing is known of any of them.
func (s *Store) renewLeases(ctx context.Context, leases []Lease, progress map[Lease]jobs.ProgressReport, d time.Duration, between func(string), out map[Lease]Beat) error {
	t := s.Now()
	exp := t.Add(d).Truncate(time.Millisecond) // as the server stores it
	n, err := s.renewMany(ctx, leases, progress, t, exp, true)
	if err != nil {
		return fmt.Errorf("store: heartbeat %d jobs: %w", len(leases), err)
	}
	if n == int64(len(leases)) {
		for _, l := range leases {
			out[l] = Beat{Renewal: Renewal{ExpiresAt: exp}}
		}
		return nil
	}

	if between != nil {
		between("read")
	}
	held, err := s.readLeases(ctx, leases)
	if err != nil {
		// Some were renewed, which is unknown: the caller retries at its
		// next beat, before the leases it holds expire.
		return fmt.Errorf("store: heartbeat %d jobs: read back the %d not renewed: %w: %w", len(leases), int64(len(leases))-n, ErrOutcomeUnknown, err)
	}
	var again []Lease
	for _, l := range leases {
		h, ok := held[l]
		switch {
		case !ok:
			out[l] = Beat{Err: fmt.Errorf("store: heartbeat job %s: %w", l.JobID, jobs.ErrLeaseLost)}
		case !h.expires.Before(exp):
			out[l] = Beat{Renewal: Renewal{ExpiresAt: h.expires, CancelRequested: h.cancel}}
		default:
			again = append(again, l)
		}
	}
	if len(again) == 0 {
		return nil
	}

	// Asked to stop: still renewed while their handlers wind down, so that
	// their final writes find their leases.
	if between != nil {
		between("renew cancelled")
	}
	t = s.Now()
	exp = t.Add(d).Truncate(time.Millisecond)
	n, err = s.renewMany(ctx, again, progress, t, exp, false)
	if err == nil && n == int64(len(again)) {
		for _, l := range again {
			out[l] = Beat{Renewal: Renewal{ExpiresAt: exp, CancelRequested: held[l].cancel}}
		}
		return nil
	}
	if err == nil {
		if held, err = s.readLeases(ctx, again); err != nil {
			err = fmt.Errorf("read back: %w: %w", ErrOutcomeUnknown, err)
		}
	}
	for _, l := range again {
		h, ok := held[l]
		switch {
		case err != nil:
			out[l] = Beat{Err: fmt.Errorf("store: heartbeat job %s: %w", l.JobID, err)}
		case !ok:
			out[l] = Beat{Err: fmt.Errorf("store: heartbeat job %s: %w", l.JobID, jobs.ErrLeaseLost)}
		case !h.expires.Before(exp):
			out[l] = Beat{Renewal: Renewal{ExpiresAt: h.expires, CancelRequested: h.cancel}}
		default: // still held, an older expiry: another writer set it
			out[l] = Beat{Err: fmt.Errorf("store: heartbeat job %s: the lease reads expiring at %s after its renewal to %s",
				l.JobID, h.expires.Format(time.RFC3339Nano), exp.Format(time.RFC3339Nano))}
		}
	}
	return nil
}

// renewMany sets the expiry of the jobs leases hold to exp, each matched
// on its own lease (and, when uncancelled, only those without a cancel
// request), writes the progress of those in progress, and returns how
// many matched. Without progress it is one updateMany; with, still one
// update command: a statement per job with progress and one for the
// rest, all multi (the driver sends single-document statements, which it
// may retry, in a command of their own), each matching on its own lease.
func (s *Store) renewMany(ctx context.Context, leases []Lease, progress map[Lease]jobs.ProgressReport, t, exp time.Time, uncancelled bool) (int64, error) {
	set := bson.D{{Key: "leaseExpiresAt", Value: exp}, {Key: "heartbeatAt", Value: t}}
	var plain []Lease
	var models []mongo.WriteModel
	for _, l := range leases {
		p, ok := progress[l]
		if !ok {
			plain = append(plain, l)
			continue
		}
		models = append(models, mongo.NewUpdateManyModel().SetFilter(leasesFilter([]Lease{l}, uncancelled)).
			SetUpdate(bson.D{{Key: "$set", Value: append(slices.Clone(set), bson.E{Key: progressField, Value: p})}}))
	}
	if len(models) == 0 {
		res, err := s.coll.UpdateMany(ctx, leasesFilter(leases, uncancelled), bson.D{{Key: "$set", Value: set}})
		if err != nil {
			return 0, err
		}
		return res.MatchedCount, nil
	}
	if len(plain) > 0 {
		models = append(models, mongo.NewUpdateManyModel().SetFilter(leasesFilter(plain, uncancelled)).SetUpdate(bson.D{{Key: "$set", Value: set}}))
	}
	res, err := s.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if err != nil {
		return 0, err
	}
	return res.MatchedCount, nil
}

// leasesFilter matches the running jobs leases hold, each on its own lease
// (and, when uncancelled, only those without a cancel request). The leases
// are grouped by token (a batch claim stamps one token on all its jobs):
// an $or of {leaseToken, _id: {$in}}, which matches exactly the pairs
// given.
func leasesFilter(leases []Lease, uncancelled bool) bson.D {
	byToken := map[string]bson.A{}
	var tokens []string
	for _, l := range leases {
		if _, ok := byToken[l.Token]; !ok {
			tokens = append(tokens, l.Token)
		}
		byToken[l.Token] = append(byToken[l.Token], l.JobID)
	}
	// The job ids first (server.go).
	var filter bson.D
	switch {
	case len(leases) == 1:
		filter = bson.D{{Key: "_id", Value: leases[0].JobID}, {Key: "leaseToken", Value: leases[0].Token}}
	case len(tokens) == 1:
		filter = bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: byToken[tokens[0]]}}},
			{Key: "leaseToken", Value: tokens[0]}}
	default:
		ids := make(bson.A, 0, len(leases))
		or := make(bson.A, len(tokens))
		for i, tok := range tokens {
			ids = append(ids, byToken[tok]...)
			or[i] = bson.D{{Key: "leaseToken", Value: tok}, {Key: "_id", Value: bson.D{{Key: "$in", Value: byToken[tok]}}}}
		}
		filter = bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "$or", Value: or}}
	}
	filter = append(filter, bson.E{Key: "state", Value: jobs.StateRunning})
	if uncancelled {
		filter = append(filter, cancelNotRequested)
	}
	return filter
}

// heldLease is a lease as read back: its expiry (zero when not a date) and
// whether someone asked its job to stop.
type heldLease struct {
	expires time.Time
	cancel  bool
}

// readLeases reads back the jobs of leases and returns those still held by
// their lease: running, with the lease's token.
func (s *Store) readLeases(ctx context.Context, leases []Lease) (map[Lease]heldLease, error) {
	ids := make(bson.A, 0, len(leases))
	want := map[string][]string{} // job id → tokens asked about
	for _, l := range leases {
		if _, ok := want[l.JobID]; !ok {
			ids = append(ids, l.JobID)
		}
		want[l.JobID] = append(want[l.JobID], l.Token)
	}
	proj := options.Find().SetProjection(bson.D{
		{Key: "state", Value: 1}, {Key: "leaseToken", Value: 1},
		{Key: "leaseExpiresAt", Value: 1}, {Key: "cancelRequestedAt", Value: 1},
	})
	out := map[Lease]heldLease{}
	err := eachFound(ctx, s.coll, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, proj, func(doc bson.Raw) error {
		id, ok := doc.Lookup("_id").StringValueOK()
		state, _ := doc.Lookup("state").StringValueOK()
		token, _ := doc.Lookup("leaseToken").StringValueOK()
		if !ok || jobs.State(state) != jobs.StateRunning || token == "" || !slices.Contains(want[id], token) {
			return nil
		}
		var h heldLease
		h.expires, _ = doc.Lookup("leaseExpiresAt").TimeOK()
		cr, err := doc.LookupErr("cancelRequestedAt")
		h.cancel = err == nil && cr.Type != bson.TypeNull // as cancelRequested matches
		out[Lease{JobID: id, Token: token}] = h
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
