package queue_test

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// lostReply is what a driver returns when the connection drops after the
// server applied a command: a network error.
var lostReply = mongo.CommandError{Code: 0, Message: "connection closed before the reply", Labels: []string{"NetworkError"}}

// idsInDB returns the ids of every job in the collection, sorted.
func idsInDB(t *testing.T, b bundle) []string {
	t.Helper()
	cur, err := store.Of(b.q).Collection().Find(b.ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	require.NoError(t, err)
	var docs []struct {
		ID string `bson:"_id"`
	}
	require.NoError(t, cur.All(b.ctx, &docs))
	ids := make([]string, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
	}
	sort.Strings(ids)
	return ids
}

// thereIDs returns the ids of the results that say their job is in the
// collection, sorted.
func thereIDs(res []queue.Result) []string {
	var ids []string
	for _, r := range res {
		if r.Err == nil {
			ids = append(ids, r.ID)
		}
	}
	sort.Strings(ids)
	return ids
}

// loseReplies returns ctx with a hook that loses the reply of the insert
// commands whose numbers (from 1) are in at, after running before, if
// set, with that number; other commands pass.
func loseReplies(ctx context.Context, before func(call int), at ...int) context.Context {
	calls := 0
	return queue.WithInsertHook(ctx, func(err error) error {
		calls++
		for _, n := range at {
			if n == calls {
				if before != nil {
					before(calls)
				}
				return lostReply
			}
		}
		return err
	})
}

func inserts(n int) []queue.Insert {
	ins := make([]queue.Insert, n)
	for i := range ins {
		ins[i] = queue.Insert{Kind: "k", Args: bson.M{"i": i}}
	}
	return ins
}

// withIDs returns ins with each job's id set to the one res reported.
func withIDs(ins []queue.Insert, res []queue.Result) []queue.Insert {
	out := make([]queue.Insert, len(ins))
	for i, in := range ins {
		in.Opts.ID = res[i].ID
		out[i] = in
	}
	return out
}

// TestEnqueueLostReplyIsFoundInserted: the server applies the insert and
// its reply is lost; the enqueue sends it again, finds its jobs there and
// succeeds, and the same call again with the same ids adds nothing.
func TestEnqueueLostReplyIsFoundInserted(t *testing.T) {
	b := setup(t)
	ins := inserts(5)
	res, err := b.q.EnqueueMany(loseReplies(b.ctx, nil, 1), ins)
	require.NoError(t, err, "every job is in the collection: the enqueue succeeded")
	require.Len(t, res, 5)
	for _, r := range res {
		require.NoError(t, r.Err)
		require.False(t, r.Existed, "inserted by this call")
	}
	require.Equal(t, thereIDs(res), idsInDB(t, b))

	again, err := b.q.EnqueueMany(b.ctx, withIDs(ins, res))
	require.NoError(t, err)
	for i, r := range again {
		require.Equal(t, res[i].ID, r.ID)
		require.True(t, r.Existed, "job %d was there already", i)
	}
	require.Len(t, idsInDB(t, b), 5, "a rerun with the same ids adds nothing")

	// With the caller's ids, the jobs the lost insert wrote are still this
	// call's (their createdAt says so), and a rerun's are not.
	mine := withIDs(inserts(3), []queue.Result{{ID: "a"}, {ID: "b"}, {ID: "c"}})
	res, err = b.q.EnqueueMany(loseReplies(b.ctx, nil, 1), mine)
	require.NoError(t, err)
	for _, r := range res {
		require.False(t, r.Existed)
	}
	res, err = b.q.EnqueueMany(loseReplies(b.ctx, nil, 1), mine)
	require.NoError(t, err)
	for _, r := range res {
		require.True(t, r.Existed)
	}

	// One job, the same.
	one, err := b.q.Enqueue(loseReplies(b.ctx, nil, 1), "k", nil, queue.InsertOpts{})
	require.NoError(t, err)
	require.Contains(t, idsInDB(t, b), one.ID)
	require.Len(t, idsInDB(t, b), 9)
}

// TestEnqueueTimedOutAfterApplyResendsOnItsOwnContext: the caller's
// context expires once the server applied the insert; the enqueue still
// settles it and reports the jobs inserted.
func TestEnqueueTimedOutAfterApplyResendsOnItsOwnContext(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	calls := 0
	ctx = queue.WithInsertHook(ctx, func(err error) error {
		calls++
		if calls == 1 {
			require.NoError(t, err)
			cancel()
			return fmt.Errorf("insert: %w", context.DeadlineExceeded)
		}
		return err
	})
	res, err := b.q.EnqueueMany(ctx, inserts(3))
	require.NoError(t, err)
	require.Equal(t, thereIDs(res), idsInDB(t, b))
	require.Len(t, res, 3)
}

// TestEnqueuePartlyAppliedIsCompletedByTheResend: the server applied part
// of an insert before the connection dropped; the resend inserts the rest.
func TestEnqueuePartlyAppliedIsCompletedByTheResend(t *testing.T) {
	b := setup(t)
	res, err := b.q.EnqueueMany(loseReplies(b.ctx, func(int) {
		ids := idsInDB(t, b)
		_, err := store.Of(b.q).Collection().DeleteMany(b.ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids[:3]}}}})
		require.NoError(t, err)
	}, 1), inserts(10))
	require.NoError(t, err)
	require.Equal(t, thereIDs(res), idsInDB(t, b))
	require.Len(t, idsInDB(t, b), 10)
}

