package queue_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// capped enqueues one job of kind k to queue "q" and returns its result and
// error.
func (b bundle) capped(opts queue.InsertOpts) (queue.Result, error) {
	opts.Queue = "q"
	return b.q.Enqueue(b.ctx, "k", bson.M{}, opts)
}

func (b bundle) requireFull(t *testing.T, capacity int) {
	t.Helper()
	_, err := b.capped(queue.InsertOpts{})
	require.ErrorIs(t, err, queue.ErrQueueFull)
	require.EqualError(t, err, fmt.Sprintf("queue q is full (capacity %d)", capacity))
}

func (b bundle) occupied(t *testing.T) int {
	t.Helper()
	n, err := b.q.Occupied(b.ctx, "q")
	require.NoError(t, err)
	return n
}

// TestCapacityRefusesPastIt: a queue of capacity 3 admits 3 jobs and
// refuses the 4th with ErrQueueFull naming it; other queues are not
// bounded; a batch is enqueued but for the refused jobs, reported per job;
// clearing the capacity admits again.
func TestCapacityRefusesPastIt(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 3, "ops"))
	for range 3 {
		_, err := b.capped(queue.InsertOpts{})
		require.NoError(t, err)
	}
	b.requireFull(t, 3)
	require.Equal(t, 3, b.occupied(t))
	_, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{Queue: "other"})
	require.NoError(t, err, "another queue is not bounded")

	caps, err := b.q.QueueCapacities(b.ctx)
	require.NoError(t, err)
	require.Len(t, caps, 1)
	require.Equal(t, "q", caps[0].Queue)
	require.Equal(t, 3, caps[0].Capacity)
	require.Equal(t, 3, caps[0].Occupied)
	require.Equal(t, "ops", caps[0].SetBy)
	states, err := b.q.QueueStates(b.ctx)
	require.NoError(t, err)
	require.Empty(t, states, "a capacity leaves the queue plainly running for the pause code")

	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 5, ""))
	res, err := b.q.EnqueueMany(b.ctx, []queue.Insert{
		{Kind: "k", Opts: queue.InsertOpts{Queue: "q"}},
		{Kind: "k", Opts: queue.InsertOpts{Queue: "other"}},
		{Kind: "k", Opts: queue.InsertOpts{Queue: "q"}},
		{Kind: "k", Opts: queue.InsertOpts{Queue: "q"}},
	})
	var ee *queue.EnqueueError
	require.ErrorAs(t, err, &ee)
	require.ErrorIs(t, err, queue.ErrQueueFull)
	require.Equal(t, 3, ee.Inserted)
	require.Equal(t, 1, ee.Refused)
	require.Zero(t, ee.NotInserted)
	require.NoError(t, res[0].Err)
	require.NoError(t, res[1].Err)
	require.NoError(t, res[2].Err)
	require.ErrorIs(t, res[3].Err, queue.ErrQueueFull)
	require.ErrorIs(t, res[3].Err, queue.ErrNotInserted)
	require.Contains(t, err.Error(), "1 refused (queue full)")
	n, err := store.Of(b.q).Collection().CountDocuments(b.ctx, bson.M{"_id": res[3].ID})
	require.NoError(t, err)
	require.Zero(t, n, "a refused job is not in the collection")

	changed, err := b.q.ClearCapacity(b.ctx, "q", "")
	require.NoError(t, err)
	require.True(t, changed)
	_, err = b.capped(queue.InsertOpts{})
	require.NoError(t, err, "an unbounded queue admits")

	require.Error(t, b.q.SetCapacity(b.ctx, "q", -1, ""))
	require.Error(t, b.q.SetCapacity(b.ctx, "", 1, ""))
}

