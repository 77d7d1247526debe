//go:build linux

package chaos

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// The partitioned limit's share of the run: before the workers start, the
// run sets, through the queue client, a partition limit of partN running
// jobs per value of args.customerId on the record kind (the test worker's,
// internal/testworker), with no total. Each wave enqueues a burst of record
// jobs over a few customers, most of them one hot customer's, some with no
// customerId or a null one (one partition) and some whose customerId is
// the number 7 as an int32, an int64 or a double (one partition too), while
// workers are SIGKILLed, SIGSTOPped past their leases and cut off from
// devdb. The sampler (startSampler) reads the record jobs all through the
// run and judges each read, per partition as the run names them itself
// (partOf), independently of the store's hash:
//   - never more than partN attempts of one partition holding a live lease;
//   - every running job holding a partition slot "record/<p>/<k>" with k
//     below partN, no two the same, and no job that is not running
//     holding one;
//   - one p per partition and one partition per p, in a read and across
//     the run (the store names every value of a partition alike, and
//     different partitions differently).
//
// After the drain: every record job the run enqueued is there and
// succeeded (checkJob), no job holds a partition slot, and the stored
// limit is as set, with nothing running.

const (
	partKind = "record"
	partArg  = "customerId"
	partN    = 2
	// partHot is the customer most of the jobs are for: it saturates.
	partHot = "c1"
)

// partLoad is the partitioned limit's state of the run, shared with the
// sampler.
type partLoad struct {
	sampled
	enqueued []string
	// slotOf and partOfSlot bind each partition to the p of its slots, as
	// first seen.
	slotOf, partOfSlot map[string]string
	// samples is how many reads the sampler judged; maxLive the most
	// attempts of one partition holding a live lease it saw in one (by
	// partition), maxHeld the most slots held at once in all.
	samples int
	maxLive map[string]int
	maxHeld int
}

// partCustomer is the customerId of the i-th job of a wave: the hot
// customer for three in eight, then two others, a missing field, the
// number 7 as an int32, an int64 or a double, and a null or a fourth
// customer.
func partCustomer(i int) (bson.RawValue, bool) {
	v := func(x any) bson.RawValue {
		t, b, err := bson.MarshalValue(x)
		if err != nil {
			panic(err)
		}
		return bson.RawValue{Type: t, Value: b}
	}
	switch i % 8 {
	case 0, 1, 2:
		return v(partHot), true
	case 3:
		return v("c2"), true
	case 4:
		return v("c3"), true
	case 5:
		return bson.RawValue{}, false
	case 6:
		return []bson.RawValue{v(int32(7)), v(int64(7)), v(7.0)}[(i/8)%3], true
	default:
		if (i/8)%2 == 0 {
			return bson.RawValue{Type: bson.TypeNull}, true
		}
		return v("c4"), true
	}
}

// partOf names the partition of a customerId value as MongoDB's equality
// sees it: missing and null alike, numbers of one value alike.
func partOf(v bson.RawValue) string {
	switch v.Type {
	case 0, bson.TypeNull, bson.TypeUndefined:
		return "null"
	case bson.TypeInt32, bson.TypeInt64, bson.TypeDouble:
		f, _ := v.AsFloat64OK()
		if f == math.Trunc(f) {
			return "number " + strconv.FormatInt(int64(f), 10)
		}
		return "number " + strconv.FormatFloat(f, 'g', -1, 64)
	case bson.TypeString:
		return "string " + v.StringValue()
	default:
		return v.String()
	}
}

// seedPartition sets the partition limit, before any worker starts.
func (r *run) seedPartition() {
	if err := r.retry("set the partition limit", func() error {
		return r.q.SetPartitionLimit(context.Background(), queue.KindLimit(partKind), partArg, partN, "chaos")
	}); err != nil {
		r.fatalf("chaos: partition: set the partition limit: %v", err)
	}
}

// partWave enqueues n record jobs at once, over the customers of
// partCustomer, each of 200 to 600 ms. The jobs are numbered across the
// run, so that a short run too has every form of every customerId.
func (r *run) partWave(ctx context.Context, n int) {
	r.part.mu.Lock()
	first := len(r.part.enqueued)
	r.part.mu.Unlock()
	ins := make([]queue.Insert, n)
	for i := range ins {
		args := bson.D{{Key: "sleepMs", Value: 200 + 100*(i%5)}}
		if c, ok := partCustomer(first + i); ok {
			args = append(args, bson.E{Key: partArg, Value: c})
		}
		// An id of the run's, so that a retry (retry.go) finds the job there.
		ins[i] = queue.Insert{Kind: partKind, Args: args, Opts: queue.InsertOpts{ID: fmt.Sprintf("part-%d", first+i)}}
	}
	var res []queue.Result
	err := r.retry("enqueue "+partKind+" jobs", func() (err error) {
		res, err = r.q.EnqueueMany(ctx, ins)
		return err
	})
	if err != nil {
		r.errorf("chaos: partition: enqueue %s jobs: %v", partKind, err)
		return
	}
	r.part.mu.Lock()
	defer r.part.mu.Unlock()
	for _, x := range res {
		r.part.enqueued = append(r.part.enqueued, x.ID)
	}
}