// TestEnqueuePartlyAppliedReportsExactlyWhatIsThere: an insert applied in
// part loses its reply, and so does its resend (which is applied in part
// too): the jobs are looked up, the results say exactly which are in the
// collection, and a rerun with the same ids inserts only the missing ones
// and reports the others as already there.
func TestEnqueuePartlyAppliedReportsExactlyWhatIsThere(t *testing.T) {
	b := setup(t)
	ins := inserts(2500) // three insert commands: 1000, 1000, 500
	var calls []int
	dropPart := func(call int) {
		calls = append(calls, call)
		ids := idsInDB(t, b)
		_, err := store.Of(b.q).Collection().DeleteMany(b.ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids[1000:1700]}}}})
		require.NoError(t, err)
	}
	res, err := b.q.EnqueueMany(loseReplies(b.ctx, dropPart, 2, 3), ins)
	require.Equal(t, []int{2, 3}, calls, "the second insert and its resend lose their replies")
	var ee *queue.EnqueueError
	require.ErrorAs(t, err, &ee)
	require.True(t, mongo.IsNetworkError(err), "the cause is wrapped: %v", err)
	require.Len(t, res, 2500)
	require.Equal(t, thereIDs(res), idsInDB(t, b), "the results say exactly what is in the collection")
	require.Equal(t, 1300, ee.Inserted)
	require.Equal(t, 1200, ee.NotInserted)
	require.Zero(t, ee.Unknown)
	for _, r := range res {
		if r.Err != nil {
			require.ErrorIs(t, r.Err, queue.ErrNotInserted)
		}
	}
	require.Contains(t, err.Error(), "2500 jobs: 1300 inserted, 0 already there, 1200 not inserted")

	again, err := b.q.EnqueueMany(b.ctx, withIDs(ins, res))
	require.NoError(t, err)
	existed := 0
	for i, r := range again {
		require.Equal(t, res[i].ID, r.ID)
		require.Equal(t, res[i].Err == nil, r.Existed, "job %d", i)
		if r.Existed {
			existed++
		}
	}
	require.Equal(t, 1300, existed)
	require.Len(t, idsInDB(t, b), 2500, "the rerun inserted only the missing jobs")
}