// TestCapacityDuplicatesTakeNoSlot: a job whose unique key is held, or
// whose id is there already, takes no slot, and is reported so even when
// the queue is full (a safe retry stays safe).
func TestCapacityDuplicatesTakeNoSlot(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 2, ""))
	first, err := b.capped(queue.InsertOpts{UniqueKey: "u", ID: "j1"})
	require.NoError(t, err)
	for range 3 {
		r, err := b.capped(queue.InsertOpts{UniqueKey: "u"})
		require.NoError(t, err)
		require.True(t, r.Duplicate)
		require.Equal(t, first.ID, r.ID)
		r, err = b.capped(queue.InsertOpts{ID: "j1"})
		require.NoError(t, err)
		require.True(t, r.Existed)
	}
	require.Equal(t, 1, b.occupied(t))
	_, err = b.capped(queue.InsertOpts{})
	require.NoError(t, err)
	// Full now: a retry of an enqueued id or key still reads as there.
	r, err := b.capped(queue.InsertOpts{ID: "j1"})
	require.NoError(t, err)
	require.True(t, r.Existed)
	r, err = b.capped(queue.InsertOpts{UniqueKey: "u"})
	require.NoError(t, err)
	require.True(t, r.Duplicate)
	b.requireFull(t, 2)
}

// TestCapacityExactUnderConcurrency: 4 clients × 8 goroutines enqueue 10
// jobs each into a queue of capacity 7: exactly 7 are admitted, every other
// enqueue is refused, and the slots held are distinct.
func TestCapacityExactUnderConcurrency(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 7, ""))
	var admitted, refused atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		q, err := queue.New(b.db, queue.Config{})
		require.NoError(t, err)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					_, err := q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{Queue: "q"})
					switch {
					case err == nil:
						admitted.Add(1)
					case errors.Is(err, queue.ErrQueueFull):
						refused.Add(1)
					default:
						t.Error(err)
					}
				}
			}()
		}
	}
	wg.Wait()
	require.EqualValues(t, 7, admitted.Load())
	require.EqualValues(t, 320-7, refused.Load())
	n, err := store.Of(b.q).Collection().CountDocuments(b.ctx, bson.M{"queue": "q"})
	require.NoError(t, err)
	require.EqualValues(t, 7, n)
	slots, err := store.Of(b.q).Collection().Distinct(b.ctx, "capacitySlot", bson.M{"queue": "q"}).Raw()
	require.NoError(t, err)
	vals, err := slots.Values()
	require.NoError(t, err)
	require.Len(t, vals, 7, "seven distinct slots")
}