// samplePart reads the partitioned kind's jobs, in one query, and judges
// what it read (see the comment at the top of this file).
func (r *run) samplePart(ctx context.Context) {
	l := &r.part
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var docs []struct {
		ID        string     `bson:"_id"`
		State     jobs.State `bson:"state"`
		Owner     string     `bson:"owner"`
		Args      bson.Raw   `bson:"args"`
		Slot      *string    `bson:"kindPartSlot"`
		QSlot     *string    `bson:"queuePartSlot"`
		ExpiresAt *time.Time `bson:"leaseExpiresAt"`
	}
	at := time.Now()
	if err := r.findJobs(ctx, &docs, bson.M{"kind": partKind}); err != nil {
		l.readFailed(err)
		return
	}
	live := map[string][]string{}
	held := map[string]string{}
	type bind struct{ part, p string }
	var binds []bind
	for _, d := range docs {
		v, _ := d.Args.LookupErr(partArg)
		part := partOf(v)
		running := d.State == jobs.StateRunning
		if running && d.ExpiresAt != nil && d.ExpiresAt.After(at) {
			live[part] = append(live[part], d.ID+" of "+d.Owner)
		}
		if d.QSlot != nil {
			l.problem("job %s holds queue partition slot %s; its queue is not partitioned", d.ID, *d.QSlot)
		}
		switch {
		case d.Slot == nil && running:
			l.problem("job %s (%s) is running (owner %s) and holds no partition slot", d.ID, part, d.Owner)
		case d.Slot == nil:
		case !running:
			l.problem("job %s (%s) is %s and still holds partition slot %s", d.ID, part, d.State, *d.Slot)
		case held[*d.Slot] != "":
			l.problem("jobs %s and %s both hold partition slot %s", held[*d.Slot], d.ID, *d.Slot)
		default:
			held[*d.Slot] = d.ID
			f := strings.Split(*d.Slot, "/")
			k, err := strconv.Atoi(f[len(f)-1])
			if len(f) != 3 || f[0] != partKind || len(f[1]) != 16 || err != nil || k < 0 || k >= partN {
				l.problem("job %s (%s) holds partition slot %q, not one of %s/<p>/0 to %s/<p>/%d", d.ID, part, *d.Slot, partKind, partKind, partN-1)
				continue
			}
			binds = append(binds, bind{part, f[1]})
		}
	}
	for part, ids := range live {
		if len(ids) > partN {
			l.problem("a sample read %d attempts of %s's partition %s holding a live lease at once, over the limit %d: %s",
				len(ids), partKind, part, partN, strings.Join(ids, ", "))
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.slotOf == nil {
		l.slotOf, l.partOfSlot, l.maxLive = map[string]string{}, map[string]string{}, map[string]int{}
	}
	var mixed []string
	for _, b := range binds {
		if p, ok := l.slotOf[b.part]; ok && p != b.p {
			mixed = append(mixed, fmt.Sprintf("partition %s holds slots of %s and of %s", b.part, p, b.p))
		}
		if part, ok := l.partOfSlot[b.p]; ok && part != b.part {
			mixed = append(mixed, fmt.Sprintf("slots of %s are held by partitions %s and %s", b.p, part, b.part))
		}
		l.slotOf[b.part], l.partOfSlot[b.p] = b.p, b.part
	}
	for _, m := range mixed {
		l.addProblem(m)
	}
	l.samples++
	for part, ids := range live {
		l.maxLive[part] = max(l.maxLive[part], len(ids))
	}
	l.maxHeld = max(l.maxHeld, len(held))
}

// checkPartition checks the partitioned limit from the database after the
// drain: what the sampler saw, and that it sampled; no read of it failed
// but around the outage; every job of the kind the run enqueued is in the
// collection, of the kind (checkJob judges that it succeeded); no job
// holds a partition slot; the stored limit is as set, with nothing
// running in any partition.
func (r *run) checkPartition(all []jobs.Job) {
	ctx := context.Background()
	l := &r.part
	l.mu.Lock()
	defer l.mu.Unlock()
	r.res.PartJobs, r.res.PartSamples, r.res.PartMaxHeld = len(l.enqueued), l.samples, l.maxHeld
	r.res.PartHotMaxLive, r.res.Partitions = l.maxLive["string "+partHot], len(l.slotOf)
	r.checkSampled("partition", partKind, l.samples, l.problems, l.errs, l.enqueued, all)
	held, err := r.slotsHeld(ctx, "kindPartSlot", "queuePartSlot")
	if err != nil || held != 0 {
		r.errorf("chaos: partition: %d jobs still hold a partition slot after the drain (%v)", held, err)
	}
	ls, err := r.q.RunLimits(ctx)
	name := queue.KindLimit(partKind)
	i := slices.IndexFunc(ls, func(l queue.RunLimit) bool { return l.Name == name })
	if err != nil || i < 0 || ls[i].PartitionBy != partArg || ls[i].PartitionLimit != partN || !ls[i].NoTotal ||
		ls[i].Running != 0 || ls[i].Partitions != 0 {
		r.errorf("chaos: partition: the limits after the drain are %+v (%v); want %s at %d per %s, no total, none running", ls, err, name, partN, partArg)
	}
}