// TestEnqueueUnknownOutcomeRetriesSafely: the reply is lost and nothing
// more can be sent (the client is gone): every job's outcome is unknown,
// and a retry with the same ids from another client adds each job once.
func TestEnqueueUnknownOutcomeRetriesSafely(t *testing.T) {
	b := setup(t)
	client, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()))
	require.NoError(t, err)
	q, err := queue.New(client.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	ins := inserts(4)
	res, err := q.EnqueueMany(loseReplies(b.ctx, func(int) { require.NoError(t, client.Disconnect(b.ctx)) }, 1), ins)
	var ee *queue.EnqueueError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 4, ee.Unknown)
	require.Len(t, res, 4)
	for _, r := range res {
		require.ErrorIs(t, r.Err, queue.ErrOutcomeUnknown)
		require.NotEmpty(t, r.ID)
	}
	again, err := b.q.EnqueueMany(b.ctx, withIDs(ins, res))
	require.NoError(t, err)
	for _, r := range again {
		require.True(t, r.Existed)
	}
	require.Len(t, idsInDB(t, b), 4)
}

// TestEnqueueRetryOfUniqueKeyJobIsExistedNotDuplicate: a job with a unique
// key whose reply was lost is retried with its id: it holds its own key,
// so it is there already, not a duplicate; and after it finished (its key
// released) a retry still finds it by id instead of adding a second job.
func TestEnqueueRetryOfUniqueKeyJobIsExistedNotDuplicate(t *testing.T) {
	b := setup(t)
	opts := queue.InsertOpts{UniqueKey: "u1"}
	first, err := b.q.Enqueue(loseReplies(b.ctx, nil, 1), "k", nil, opts)
	require.NoError(t, err)
	opts.ID = first.ID
	again, err := b.q.Enqueue(b.ctx, "k", nil, opts)
	require.NoError(t, err)
	require.True(t, again.Existed)
	require.False(t, again.Duplicate)
	require.Equal(t, first.ID, again.ID)

	// Another job with the key, under another id: a duplicate, as before.
	other, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{UniqueKey: "u1"})
	require.NoError(t, err)
	require.True(t, other.Duplicate)
	require.Equal(t, first.ID, other.ID)

	j := b.claim(t, claimAll)
	require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(j)))
	late, err := b.q.Enqueue(b.ctx, "k", nil, opts)
	require.NoError(t, err)
	require.True(t, late.Existed, "the finished job is found by its id")
	require.Len(t, idsInDB(t, b), 1)
}

// TestEnqueueManyInsertsInBoundedChunks: a large EnqueueMany is several
// insert commands of at most queue.ChunkJobs jobs, so that other clients'
// commands run in between.
func TestEnqueueManyInsertsInBoundedChunks(t *testing.T) {
	b := setup(t)
	var mu sync.Mutex
	var sizes []int
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "insert" {
			return
		}
		n := 0
		if docs, err := e.Command.LookupErr("documents"); err == nil {
			vals, _ := docs.Array().Values()
			n = len(vals)
		}
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(mon))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	q, err := queue.New(client.Database(b.db.Name()), queue.Config{})
	require.NoError(t, err)
	res, err := q.EnqueueMany(b.ctx, inserts(2500))
	require.NoError(t, err)
	require.Len(t, res, 2500)
	commands := func() []int {
		mu.Lock()
		defer mu.Unlock()
		out := sizes
		sizes = nil
		return out
	}
	require.Equal(t, []int{1000, 1000, 500}, commands())

	// A byte bound too: six jobs of 900 KiB args are two commands.
	big := strings.Repeat("x", 900<<10)
	var ins []queue.Insert
	for range 6 {
		ins = append(ins, queue.Insert{Kind: "k", Args: bson.M{"s": big}})
	}
	_, err = q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	require.Equal(t, []int{4, 2}, commands())
}