// TestCapacityFreedByEachFinish: every way a job finishes, or is deleted,
// frees its slot in the same write; the ways it goes back to the queue
// (a retry after a failure, a reap, a release) keep it.
func TestCapacityFreedByEachFinish(t *testing.T) {
	claimQ := claimAll
	claimQ.Queues = []string{"q"}
	for _, tc := range []struct {
		name  string
		opts  queue.InsertOpts
		act   func(t *testing.T, b bundle, id string)
		frees bool
	}{
		{"complete", queue.InsertOpts{}, func(t *testing.T, b bundle, _ string) {
			require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(b.claim(t, claimQ))))
		}, true},
		{"complete many", queue.InsertOpts{}, func(t *testing.T, b bundle, _ string) {
			lost, err := store.Of(b.q).CompleteMany(b.ctx, []store.Lease{store.LeaseOf(b.claim(t, claimQ))})
			require.NoError(t, err)
			require.Empty(t, lost)
		}, true},
		{"fail permanently", queue.InsertOpts{}, func(t *testing.T, b bundle, _ string) {
			j := b.claim(t, claimQ)
			f, err := store.Of(b.q).Fail(b.ctx, store.LeaseOf(j), j, jobs.Permanent(errors.New("bad")))
			require.NoError(t, err)
			require.Equal(t, jobs.StateDead, f.State)
		}, true},
		{"fail with attempts left (retried: keeps it)", queue.InsertOpts{}, func(t *testing.T, b bundle, _ string) {
			j := b.claim(t, claimQ)
			f, err := store.Of(b.q).Fail(b.ctx, store.LeaseOf(j), j, errors.New("again"))
			require.NoError(t, err)
			require.Equal(t, jobs.StateAvailable, f.State)
		}, false},
		{"cancelled by its worker", queue.InsertOpts{}, func(t *testing.T, b bundle, _ string) {
			j := b.claim(t, claimQ)
			require.NoError(t, store.Of(b.q).Cancelled(b.ctx, store.LeaseOf(j), j, "stop"))
		}, true},
		{"cancel of an available job", queue.InsertOpts{}, func(t *testing.T, b bundle, id string) {
			out, err := b.q.Cancel(b.ctx, id)
			require.NoError(t, err)
			require.Equal(t, queue.Cancelled, out)
		}, true},
		{"cancel of a running job, then its release", queue.InsertOpts{}, func(t *testing.T, b bundle, id string) {
			j := b.claim(t, claimQ)
			out, err := b.q.Cancel(b.ctx, id)
			require.NoError(t, err)
			require.Equal(t, queue.CancelRequested, out)
			require.NoError(t, store.Of(b.q).Release(b.ctx, store.LeaseOf(j)))
		}, true},
		{"release (keeps it)", queue.InsertOpts{}, func(t *testing.T, b bundle, _ string) {
			require.NoError(t, store.Of(b.q).Release(b.ctx, store.LeaseOf(b.claim(t, claimQ))))
		}, false},
		{"reaped with attempts used up", queue.InsertOpts{MaxAttempts: 1}, func(t *testing.T, b bundle, id string) {
			b.claim(t, claimQ)
			b.expire(t, id)
			r, err := store.Of(b.q).Reap(b.ctx, 0, 100)
			require.NoError(t, err)
			require.Equal(t, 1, r.Dead)
		}, true},
		{"reaped with a cancel requested", queue.InsertOpts{}, func(t *testing.T, b bundle, id string) {
			b.claim(t, claimQ)
			_, err := b.q.Cancel(b.ctx, id)
			require.NoError(t, err)
			b.expire(t, id)
			r, err := store.Of(b.q).Reap(b.ctx, 0, 100)
			require.NoError(t, err)
			require.Equal(t, 1, r.Cancelled)
		}, true},
		{"reaped and re-queued (keeps it)", queue.InsertOpts{}, func(t *testing.T, b bundle, id string) {
			b.claim(t, claimQ)
			b.expire(t, id)
			r, err := store.Of(b.q).Reap(b.ctx, 0, 100)
			require.NoError(t, err)
			require.Equal(t, 1, r.Requeued)
		}, false},
		{"reaped and buried (malformed)", queue.InsertOpts{}, func(t *testing.T, b bundle, id string) {
			b.claim(t, claimQ)
			b.expire(t, id)
			_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": id}, bson.M{"$set": bson.M{"errors": 5}})
			require.NoError(t, err)
			r, err := store.Of(b.q).Reap(b.ctx, 0, 100)
			require.NoError(t, err)
			require.Equal(t, 1, r.Buried)
		}, true},
		{"buried by a claim (attempt not a number)", queue.InsertOpts{}, func(t *testing.T, b bundle, id string) {
			_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": id}, bson.M{"$set": bson.M{"attempt": "x"}})
			require.NoError(t, err)
			require.Nil(t, b.claim(t, claimQ))
			raw, err := store.Of(b.q).Collection().FindOne(b.ctx, bson.M{"_id": id}).Raw()
			require.NoError(t, err)
			require.Equal(t, "dead", raw.Lookup("state").StringValue())
		}, true},
		{"buried by a claim (does not decode)", queue.InsertOpts{}, func(t *testing.T, b bundle, id string) {
			_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": id}, bson.M{"$set": bson.M{"errors": 5}})
			require.NoError(t, err)
			require.Nil(t, b.claim(t, claimQ))
			require.Equal(t, jobs.StateDead, b.get(t, id).State)
		}, true},
		{"deleted", queue.InsertOpts{}, func(t *testing.T, b bundle, id string) {
			res, err := b.q.Delete(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(id)}}, true)
			require.NoError(t, err)
			require.NoError(t, res[0].Err)
		}, true},
		{"a null slot written by another app is cleared", queue.InsertOpts{}, func(t *testing.T, b bundle, id string) {
			_, err := store.Of(b.q).Collection().DeleteOne(b.ctx, bson.M{"_id": id})
			require.NoError(t, err)
			// In another queue: an unfinished job of "q" would count.
			_, err = store.Of(b.q).Collection().InsertOne(b.ctx, bson.M{"_id": "raw", "kind": "k", "queue": "other", "state": "available", "capacitySlot": nil})
			require.NoError(t, err)
			n, err := b.q.FreeStrandedSlots(b.ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}, true},
		{"finished by another app, then the reaper's sweep", queue.InsertOpts{}, func(t *testing.T, b bundle, id string) {
			_, err := store.Of(b.q).Collection().UpdateOne(b.ctx, bson.M{"_id": id}, bson.M{"$set": bson.M{"state": "succeeded"}})
			require.NoError(t, err)
			n, err := b.q.FreeStrandedSlots(b.ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			require.NoError(t, b.q.SetCapacity(b.ctx, "q", 1, ""))
			r, err := b.capped(tc.opts)
			require.NoError(t, err)
			b.requireFull(t, 1)
			tc.act(t, b, r.ID)
			if !tc.frees {
				require.Equal(t, 1, b.occupied(t))
				b.requireFull(t, 1)
				return
			}
			require.Equal(t, 0, b.occupied(t))
			raw, err := store.Of(b.q).Collection().FindOne(b.ctx, bson.M{"_id": r.ID}).Raw()
			if err == nil {
				_, has := raw.Lookup("capacitySlot").StringValueOK()
				require.False(t, has, "a finished job holds no slot")
			}
			_, err = b.capped(queue.InsertOpts{})
			require.NoError(t, err, "the slot is free again")
			b.requireFull(t, 1)
		})
	}
}

