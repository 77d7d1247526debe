//go:build linux

package chaos

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// The concurrency limit's share of the run: every worker starts with
// `--limits kind:transfer=2` (workerFlags), so the transfers, which each
// wave enqueues in a burst, run at most limitN at once across every worker
// while workers are SIGKILLed, SIGSTOPped past their leases and cut off
// from devdb. The sampler (startSampler) reads the transfer jobs all
// through the run: never more than limitN attempts holding a live lease,
// every running one holding a run slot of its own below limitN, none that
// is not running holding one. After the drain: every transfer job the run
// enqueued is there and ended as it must (checkJob), no slot is held, and
// no reaper had to free a slot a finishing write of docket's left.

const (
	limitKind = handlers.TransferKind
	limitN    = 2
	// strandedRunSlotsMsg is what a reaper logs when it frees the run slot
	// of a job that is not running: in this run no other app writes jobs,
	// so it would mean that a write of docket's ended or gave back an
	// attempt and left its slot.
	strandedRunSlotsMsg = "freed the run slots of jobs that were not running (written by another app)"
)

// limitLoad is the limit's state of the run, shared with the sampler.
type limitLoad struct {
	sampled
	// enqueued are the ids of the limited kind's jobs the run enqueued.
	enqueued []string
	// samples is how many reads of the kind's jobs the sampler judged;
	// maxLive the most attempts holding a live lease it saw in one, maxHeld
	// the most run slots held.
	samples, maxLive, maxHeld int
}

// limited records a job of the limited kind the run enqueued.
func (r *run) limited(id string) {
	r.limit.mu.Lock()
	r.limit.enqueued = append(r.limit.enqueued, id)
	r.limit.mu.Unlock()
}

// sampleLimit reads the limited kind's jobs, in one query, and judges what
// it read: at most limitN running with a lease that had not expired when
// the read began, each running one holding a slot "transfer/k" with k
// below limitN, no two the same, and no job that is not running holding
// one.
func (r *run) sampleLimit(ctx context.Context) {
	l := &r.limit
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var docs []struct {
		ID        string     `bson:"_id"`
		State     jobs.State `bson:"state"`
		Owner     string     `bson:"owner"`
		Slot      *string    `bson:"kindRunSlot"`
		ExpiresAt *time.Time `bson:"leaseExpiresAt"`
	}
	at := time.Now()
	if err := r.findJobs(ctx, &docs, bson.M{"kind": limitKind}); err != nil {
		l.readFailed(err)
		return
	}
	var live []string
	held := map[string]string{}
	for _, d := range docs {
		running := d.State == jobs.StateRunning
		if running && d.ExpiresAt != nil && d.ExpiresAt.After(at) {
			live = append(live, d.ID+" of "+d.Owner)
		}
		switch {
		case d.Slot == nil && running:
			l.problem("job %s is running (owner %s) and holds no run slot of the limit", d.ID, d.Owner)
		case d.Slot == nil:
		case !running:
			l.problem("job %s is %s and still holds run slot %s", d.ID, d.State, *d.Slot)
		case held[*d.Slot] != "":
			l.problem("jobs %s and %s both hold run slot %s", held[*d.Slot], d.ID, *d.Slot)
		default:
			held[*d.Slot] = d.ID
			k, err := strconv.Atoi(strings.TrimPrefix(*d.Slot, limitKind+"/"))
			if !strings.HasPrefix(*d.Slot, limitKind+"/") || err != nil || k < 0 || k >= limitN {
				l.problem("job %s holds run slot %q, not one of %s/0 to %s/%d", d.ID, *d.Slot, limitKind, limitKind, limitN-1)
			}
		}
	}
	if len(live) > limitN {
		l.problem("a sample read %d attempts of %s holding a live lease at once, over the limit %d: %s",
			len(live), limitKind, limitN, strings.Join(live, ", "))
	}
	l.mu.Lock()
	l.samples++
	l.maxLive = max(l.maxLive, len(live))
	l.maxHeld = max(l.maxHeld, len(held))
	l.mu.Unlock()
}

// checkLimit checks the limit from the database after the drain:
//   - what the sampler saw, and that it sampled; no read of it failed but
//     around the outage;
//   - every job of the kind the run enqueued is in the collection, of the
//     kind (none lost; checkJob judges how each ended);
//   - no job holds a run slot, the stored limit is limitN with nothing
//     running, and no reaper had to free a slot a write of docket's left.
func (r *run) checkLimit(all []jobs.Job) {
	ctx := context.Background()
	l := &r.limit
	l.mu.Lock()
	defer l.mu.Unlock()
	r.res.LimitJobs, r.res.LimitSamples, r.res.LimitMaxLive, r.res.LimitMaxHeld = len(l.enqueued), l.samples, l.maxLive, l.maxHeld
	r.checkSampled("limit", limitKind, l.samples, l.problems, l.errs, l.enqueued, all)
	held, err := r.slotsHeld(ctx, "kindRunSlot", "queueRunSlot")
	if err != nil || held != 0 {
		r.errorf("chaos: limit: %d jobs still hold a run slot after the drain (%v)", held, err)
	}
	// Beside the partitioned kind's limit (partition.go).
	ls, err := r.q.RunLimits(ctx)
	name := queue.KindLimit(limitKind)
	if i := slices.IndexFunc(ls, func(l queue.RunLimit) bool { return l.Name == name }); err != nil || len(ls) != 2 || i < 0 ||
		ls[i].Limit != limitN || ls[i].PartitionBy != "" || ls[i].Running != 0 {
		r.errorf("chaos: limit: the limits after the drain are %+v (%v); want %s at %d, none running", ls, err, name, limitN)
	}
	for _, p := range r.procs {
		for _, line := range parseLog(p.out.String()) {
			if line.Msg == strandedRunSlotsMsg {
				r.errorf("chaos: limit: worker %s's reaper freed run slots of jobs that were not running at %s: a write of docket's left its slot", p.id, line.TS)
			}
		}
	}
}

// checkSampled checks, after the drain, what a sampler of the jobs of kind
// (what: "limit", "partition") saw: the problems it found, that it judged
// a sample, that no sample failed while devdb was up, and that every job
// of kind the run enqueued is in all, as that kind.
func (r *run) checkSampled(what, kind string, samples int, problems []string, errs []saleReadErr, enqueued []string, all []jobs.Job) {
	for _, p := range problems {
		r.errorf("chaos: %s: the sampler saw it: %s", what, p)
	}
	if samples == 0 {
		r.errorf("chaos: %s: no sample of the %s jobs succeeded during the run", what, kind)
	}
	for _, e := range errs {
		if strings.Contains(e.err.Error(), "try again") || r.duringOutage(e.at) || transient(e.err) {
			continue
		}
		r.errorf("chaos: %s: a sample failed while devdb was up: %v", what, e.err)
	}
	byID := map[string]*jobs.Job{}
	for i := range all {
		byID[all[i].ID] = &all[i]
	}
	for _, id := range enqueued {
		switch j := byID[id]; {
		case j == nil:
			r.errorf("chaos: %s: %s job %s was enqueued but is not in the collection", what, kind, id)
		case j.Kind != kind:
			r.errorf("chaos: %s: job %s was enqueued as %s but is %s", what, id, kind, j.Kind)
		}
	}
}

// slotsHeld counts the jobs holding any of the slot fields.
func (r *run) slotsHeld(ctx context.Context, fields ...string) (int64, error) {
	or := bson.A{}
	for _, f := range fields {
		or = append(or, bson.M{f: bson.M{"$exists": true}})
	}
	return store.Of(r.q).Collection().CountDocuments(ctx, bson.M{"$or": or})
}