// badArgs is a corpus of args a MongoDB-protocol server refuses, alters or
// loses, each with the field path the error must name.
var badArgs = []struct {
	name  string
	args  any
	field string
	want  string
}{
	{"dot key", bson.D{{Key: "a.b", Value: 1}}, "args", `key "a.b" contains '.'`},
	{"dollar key", bson.D{{Key: "$set", Value: 1}}, "args", `key "$set" starts with '$'`},
	{"nested dollar key", bson.D{{Key: "a", Value: bson.D{{Key: "$where", Value: "x"}}}}, "args.a", `"$where" starts with '$'`},
	{"dot key in array of documents", bson.D{{Key: "items", Value: bson.A{bson.D{{Key: "ok", Value: 1}}, bson.D{{Key: "x.y", Value: 1}}}}}, "args.items[1]", `"x.y" contains '.'`},
	{"duplicate key", bson.D{{Key: "a", Value: 1}, {Key: "a", Value: 2}}, "args", `key "a" appears twice`},
	{"duplicate nested key", bson.D{{Key: "a", Value: bson.D{{Key: "b", Value: 1}, {Key: "b", Value: 2}}}}, "args.a", `"b" appears twice`},
	{"duplicate key in array of documents", bson.D{{Key: "l", Value: bson.A{1, bson.D{{Key: "b", Value: 1}, {Key: "b", Value: 2}}}}}, "args.l[1]", `"b" appears twice`},
	{"empty key", bson.D{{Key: "", Value: 1}}, "args", `key "" is empty`},
	{"key not UTF-8", bson.D{{Key: "\xff", Value: 1}}, "args", "not valid UTF-8"},
	{"NUL in a key", map[string]any{"a\x00b": 1}, "args", "null bytes"},
	{"string not UTF-8", bson.D{{Key: "s", Value: "\xfe\xff"}}, "args.s", "not valid UTF-8"},
	{"NaN", bson.D{{Key: "n", Value: math.NaN()}}, "args.n", "NaN"},
	{"infinity", bson.D{{Key: "n", Value: bson.D{{Key: "m", Value: math.Inf(-1)}}}}, "args.n.m", "-Inf"},
	{"nested array", bson.D{{Key: "m", Value: bson.A{bson.A{1, 2}}}}, "args.m[0]", "array directly inside an array"},
	{"decimal128", bson.D{{Key: "d", Value: bson.NewDecimal128(0, 15)}}, "args.d", "decimal128"},
	{"javascript", bson.D{{Key: "f", Value: bson.JavaScript("1")}}, "args.f", "JavaScript"},
	{"symbol", bson.D{{Key: "f", Value: bson.Symbol("s")}}, "args.f", "symbol"},
	{"undefined", bson.D{{Key: "f", Value: bson.Undefined{}}}, "args.f", "undefined"},
	{"dbpointer", bson.D{{Key: "f", Value: bson.DBPointer{DB: "d", Pointer: bson.NewObjectID()}}}, "args.f", "DBPointer"},
	{"minkey", bson.D{{Key: "f", Value: bson.MinKey{}}}, "args.f", "MinKey"},
	{"maxkey", bson.D{{Key: "f", Value: bson.MaxKey{}}}, "args.f", "MaxKey"},
	{"too deep", deepArgs(jobs.MaxArgsDepth), "args" + strings.Repeat(".d", jobs.MaxArgsDepth), "nested more than 99 levels"},
}

func deepArgs(levels int) bson.D {
	d := bson.D{{Key: "x", Value: 1}}
	for range levels {
		d = bson.D{{Key: "d", Value: d}}
	}
	return d
}

// TestEnqueueRefusesWhatTheServerWouldRefuse: each of the corpus's args,
// in the middle of a batch, fails the whole batch with an error naming the
// job and the field path, and writes nothing, though devdb would have
// stored the other jobs of an unordered insert.
func TestEnqueueRefusesWhatTheServerWouldRefuse(t *testing.T) {
	b := setup(t)
	for _, tc := range badArgs {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.q.EnqueueMany(b.ctx, []queue.Insert{{Kind: "k"}, {Kind: "k", Args: tc.args}, {Kind: "k"}})
			var ve *queue.ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, 1, ve.Index)
			require.Equal(t, tc.field, ve.Field)
			require.Contains(t, err.Error(), tc.want)

			_, err = b.q.Enqueue(b.ctx, "k", tc.args, queue.InsertOpts{})
			require.ErrorAs(t, err, &ve)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	// What the server stores is still accepted: '$' inside a key, "_id",
	// an empty array, regex, null, and nesting just within the limit.
	_, err := b.q.EnqueueMany(b.ctx, []queue.Insert{
		{Kind: "k", Args: bson.D{{Key: "a$", Value: 1}, {Key: "_id", Value: "x"}, {Key: "e", Value: bson.A{}}}},
		{Kind: "k", Args: bson.D{{Key: "r", Value: bson.Regex{Pattern: "a", Options: "i"}}, {Key: "n", Value: nil}}},
		{Kind: "k", Args: bson.D{{Key: "l", Value: bson.A{bson.D{{Key: "a", Value: bson.A{1}}}}}}},
		{Kind: "k", Args: deepArgs(jobs.MaxArgsDepth - 1)},
	})
	require.NoError(t, err)
	require.Len(t, idsInDB(t, b), 4, "only the valid batch was written")
}