// TestCapacityLowered: lowering the capacity below the jobs admitted
// refuses enqueues until fewer than the new capacity hold a slot, even when
// a slot under it frees first; raising it admits at once.
func TestCapacityLowered(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 4, ""))
	var ids []string
	for range 4 {
		r, err := b.capped(queue.InsertOpts{})
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}
	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 2, ""))
	b.requireFull(t, 2)
	// Free the job holding slot 0 (under the new capacity): 3 still hold
	// one, so the queue stays full.
	var holder struct {
		ID string `bson:"_id"`
	}
	require.NoError(t, store.Of(b.q).Collection().FindOne(b.ctx, bson.M{"capacitySlot": "q/0"}).Decode(&holder))
	_, err := b.q.Cancel(b.ctx, holder.ID)
	require.NoError(t, err)
	b.requireFull(t, 2)
	for _, id := range ids {
		if id != holder.ID {
			_, err := b.q.Cancel(b.ctx, id)
			require.NoError(t, err)
			if b.occupied(t) < 2 {
				break
			}
		}
	}
	require.Equal(t, 1, b.occupied(t))
	_, err = b.capped(queue.InsertOpts{})
	require.NoError(t, err)
	b.requireFull(t, 2)
	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 3, ""))
	_, err = b.capped(queue.InsertOpts{})
	require.NoError(t, err)
	b.requireFull(t, 3)
}

// TestCapacityMalformedIsUnbounded: a capacity another app wrote as a
// string bounds nothing (and is reported), like a malformed pause.
func TestCapacityMalformedIsUnbounded(t *testing.T) {
	b := setup(t)
	_, err := b.db.Collection("queues").InsertOne(b.ctx, bson.M{"_id": "q", "paused": false, "capacity": "1"})
	require.NoError(t, err)
	for range 2 {
		_, err := b.capped(queue.InsertOpts{})
		require.NoError(t, err)
	}
	caps, err := b.q.QueueCapacities(b.ctx)
	require.NoError(t, err)
	require.Len(t, caps, 1)
	require.Contains(t, caps[0].Malformed, "not an integer")
	// Jobs enqueued while the queue was unbounded hold no slot: they
	// count all the same.
	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 3, ""))
	_, err = b.capped(queue.InsertOpts{})
	require.NoError(t, err)
	b.requireFull(t, 3)
	require.Equal(t, 3, b.occupied(t))
}

// envAdmitChild makes the test binary a child enqueuer (see
// TestCapacityKilledEnqueuerLeaksNothing): "URI|DB".
const envAdmitChild = "DOCKET_TEST_ADMIT_CHILD"

// TestCapacityAdmitChild is the child: it admits one job into queue "q",
// says READ on stdout once it read the occupied slots, and waits to be
// killed before it inserts.
func TestCapacityAdmitChild(t *testing.T) {
	spec := os.Getenv(envAdmitChild)
	if spec == "" {
		t.Skip("only run as the child of TestCapacityKilledEnqueuerLeaksNothing")
	}
	var uri, dbName string
	_, err := fmt.Sscanf(spec, "%s %s", &uri, &dbName)
	require.NoError(t, err)
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	require.NoError(t, err)
	q, err := queue.New(client.Database(dbName), queue.Config{})
	require.NoError(t, err)
	ctx := queue.WithAdmitHook(context.Background(), func() {
		fmt.Println("READ")
		select {} // killed here, between reading the slots and inserting
	})
	_, _ = q.Enqueue(ctx, "k", nil, queue.InsertOpts{Queue: "q"})
	t.Fatal("not killed")
}

