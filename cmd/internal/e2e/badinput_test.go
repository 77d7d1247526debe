package e2e

import (
	"context"
	"math"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// badJob is one document a careless app might insert, and what must become
// of it.
type badJob struct {
	name string
	doc  bson.D // the job's fields; _id and the defaults are added
	// tx, when set, is a transaction the job's args name, inserted first.
	tx bson.D
	// want is the job's end: dead with a message containing deadMsg,
	// succeeded, or still available (never claimed, visible).
	want    jobs.State
	deadMsg string
	// check, when set, looks at the data after the job ends.
	check func(t *testing.T, db dbView)
}

type dbView struct {
	users func(id string) bson.M
	tx    func(id string) bson.M
}

// TestBadInputEndsDeadOrVisible inserts straight into the collections what a
// careless app in another language might: no kind or a kind that is not a
// string or not known, args that are not a document, args of the wrong
// types, operator-looking keys and values, a name over 1 MB, transactions
// with impossible amounts, jobs without state or runAt. Each must end dead
// with a message saying what is wrong, or, where no worker can tell it is
// wrong, stay available and visible; the worker never crashes or spins, and
// a good job enqueued alongside runs as usual.
func TestBadInputEndsDeadOrVisible(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	ctx := context.Background()
	insertDocs(t, db.Collection("users"), []any{
		bson.D{{Key: "_id", Value: "u1"}, {Key: "name", Value: "one"}, {Key: "friends", Value: bson.A{}}},
		bson.D{{Key: "_id", Value: "u2"}, {Key: "name", Value: "two"}, {Key: "friends", Value: bson.A{}}},
		bson.D{{Key: "_id", Value: "u3"}, {Key: "name", Value: "three"}, {Key: "friends", Value: bson.A{}}},
	})
	insertDocs(t, db.Collection("accounts"), []any{
		bson.D{{Key: "_id", Value: "a1"}, {Key: "balance", Value: int64(1000)}, {Key: "pendingTransactions", Value: bson.A{}}},
		bson.D{{Key: "_id", Value: "a2"}, {Key: "balance", Value: int64(1000)}, {Key: "pendingTransactions", Value: bson.A{}}},
	})

	tx := func(value any) bson.D {
		return bson.D{{Key: "source", Value: "a1"}, {Key: "destination", Value: "a2"}, {Key: "value", Value: value}, {Key: "state", Value: "initial"}}
	}
	cancelledWith := func(id, reason string) func(*testing.T, dbView) {
		return func(t *testing.T, v dbView) {
			got := v.tx(id)
			require.Equal(t, "cancelled", got["state"], "transaction %s: %v", id, got)
			require.Contains(t, got["reason"], reason)
		}
	}
	bigName := strings.Repeat("x", 1<<20+10)
	friendsOf := func(id string, want ...string) func(*testing.T, dbView) {
		return func(t *testing.T, v dbView) {
			got := bson.A{}
			if f, ok := v.users(id)["friends"].(bson.A); ok {
				got = f
			}
			require.ElementsMatch(t, want, []any(got), "friends of %s", id)
		}
	}
	named := func(id, name string) func(*testing.T, dbView) {
		return func(t *testing.T, v dbView) { require.Equal(t, name, v.users(id)["name"]) }
	}
	af := "add-friend"
	cases := []badJob{
		{name: "no kind", doc: bson.D{{Key: "args", Value: bson.D{}}}, want: jobs.StateAvailable},
		{name: "kind a number", doc: bson.D{{Key: "kind", Value: 42}, {Key: "args", Value: bson.D{}}}, want: jobs.StateAvailable},
		{name: "unknown kind", doc: bson.D{{Key: "kind", Value: "send-email"}, {Key: "args", Value: bson.D{}}}, want: jobs.StateAvailable},
		{name: "no state", doc: bson.D{{Key: "kind", Value: "noop"}, {Key: "args", Value: bson.D{}}, {Key: "state", Value: nil}}, want: ""},
		{name: "no runAt", doc: bson.D{{Key: "kind", Value: "noop"}, {Key: "args", Value: bson.D{}}, {Key: "runAt", Value: nil}}, want: jobs.StateAvailable},
		{name: "no args", doc: bson.D{{Key: "kind", Value: af}}, want: jobs.StateDead, deadMsg: "userA: must not be empty"},
		{name: "args a string", doc: bson.D{{Key: "kind", Value: af}, {Key: "args", Value: "u1,u2"}}, want: jobs.StateDead, deadMsg: "args"},
		{name: "args an array", doc: bson.D{{Key: "kind", Value: af}, {Key: "args", Value: bson.A{"u1", "u2"}}}, want: jobs.StateDead, deadMsg: "args"},
		{name: "user ids numbers", doc: bson.D{{Key: "kind", Value: af}, {Key: "args", Value: bson.D{{Key: "userA", Value: 1}, {Key: "userB", Value: 2}}}},
			want: jobs.StateDead, deadMsg: "invalid args", check: friendsOf("u1")},
		{name: "user id an operator", doc: bson.D{{Key: "kind", Value: af}, {Key: "args", Value: bson.D{{Key: "userA", Value: bson.D{{Key: "$gt", Value: ""}}}, {Key: "userB", Value: "u2"}}}},
			want: jobs.StateDead, deadMsg: "invalid args", check: friendsOf("u1")},
		{name: "user id $where", doc: bson.D{{Key: "kind", Value: af}, {Key: "args", Value: bson.D{{Key: "userA", Value: "$where"}, {Key: "userB", Value: "u1"}}}},
			want: jobs.StateDead, deadMsg: "user not found", check: friendsOf("u1")},
		{name: "args key with a dot", doc: bson.D{{Key: "kind", Value: af}, {Key: "args", Value: bson.D{{Key: "user.A", Value: "u1"}, {Key: "userB", Value: "u2"}}}},
			want: jobs.StateDead, deadMsg: "userA: must not be empty"},
		{name: "args key with a $", doc: bson.D{{Key: "kind", Value: af}, {Key: "args", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "friends", Value: "all"}}}, {Key: "userA", Value: "u3"}, {Key: "userB", Value: "u2"}}}},
			want: jobs.StateSucceeded, check: friendsOf("u3", "u2")},
		{name: "name an operator", doc: bson.D{{Key: "kind", Value: "rename-user"}, {Key: "args", Value: bson.D{{Key: "userId", Value: "u2"}, {Key: "newName", Value: bson.D{{Key: "$gt", Value: ""}}}}}},
			want: jobs.StateDead, deadMsg: "invalid args"},
		{name: "name $where", doc: bson.D{{Key: "kind", Value: "rename-user"}, {Key: "args", Value: bson.D{{Key: "userId", Value: "u1"}, {Key: "newName", Value: "$where"}}}},
			want: jobs.StateSucceeded, check: named("u1", "$where")},
		{name: "name over 1 MB", doc: bson.D{{Key: "kind", Value: "rename-user"}, {Key: "args", Value: bson.D{{Key: "userId", Value: "u2"}, {Key: "newName", Value: bigName}}}},
			want: jobs.StateDead, deadMsg: "over the limit of 100", check: named("u2", "two")},
		{name: "txId a number", doc: bson.D{{Key: "kind", Value: "transfer"}, {Key: "args", Value: bson.D{{Key: "txId", Value: 5}}}},
			want: jobs.StateDead, deadMsg: "invalid args"},
		{name: "amount a float", tx: tx(12.5), want: jobs.StateSucceeded, check: cancelledWith("tx-amount a float", "not a whole number of cents")},
		{name: "amount a string", tx: tx("100"), want: jobs.StateSucceeded, check: cancelledWith("tx-amount a string", "not a whole number of cents")},
		{name: "amount NaN", tx: tx(math.NaN()), want: jobs.StateSucceeded, check: cancelledWith("tx-amount NaN", "not a whole number of cents")},
		{name: "amount negative", tx: tx(int64(-500)), want: jobs.StateSucceeded, check: cancelledWith("tx-amount negative", "must be a positive number")},
		{name: "amount over int64", tx: tx(math.MaxInt64 * 4.0), want: jobs.StateSucceeded, check: cancelledWith("tx-amount over int64", "not a whole number of cents")},
		{name: "attempt a string", doc: bson.D{{Key: "kind", Value: "noop"}, {Key: "args", Value: bson.D{}}, {Key: "attempt", Value: "0"}}, want: jobs.StateDead, deadMsg: "attempt"},
		{name: "maxAttempts a string", doc: bson.D{{Key: "kind", Value: "noop"}, {Key: "args", Value: bson.D{}}, {Key: "maxAttempts", Value: "5"}}, want: jobs.StateDead, deadMsg: "maxAttempts"},
	}

	now := time.Now()
	refused := map[string]error{}
	for i := range cases {
		c := &cases[i]
		id := "bad-" + strings.ReplaceAll(c.name, " ", "-")
		if c.tx != nil {
			txID := "tx-" + c.name
			if err := testdb.RetryInsert(t.Logf, "insert "+txID, func() error {
				_, err := db.Collection("transactions").InsertOne(ctx, append(bson.D{{Key: "_id", Value: txID}}, c.tx...))
				return err
			}); err != nil {
				refused[c.name] = err
				continue
			}
			c.doc = bson.D{{Key: "kind", Value: "transfer"}, {Key: "args", Value: bson.D{{Key: "txId", Value: txID}}}}
		}
		doc := bson.D{{Key: "_id", Value: id}}
		set := map[string]bool{}
		for _, e := range c.doc {
			set[e.Key] = true
			if e.Value != nil {
				doc = append(doc, e)
			}
		}
		defaults := bson.D{{Key: "state", Value: "available"}, {Key: "queue", Value: "default"}, {Key: "runAt", Value: now},
			{Key: "attempt", Value: 0}, {Key: "maxAttempts", Value: 3}, {Key: "errors", Value: bson.A{}}}
		for _, e := range defaults {
			if !set[e.Key] {
				doc = append(doc, e)
			}
		}
		if err := testdb.RetryInsert(t.Logf, "insert "+id, func() error { _, err := store.Of(q).Collection().InsertOne(ctx, doc); return err }); err != nil {
			refused[c.name] = err
		}
	}
	good := enqueue(t, q, "record", bson.M{}, queue.InsertOpts{})

	w := startWorker(t, db, "W", fastWorker...)
	waitJob(t, q, good.ID, time.Minute, "succeeded beside the bad input", inState(jobs.StateSucceeded))

	view := dbView{
		users: func(id string) bson.M {
			var m bson.M
			must(t, "read user "+id, func() error { return db.Collection("users").FindOne(ctx, bson.M{"_id": id}).Decode(&m) })
			return m
		},
		tx: func(id string) bson.M {
			var m bson.M
			must(t, "read transaction "+id, func() error { return db.Collection("transactions").FindOne(ctx, bson.M{"_id": id}).Decode(&m) })
			return m
		},
	}
	raw := func(id string) bson.Raw {
		var r bson.Raw
		must(t, "read job "+id, func() (err error) {
			r, err = store.Of(q).Collection().FindOne(ctx, bson.M{"_id": id}).Raw()
			return err
		})
		return r
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := refused[c.name]; err != nil {
				t.Skipf("the server refuses to store it: %v", err)
			}
			id := "bad-" + strings.ReplaceAll(c.name, " ", "-")
			var state string
			require.EventuallyWithT(t, func(ct *assert.CollectT) {
				r, err := store.Of(q).Collection().FindOne(ctx, bson.M{"_id": id}).Raw()
				if !assert.NoError(ct, err, "job %s", id) {
					return
				}
				state, _ = r.Lookup("state").StringValueOK()
				assert.True(ct, c.want == jobs.StateAvailable || c.want == "" || jobs.State(state).Finished(), "job %s never finished: %s", id, r)
			}, time.Minute, 50*time.Millisecond)
			require.Equal(t, string(c.want), state, "job %s: %s", id, raw(id))
			if c.want == jobs.StateDead {
				errs, ok := raw(id).Lookup("errors").ArrayOK()
				require.True(t, ok, "job %s: %s", id, raw(id))
				vals, err := errs.Values()
				require.NoError(t, err)
				require.NotEmpty(t, vals)
				msg := vals[len(vals)-1].Document().Lookup("message").StringValue()
				require.Contains(t, msg, c.deadMsg)
				require.Less(t, len(msg), 2000, "the message must say what is wrong, not echo the input")
			}
			if c.check != nil {
				c.check(t, view)
			}
		})
	}
	// Still alive, and not spinning: the jobs it cannot run cost it no
	// more than its idle polling.
	select {
	case <-w.done:
		t.Fatalf("the worker exited:\n%s", w.out.String())
	default:
	}
	// Claims that timed out on a loaded test server are not the bad
	// documents' doing; any other claim failure is.
	failed := 0
	for _, line := range strings.Split(w.out.String(), "\n") {
		if strings.Contains(line, "claim failed") && !strings.Contains(line, "deadline exceeded") && !strings.Contains(line, "timed out") {
			failed++
		}
	}
	require.Less(t, failed, 3, w.out.String())
	w.signal(syscall.SIGTERM)
	require.Equal(t, 0, w.wait(30*time.Second))
}