// TestEnqueueRefusesBadIDsAndNames: ids are checked like args, and two
// jobs of one batch with one id fail it before anything is written.
func TestEnqueueRefusesBadIDsAndNames(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		name  string
		ins   []queue.Insert
		index int
		field string
		want  string
	}{
		{"same id twice", []queue.Insert{{Kind: "k", Opts: queue.InsertOpts{ID: "a"}}, {Kind: "k"}, {Kind: "k", Opts: queue.InsertOpts{ID: "a"}}}, 2, "id", `"a" is also the id of job 0`},
		{"id not UTF-8", []queue.Insert{{Kind: "k", Opts: queue.InsertOpts{ID: "\xff"}}}, 0, "id", "not valid UTF-8"},
		{"id too long", []queue.Insert{{Kind: "k"}, {Kind: "k", Opts: queue.InsertOpts{ID: strings.Repeat("i", 300)}}}, 1, "id", "over the 256-byte limit"},
		{"kind not UTF-8", []queue.Insert{{Kind: "\xfe"}}, 0, "kind", "not valid UTF-8"},
		{"queue too long", []queue.Insert{{Kind: "k", Opts: queue.InsertOpts{Queue: strings.Repeat("q", 257)}}}, 0, "queue", "over the 256-byte limit"},
		{"unique key too long", []queue.Insert{{Kind: "k", Opts: queue.InsertOpts{UniqueKey: strings.Repeat("u", 1025)}}}, 0, "uniqueKey", "over the 1024-byte limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.q.EnqueueMany(b.ctx, tc.ins)
			var ve *queue.ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, tc.index, ve.Index)
			require.Equal(t, tc.field, ve.Field)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	require.Empty(t, idsInDB(t, b))
}

// TestEnqueueWithIDUsesIt: a given id is the job's id.
func TestEnqueueWithIDUsesIt(t *testing.T) {
	b := setup(t)
	res, err := b.q.Enqueue(b.ctx, "k", nil, queue.InsertOpts{ID: "order-42:email"})
	require.NoError(t, err)
	require.Equal(t, "order-42:email", res.ID)
	require.False(t, res.Existed)
	require.Equal(t, "k", b.get(t, "order-42:email").Kind)
	again, err := b.q.Enqueue(b.ctx, "other", nil, queue.InsertOpts{ID: "order-42:email"})
	require.NoError(t, err)
	require.True(t, again.Existed, "an id names one job: a second enqueue of it adds nothing")
	require.Equal(t, "k", b.get(t, "order-42:email").Kind)
}

// TestEnqueueSendsNothingMoreOnceTheCallerGaveUp: a context cancelled
// between two insert commands stops the enqueue there; the jobs not sent
// are reported not inserted (an unanswered insert is settled on a context
// of its own, but nothing new is sent on it).
func TestEnqueueSendsNothingMoreOnceTheCallerGaveUp(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	calls := 0
	ctx = queue.WithInsertHook(ctx, func(err error) error {
		calls++
		cancel()
		return err
	})
	res, err := b.q.EnqueueMany(ctx, inserts(1500))
	require.Equal(t, 1, calls)
	var ee *queue.EnqueueError
	require.ErrorAs(t, err, &ee)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1000, ee.Inserted)
	require.Equal(t, 500, ee.NotInserted)
	require.Equal(t, thereIDs(res), idsInDB(t, b))
}