// TestCapacityKilledEnqueuerLeaksNothing: enqueuer processes SIGKILLed in
// the middle of their admission (after reading the free slots, before the
// insert) leave no capacity taken: the whole capacity is then usable.
func TestCapacityKilledEnqueuerLeaksNothing(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 3, ""))
	_, err := b.capped(queue.InsertOpts{})
	require.NoError(t, err)
	for range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCapacityAdmitChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), envAdmitChild+"="+testdb.URI()+" "+b.db.Name())
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		sc := bufio.NewScanner(out)
		read := false
		for sc.Scan() {
			if sc.Text() == "READ" {
				read = true
				break
			}
		}
		require.True(t, read, "the child reached its admission")
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		err = cmd.Wait()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())
	}
	require.Equal(t, 1, b.occupied(t), "the killed admissions hold nothing")
	for range 2 {
		_, err := b.capped(queue.InsertOpts{})
		require.NoError(t, err, "the whole capacity is usable")
	}
	b.requireFull(t, 3)
}

// TestCapacityRetryReadmits: retrying a finished job of a bounded queue
// admits it again like an enqueue: it is left alone while the queue is
// full, takes a slot when one is free, and a retry refused for its unique
// key takes none.
func TestCapacityRetryReadmits(t *testing.T) {
	b := setup(t)
	claimQ := claimAll
	claimQ.Queues = []string{"q"}
	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 1, ""))
	a, err := b.capped(queue.InsertOpts{UniqueKey: "u"})
	require.NoError(t, err)
	j := b.claim(t, claimQ)
	_, err = store.Of(b.q).Fail(b.ctx, store.LeaseOf(j), j, jobs.Permanent(errors.New("bad")))
	require.NoError(t, err)
	other, err := b.capped(queue.InsertOpts{})
	require.NoError(t, err)

	res, err := b.q.Retry(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(a.ID)}})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, queue.ErrQueueFull)
	require.Equal(t, jobs.StateDead, b.get(t, a.ID).State, "left alone while the queue is full")

	_, err = b.q.Cancel(b.ctx, other.ID)
	require.NoError(t, err)
	res, err = b.q.Retry(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(a.ID)}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.Equal(t, jobs.StateAvailable, b.get(t, a.ID).State)
	require.Equal(t, 1, b.occupied(t), "the retried job holds a slot")
	b.requireFull(t, 1)

	// Dead again; its key taken meanwhile by another job (capacity 3).
	j = b.claim(t, claimQ)
	_, err = store.Of(b.q).Fail(b.ctx, store.LeaseOf(j), j, jobs.Permanent(errors.New("bad")))
	require.NoError(t, err)
	require.NoError(t, b.q.SetCapacity(b.ctx, "q", 3, ""))
	_, err = b.capped(queue.InsertOpts{UniqueKey: "u"})
	require.NoError(t, err)
	res, err = b.q.Retry(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{queue.StringJobID(a.ID)}})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, queue.ErrUniqueKeyHeld)
	require.Equal(t, 1, b.occupied(t), "a refused retry takes no slot")
}

// TestEnqueueWhenCapacitiesUnreadable: an enqueue that cannot read the
// capacities (here, its context is already done) writes nothing and still
// returns each job's id to enqueue again with.
func TestEnqueueWhenCapacitiesUnreadable(t *testing.T) {
	b := setup(t)
	q, err := queue.New(b.db, queue.Config{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	res, err := q.EnqueueMany(ctx, []queue.Insert{{Kind: "k"}, {Kind: "k", Opts: queue.InsertOpts{ID: "mine"}}})
	var ee *queue.EnqueueError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 2, ee.NotInserted)
	require.Len(t, res, 2)
	require.NotEmpty(t, res[0].ID)
	require.Equal(t, "mine", res[1].ID)
	require.ErrorIs(t, res[0].Err, queue.ErrNotInserted)
	r, err := q.Enqueue(ctx, "k", nil, queue.InsertOpts{})
	require.Error(t, err)
	require.NotEmpty(t, r.ID, "Enqueue keeps the id after an error")
}
