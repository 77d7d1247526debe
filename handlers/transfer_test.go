package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// The steps a transfer reports, in order, on each of its paths.
var (
	transferApplySteps = []string{
		"transfer:pending", "transfer:applying", "transfer:debit", "transfer:credit", "transfer:applied",
		"transfer:pull-source", "transfer:pull-destination", "transfer:done",
	}
	// A transfer to a missing account: found before any account is
	// written, so the rollback only fences the accounts.
	transferRollbackSteps = []string{
		"transfer:pending", "transfer:canceling",
		"transfer:close-source", "transfer:close-destination", "transfer:cancelled",
	}
)

var errTransferCrash = errors.New("injected crash")

type transferBundle struct {
	ctx      context.Context
	db       *mongo.Database
	q        *queue.Client
	accounts *mongo.Collection
	txs      *mongo.Collection
	log      *zap.Logger
}

func transferSetup(t *testing.T) *transferBundle {
	t.Helper()
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(ctx))
	require.NoError(t, handlers.Setup(ctx, db))
	return &transferBundle{
		ctx:      ctx,
		db:       db,
		q:        q,
		accounts: db.Collection(handlers.AccountsCollection),
		txs:      db.Collection(handlers.TransactionsCollection),
		log:      zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
	}
}

// handler returns the registered transfer handler, with hook called after
// each of its writes.
func (b *transferBundle) handler(t *testing.T, hook func(ctx context.Context, step string) error) jobs.Handler {
	t.Helper()
	reg := jobs.NewRegistry()
	require.NoError(t, handlers.Register(reg, handlers.Deps{DB: b.db, Queue: b.q, Logger: b.log, Hook: hook}))
	h, _, ok := reg.Lookup(handlers.TransferKind)
	require.True(t, ok)
	return h
}

// transferCrashAt returns a hook that fails the first time step is reported, and
// a flag saying whether it did.
func transferCrashAt(step string) (func(context.Context, string) error, *atomic.Bool) {
	var fired atomic.Bool
	return func(_ context.Context, s string) error {
		if s == step && fired.CompareAndSwap(false, true) {
			return fmt.Errorf("%w at %s", errTransferCrash, step)
		}
		return nil
	}, &fired
}

func (b *transferBundle) open(t *testing.T, balances map[string]int64) {
	t.Helper()
	docs := make([]any, 0, len(balances))
	for id, bal := range balances {
		docs = append(docs, handlers.Account{ID: id, Balance: bal, PendingTransactions: []string{}})
	}
	_, err := b.accounts.InsertMany(b.ctx, docs)
	require.NoError(t, err)
}

// insertTx writes a transaction directly, as another application might,
// with whatever value it is given, and returns its id.
func (b *transferBundle) insertTx(t *testing.T, src, dst any, value any) string {
	t.Helper()
	id, err := b.tryInsertTx(src, dst, value)
	require.NoError(t, err)
	return id
}

func (b *transferBundle) tryInsertTx(src, dst any, value any) (string, error) {
	return b.tryInsertTxIn(b.txs, src, dst, value)
}

// tryInsertTxIn is tryInsertTx into txs.
func (b *transferBundle) tryInsertTxIn(txs *mongo.Collection, src, dst any, value any) (string, error) {
	id := "tx-" + strconv.FormatInt(rand.Int64(), 36)
	doc := bson.D{{Key: "_id", Value: id}, {Key: "source", Value: src}, {Key: "destination", Value: dst}}
	if value != nil {
		doc = append(doc, bson.E{Key: "value", Value: value})
	}
	doc = append(doc, bson.E{Key: "state", Value: handlers.TxInitial}, bson.E{Key: "lastModified", Value: time.Now()})
	_, err := txs.InsertOne(b.ctx, doc)
	return id, err
}

// transferJob returns a job driving txID that is not in the jobs collection.
func transferJob(id, txID string) *jobs.Job {
	args, err := bson.Marshal(handlers.TransferArgs{TxID: txID})
	if err != nil {
		panic(err)
	}
	return &jobs.Job{ID: id, Kind: handlers.TransferKind, Attempt: 1, Args: args}
}

// claim takes the next runnable transfer job, waiting for one (a retried
// job becomes runnable after its backoff).
func (b *transferBundle) claim(t *testing.T) *jobs.Job {
	t.Helper()
	var j *jobs.Job
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		j, err = store.Of(b.q).Claim(b.ctx, store.ClaimParams{
			Owner: "test", Queues: []string{jobs.DefaultQueue}, Kinds: []string{handlers.TransferKind}, Lease: time.Minute,
		})
		require.NoError(c, err)
		assert.NotNil(c, j)
	}, 10*time.Second, 5*time.Millisecond, "no transfer job became runnable")
	return j
}

// finish records the outcome of a claimed job's attempt as a worker would.
func (b *transferBundle) finish(t *testing.T, j *jobs.Job, err error) {
	t.Helper()
	if err == nil {
		require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(j)))
		return
	}
	_, ferr := store.Of(b.q).Fail(b.ctx, store.LeaseOf(j), j, err)
	require.NoError(t, ferr)
}

// transferTxView is a transaction as the tests read it; value is left raw.
type transferTxView struct {
	ID          string           `bson:"_id"`
	Source      any              `bson:"source"`
	Destination any              `bson:"destination"`
	Value       bson.RawValue    `bson:"value"`
	State       handlers.TxState `bson:"state"`
	Owner       string           `bson:"owner"`
	Reason      string           `bson:"reason"`
	Reverses    string           `bson:"reverses"`
}

func (b *transferBundle) tx(t *testing.T, id string) transferTxView {
	t.Helper()
	var v transferTxView
	require.NoError(t, b.txs.FindOne(b.ctx, bson.D{{Key: "_id", Value: id}}).Decode(&v))
	return v
}

func (b *transferBundle) balances(t *testing.T) map[string]int64 {
	t.Helper()
	var accts []handlers.Account
	cur, err := b.accounts.Find(b.ctx, bson.D{})
	require.NoError(t, err)
	require.NoError(t, cur.All(b.ctx, &accts))
	out := make(map[string]int64, len(accts))
	for _, a := range accts {
		out[a.ID] = a.Balance
	}
	return out
}

// checkMoneyInvariants checks the end state of a run of transfers among
// the accounts opened with the balances in opening: every transaction is
// done or cancelled (with a reason); no account has a pending transaction
// left; no balance is negative; the total is unchanged to the cent; and every
// account holds its opening balance plus its done incoming transfers minus
// its done outgoing ones.
func checkMoneyInvariants(t *testing.T, db *mongo.Database, opening map[string]int64) {
	t.Helper()
	ctx := context.Background()
	cur, err := db.Collection(handlers.AccountsCollection).Find(ctx, bson.D{})
	require.NoError(t, err)
	var accts []handlers.Account
	require.NoError(t, cur.All(ctx, &accts))
	require.Len(t, accts, len(opening), "accounts were created or deleted")

	cur, err = db.Collection(handlers.TransactionsCollection).Find(ctx, bson.D{})
	require.NoError(t, err)
	var txs []transferTxView
	require.NoError(t, cur.All(ctx, &txs))
	want := maps.Clone(opening)
	for _, tx := range txs {
		switch tx.State {
		case handlers.TxDone:
			v, ok := tx.Value.Int64OK()
			require.True(t, ok, "done transaction %s has a %s value", tx.ID, tx.Value.Type)
			src, dst := tx.Source.(string), tx.Destination.(string)
			require.Contains(t, opening, src, "done transaction %s", tx.ID)
			require.Contains(t, opening, dst, "done transaction %s", tx.ID)
			want[src] -= v
			want[dst] += v
		case handlers.TxCancelled:
			require.NotEmpty(t, tx.Reason, "cancelled transaction %s has no reason", tx.ID)
		default:
			require.Failf(t, "unfinished transaction", "transaction %s is %s", tx.ID, tx.State)
		}
	}
	var total, openingTotal int64
	for _, bal := range opening {
		openingTotal += bal
	}
	for _, a := range accts {
		require.Contains(t, opening, a.ID)
		require.Empty(t, a.PendingTransactions, "account %s still has pending transactions", a.ID)
		require.GreaterOrEqual(t, a.Balance, int64(0), "account %s is overdrawn", a.ID)
		require.Equal(t, want[a.ID], a.Balance, "account %s: opening %d plus done incoming minus done outgoing", a.ID, opening[a.ID])
		total += a.Balance
	}
	require.Equal(t, openingTotal, total, "money was created or destroyed")
}

func TestTransferHappyPath(t *testing.T) {
	b := transferSetup(t)
	opening := map[string]int64{"alice": 10_000, "bob": 500}
	b.open(t, opening)
	var steps []string
	h := b.handler(t, func(_ context.Context, s string) error { steps = append(steps, s); return nil })

	txID, jobID, err := handlers.EnqueueTransfer(b.ctx, b.db, b.q, "alice", "bob", 2_550)
	require.NoError(t, err)
	tx := b.tx(t, txID)
	require.Equal(t, handlers.TxInitial, tx.State)
	require.Equal(t, bson.TypeInt64, tx.Value.Type)
	queued, err := b.q.Get(b.ctx, jobID)
	require.NoError(t, err)
	require.Equal(t, handlers.TransferUniqueKey(txID), queued.UniqueKey)

	j := b.claim(t)
	require.Equal(t, jobID, j.ID)
	require.NoError(t, h.Work(b.ctx, j))
	b.finish(t, j, nil)
	require.Equal(t, transferApplySteps, steps, "every write is reported, in order")

	tx = b.tx(t, txID)
	require.Equal(t, handlers.TxDone, tx.State)
	require.Equal(t, jobID, tx.Owner)
	require.Equal(t, map[string]int64{"alice": 7_450, "bob": 3_050}, b.balances(t))
	checkMoneyInvariants(t, b.db, opening)

	// Running the job again writes nothing.
	steps = nil
	require.NoError(t, h.Work(b.ctx, j))
	require.Empty(t, steps)
	require.Equal(t, map[string]int64{"alice": 7_450, "bob": 3_050}, b.balances(t))
}

func TestTransferRollbackSteps(t *testing.T) {
	b := transferSetup(t)
	opening := map[string]int64{"alice": 1_000}
	b.open(t, opening)
	var steps []string
	h := b.handler(t, func(_ context.Context, s string) error { steps = append(steps, s); return nil })
	txID := b.insertTx(t, "alice", "ghost", int64(400))

	require.NoError(t, h.Work(b.ctx, transferJob("j1", txID)), "a rolled-back transfer succeeds")
	require.Equal(t, transferRollbackSteps, steps)
	tx := b.tx(t, txID)
	require.Equal(t, handlers.TxCancelled, tx.State)
	require.Contains(t, tx.Reason, `destination account "ghost" not found`)
	checkMoneyInvariants(t, b.db, opening)
}

// TestTransferCrashAtEveryStep stops a transfer after each of its writes,
// on both paths, then finishes it two ways: the same job run again (as a
// retry), and the job dead and the recovery pass enqueueing a new one that
// takes the transaction over. Either way it ends as one clean run would,
// and running it once more changes nothing.
func TestTransferCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, path := range []struct {
		name  string
		steps []string
	}{
		{"apply", transferApplySteps},
		{"rollback", transferRollbackSteps},
	} {
		for _, step := range path.steps {
			for _, resume := range []string{"retry", "recovery"} {
				t.Run(path.name+"/"+step+"/"+resume, func(t *testing.T) {
					b := transferSetup(t)
					opening := map[string]int64{"alice": 1_000, "bob": 200}
					b.open(t, opening)
					var txID string
					wantBalances := map[string]int64{"alice": 600, "bob": 600}
					wantState := handlers.TxDone
					if path.name == "apply" {
						var err error
						txID, _, err = handlers.EnqueueTransfer(b.ctx, b.db, b.q, "alice", "bob", 400)
						require.NoError(t, err)
					} else {
						txID = b.insertTx(t, "alice", "ghost", int64(400))
						_, err := b.q.Enqueue(b.ctx, handlers.TransferKind, handlers.TransferArgs{TxID: txID},
							queue.InsertOpts{UniqueKey: handlers.TransferUniqueKey(txID)})
						require.NoError(t, err)
						wantBalances, wantState = opening, handlers.TxCancelled
					}
					hook, fired := transferCrashAt(step)
					h := b.handler(t, hook)

					first := b.claim(t)
					err := h.Work(b.ctx, first)
					require.ErrorIs(t, err, errTransferCrash)
					require.False(t, jobs.IsPermanent(err))
					require.True(t, fired.Load())

					var last *jobs.Job
					switch resume {
					case "retry":
						b.finish(t, first, err)
						last = b.claim(t)
						require.Equal(t, first.ID, last.ID)
						require.Equal(t, 2, last.Attempt)
					case "recovery":
						b.finish(t, first, jobs.Permanent(err)) // the job is dead
						rec, rerr := handlers.NewTransferRecovery(b.db, b.q, handlers.TransferRecoveryConfig{Threshold: time.Nanosecond, Logger: b.log})
						require.NoError(t, rerr)
						if step == "transfer:done" || step == "transfer:cancelled" {
							n, err := rec.RunOnce(b.ctx)
							require.NoError(t, err)
							require.Zero(t, n, "a finished transaction needs no job")
							break
						}
						require.EventuallyWithT(t, func(c *assert.CollectT) {
							n, err := rec.RunOnce(b.ctx)
							require.NoError(c, err)
							assert.Equal(c, 1, n)
						}, 10*time.Second, 5*time.Millisecond)
						last = b.claim(t)
						require.NotEqual(t, first.ID, last.ID)
					}
					if last != nil {
						require.NoError(t, h.Work(b.ctx, last))
						b.finish(t, last, nil)
					}

					tx := b.tx(t, txID)
					require.Equal(t, wantState, tx.State)
					require.Equal(t, wantBalances, b.balances(t))
					checkMoneyInvariants(t, b.db, opening)

					// Once more, with a job of its own: nothing changes.
					require.NoError(t, h.Work(b.ctx, transferJob("again", txID)))
					require.Equal(t, wantBalances, b.balances(t))
					require.Equal(t, wantState, b.tx(t, txID).State)
				})
			}
		}
	}
}

// TestTransferCannotApply covers transfers that must be rolled back: each
// ends cancelled with a reason naming what is wrong, the balances untouched,
// and the job succeeds.
func TestTransferCannotApply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		src, dst any
		value    any // nil: no value field at all
		reason   []string
	}{
		{"insufficient funds", "alice", "bob", int64(1_001), []string{"insufficient funds", `"alice"`, "1000", "1001"}},
		{"missing source", "ghost", "bob", int64(10), []string{`source account "ghost" not found`}},
		{"missing destination", "alice", "ghost", int64(10), []string{`destination account "ghost" not found`}},
		{"zero amount", "alice", "bob", int64(0), []string{"value: 0 must be a positive"}},
		{"negative amount", "alice", "bob", int64(-5), []string{"value: -5 must be a positive"}},
		{"same account", "alice", "alice", int64(10), []string{"source and destination", `same account "alice"`}},
		{"whole double", "alice", "bob", 5.0, []string{"value:", "double 5", "whole number of cents"}},
		{"fractional double", "alice", "bob", 5.5, []string{"value:", "double 5.5"}},
		{"NaN", "alice", "bob", math.NaN(), []string{"value:", "double NaN"}},
		{"string", "alice", "bob", "500", []string{"value:", `string "500"`}},
		{"missing value", "alice", "bob", nil, []string{"value: missing"}},
		{"numeric source", 7, "bob", int64(10), []string{"source:", "is not an account id"}},
		{"null destination", "alice", nil, int64(10), []string{"destination: null is not an account id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := transferSetup(t)
			opening := map[string]int64{"alice": 1_000, "bob": 0}
			b.open(t, opening)
			h := b.handler(t, nil)
			txs := b.txs
			if f, ok := tc.value.(float64); ok && math.IsNaN(f) {
				txs = ownClientTxs(t, b)
			}
			txID, err := b.tryInsertTxIn(txs, tc.src, tc.dst, tc.value)
			if f, ok := tc.value.(float64); ok && math.IsNaN(f) && err != nil {
				// FerretDB v1 refuses to store NaN; MongoDB stores it.
				t.Skipf("the server cannot store NaN: %v", err)
			}
			require.NoError(t, err)
			for range 2 { // the second run is a no-op
				require.NoError(t, h.Work(b.ctx, transferJob("j1", txID)))
				tx := b.tx(t, txID)
				require.Equal(t, handlers.TxCancelled, tx.State)
				for _, s := range tc.reason {
					require.Contains(t, tx.Reason, s)
				}
				require.Equal(t, opening, b.balances(t))
			}
			checkMoneyInvariants(t, b.db, opening)
		})
	}
}

// A 32-bit integer is a whole number of cents too.
func TestTransferInt32Value(t *testing.T) {
	b := transferSetup(t)
	b.open(t, map[string]int64{"alice": 1_000, "bob": 0})
	txID := b.insertTx(t, "alice", "bob", int32(250))
	require.NoError(t, b.handler(t, nil).Work(b.ctx, transferJob("j1", txID)))
	require.Equal(t, handlers.TxDone, b.tx(t, txID).State)
	require.Equal(t, map[string]int64{"alice": 750, "bob": 250}, b.balances(t))
}

func TestEnqueueTransferRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		from, to string
		amount   int64
		want     []error
		msg      string
	}{
		{"zero", "alice", "bob", 0, []error{handlers.ErrInvalidTransfer}, "amount 0 must be a positive number of cents"},
		{"negative", "alice", "bob", -1, []error{handlers.ErrInvalidTransfer}, "amount -1"},
		{"same account", "alice", "alice", 5, []error{handlers.ErrInvalidTransfer}, `same account "alice"`},
		{"empty", "", "bob", 5, []error{handlers.ErrInvalidTransfer}, "must not be empty"},
		{"missing source", "ghost", "bob", 5, []error{handlers.ErrInvalidTransfer, handlers.ErrAccountNotFound}, `"ghost"`},
		{"missing destination", "alice", "ghost", 5, []error{handlers.ErrInvalidTransfer, handlers.ErrAccountNotFound}, `"ghost"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := transferSetup(t)
			b.open(t, map[string]int64{"alice": 100, "bob": 100})
			txID, jobID, err := handlers.EnqueueTransfer(b.ctx, b.db, b.q, tc.from, tc.to, tc.amount)
			for _, e := range tc.want {
				require.ErrorIs(t, err, e)
			}
			require.ErrorContains(t, err, tc.msg)
			require.Empty(t, txID)
			require.Empty(t, jobID)
			n, err := b.txs.CountDocuments(b.ctx, bson.D{})
			require.NoError(t, err)
			require.Zero(t, n, "no transaction is written")
			n, err = store.Of(b.q).Collection().CountDocuments(b.ctx, bson.D{})
			require.NoError(t, err)
			require.Zero(t, n, "no job is enqueued")
		})
	}
}

func TestTransferArgs(t *testing.T) {
	t.Parallel()
	_, err := jobs.DecodeArgs[handlers.TransferArgs](bson.Raw{5, 0, 0, 0, 0})
	require.True(t, jobs.IsPermanent(err))
	var ae *jobs.ArgsError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "txId", ae.Field)

	raw, err := bson.Marshal(handlers.TransferArgs{TxID: "t1"})
	require.NoError(t, err)
	args, err := jobs.DecodeArgs[handlers.TransferArgs](raw)
	require.NoError(t, err)
	require.Equal(t, "t1", args.TxID)
	require.Equal(t, "transfer", args.Kind())
}

// A job for a transaction that does not exist fails permanently.
func TestTransferMissingTransaction(t *testing.T) {
	b := transferSetup(t)
	err := b.handler(t, nil).Work(b.ctx, transferJob("j1", "nope"))
	require.True(t, jobs.IsPermanent(err))
	require.ErrorContains(t, err, `no transaction "nope"`)
}

func TestTransferReverse(t *testing.T) {
	b := transferSetup(t)
	opening := map[string]int64{"alice": 1_000, "bob": 100}
	b.open(t, opening)
	h := b.handler(t, nil)

	txID, _, err := handlers.EnqueueTransfer(b.ctx, b.db, b.q, "alice", "bob", 300)
	require.NoError(t, err)

	// Only a done transaction can be reversed.
	_, _, err = handlers.EnqueueReverse(b.ctx, b.db, b.q, txID)
	require.ErrorIs(t, err, handlers.ErrNotReversible)
	_, _, err = handlers.EnqueueReverse(b.ctx, b.db, b.q, "nope")
	require.ErrorIs(t, err, handlers.ErrTransactionNotFound)

	j := b.claim(t)
	require.NoError(t, h.Work(b.ctx, j))
	b.finish(t, j, nil)
	require.Equal(t, map[string]int64{"alice": 700, "bob": 400}, b.balances(t))

	// Asking twice before it runs gives the same reversal and the same job.
	revID, revJob, err := handlers.EnqueueReverse(b.ctx, b.db, b.q, txID)
	require.NoError(t, err)
	require.Equal(t, handlers.ReversalID(txID), revID)
	revID2, revJob2, err := handlers.EnqueueReverse(b.ctx, b.db, b.q, txID)
	require.NoError(t, err)
	require.Equal(t, revID, revID2)
	require.Equal(t, revJob, revJob2)

	rev := b.tx(t, revID)
	require.Equal(t, txID, rev.Reverses)
	require.Equal(t, "bob", rev.Source)
	require.Equal(t, "alice", rev.Destination)
	require.Equal(t, int64(300), rev.Value.Int64())

	j = b.claim(t)
	require.Equal(t, revJob, j.ID)
	require.NoError(t, h.Work(b.ctx, j))
	b.finish(t, j, nil)
	require.Equal(t, handlers.TxDone, b.tx(t, revID).State)
	require.Equal(t, opening, b.balances(t))

	// Once the reversal has finished, asking again is refused and changes
	// nothing.
	revID3, revJob3, err := handlers.EnqueueReverse(b.ctx, b.db, b.q, txID)
	require.ErrorIs(t, err, handlers.ErrAlreadyReversed)
	require.Equal(t, revID, revID3)
	require.Empty(t, revJob3)
	n, err := b.txs.CountDocuments(b.ctx, bson.D{{Key: "reverses", Value: txID}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	n, err = store.Of(b.q).Collection().CountDocuments(b.ctx, bson.D{})
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "one job for the transfer, one for its reversal")
	checkMoneyInvariants(t, b.db, opening)
}

// TestTransferOwnerFence: a pending transaction belongs to the job that
// moved it there. Another job cannot drive it while that job is alive
// (running, or waiting to retry), and takes it over once that job is dead.
func TestTransferOwnerFence(t *testing.T) {
	b := transferSetup(t)
	opening := map[string]int64{"alice": 1_000, "bob": 0}
	b.open(t, opening)
	txID, ownerID, err := handlers.EnqueueTransfer(b.ctx, b.db, b.q, "alice", "bob", 100)
	require.NoError(t, err)

	hook, _ := transferCrashAt("transfer:debit")
	owner := b.claim(t)
	require.Equal(t, ownerID, owner.ID)
	require.ErrorIs(t, b.handler(t, hook).Work(b.ctx, owner), errTransferCrash)

	otherID := b.enqueueRaw(t, txID)
	var steps []string
	h := b.handler(t, func(_ context.Context, s string) error { steps = append(steps, s); return nil })
	tryOther := func() {
		t.Helper()
		other := b.claimID(t, otherID)
		err := h.Work(b.ctx, other)
		require.ErrorIs(t, err, handlers.ErrTransferOwned)
		require.False(t, jobs.IsPermanent(err), "the other job retries")
		require.Empty(t, steps, "the other job wrote nothing")
		tx := b.tx(t, txID)
		require.Equal(t, handlers.TxPending, tx.State)
		require.Equal(t, ownerID, tx.Owner)
		require.Equal(t, map[string]int64{"alice": 900, "bob": 0}, b.balances(t))
		b.finish(t, other, err)
	}
	tryOther() // the owner is running: its worker may yet go on
	b.finish(t, owner, errTransferCrash)
	tryOther() // the owner is waiting to retry

	// The owner dies: the other job takes the transaction over and
	// finishes it.
	b.finish(t, b.claimID(t, ownerID), jobs.Permanent(errTransferCrash))
	other := b.claimID(t, otherID)
	require.NoError(t, h.Work(b.ctx, other))
	b.finish(t, other, nil)
	require.Equal(t, []string{
		"transfer:takeover", "transfer:fence-source", "transfer:fence-destination", "transfer:applying",
		"transfer:credit", "transfer:applied", "transfer:pull-source", "transfer:pull-destination", "transfer:done",
	}, steps, "the debit is not made twice")
	tx := b.tx(t, txID)
	require.Equal(t, handlers.TxDone, tx.State)
	require.Equal(t, otherID, tx.Owner)
	require.Equal(t, map[string]int64{"alice": 900, "bob": 100}, b.balances(t))
	checkMoneyInvariants(t, b.db, opening)
}

// TestTransferZombieOwner: a job that loses its transaction to a takeover
// after it has checked that it owns it cannot change the transaction's
// state: every state change is fenced on the owner.
func TestTransferZombieOwner(t *testing.T) {
	b := transferSetup(t)
	opening := map[string]int64{"alice": 1_000, "bob": 0}
	b.open(t, opening)
	txID, zombieID, err := handlers.EnqueueTransfer(b.ctx, b.db, b.q, "alice", "bob", 100)
	require.NoError(t, err)
	zombie := b.claimID(t, zombieID)
	otherID := b.enqueueRaw(t, txID)
	other := b.claimID(t, otherID)

	// Right after the zombie's credit, the other job takes the transaction
	// over, as it would once the zombie's job had been declared dead.
	takeOver := func(ctx context.Context, step string) error {
		if step != "transfer:credit" {
			return nil
		}
		_, err := b.txs.UpdateOne(ctx, bson.D{{Key: "_id", Value: txID}}, bson.D{{Key: "$set", Value: bson.D{{Key: "owner", Value: otherID}}}})
		return err
	}
	require.ErrorIs(t, b.handler(t, takeOver).Work(b.ctx, zombie), handlers.ErrTransferOwned)
	tx := b.tx(t, txID)
	require.Equal(t, handlers.TxPending, tx.State, "the zombie could not mark it applied")
	require.Equal(t, otherID, tx.Owner)

	require.NoError(t, b.handler(t, nil).Work(b.ctx, other))
	require.Equal(t, handlers.TxDone, b.tx(t, txID).State)
	require.Equal(t, map[string]int64{"alice": 900, "bob": 100}, b.balances(t))
	checkMoneyInvariants(t, b.db, opening)
}

// enqueueRaw enqueues a second transfer job for txID, with no unique key,
// as an application writing jobs by hand might.
func (b *transferBundle) enqueueRaw(t *testing.T, txID string) string {
	t.Helper()
	res, err := b.q.Enqueue(b.ctx, handlers.TransferKind, handlers.TransferArgs{TxID: txID}, queue.InsertOpts{})
	require.NoError(t, err)
	return res.ID
}

// claimID claims jobs until it gets id, giving the others back.
func (b *transferBundle) claimID(t *testing.T, id string) *jobs.Job {
	t.Helper()
	var others []*jobs.Job
	defer func() {
		for _, o := range others {
			require.NoError(t, store.Of(b.q).Release(b.ctx, store.LeaseOf(o)))
		}
	}()
	for {
		j := b.claim(t)
		if j.ID == id {
			return j
		}
		others = append(others, j)
	}
}

type transferCrashKey struct{}

// TestTransferLoad runs 200 random transfers among 20 accounts from 8
// goroutines, crashing them at random steps and leaving some jobs dead and
// some abandoned mid-run, then recovers (reaper, transfer recovery pass,
// retries) until nothing is left, and checks that no money moved wrongly.
func TestTransferLoad(t *testing.T) {
	b := transferSetup(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("DOCKET_TRANSFER_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (DOCKET_TRANSFER_SEED=%d replays the same choices)", seed, seed)
	const (
		nAccounts   = 20
		nGoroutines = 8
		nTransfers  = 200
		crashRate   = 0.06 // per step
	)
	rng := rand.New(rand.NewPCG(seed, 0))
	opening := map[string]int64{}
	ids := make([]string, nAccounts)
	for i := range ids {
		ids[i] = fmt.Sprintf("acct-%02d", i)
		opening[ids[i]] = rng.Int64N(5_000)
	}
	b.open(t, opening)

	// The hook crashes with what the running goroutine put in the context.
	h := b.handler(t, func(ctx context.Context, step string) error {
		if crash, ok := ctx.Value(transferCrashKey{}).(func(string) error); ok {
			return crash(step)
		}
		return nil
	})
	claim := func(ctx context.Context, lease time.Duration) (*jobs.Job, error) {
		return store.Of(b.q).Claim(ctx, store.ClaimParams{
			Owner: "load", Queues: []string{jobs.DefaultQueue}, Kinds: []string{handlers.TransferKind}, Lease: lease,
		})
	}

	// insertAndEnqueue writes a transaction EnqueueTransfer would refuse,
	// as another application might, and enqueues its job.
	insertAndEnqueue := func(ctx context.Context, id, from, to string, value any) error {
		_, err := b.txs.InsertOne(ctx, bson.D{
			{Key: "_id", Value: id}, {Key: "source", Value: from}, {Key: "destination", Value: to},
			{Key: "value", Value: value}, {Key: "state", Value: handlers.TxInitial}, {Key: "lastModified", Value: time.Now()},
		})
		if err != nil {
			return err
		}
		_, err = b.q.Enqueue(ctx, handlers.TransferKind, handlers.TransferArgs{TxID: id},
			queue.InsertOpts{UniqueKey: handlers.TransferUniqueKey(id)})
		return err
	}
	start := time.Now()
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	var crashes, dead, abandoned, lost atomic.Int32
	var wg sync.WaitGroup
	for g := range nGoroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(g)+1))
			ctx := context.WithValue(b.ctx, transferCrashKey{}, func(step string) error {
				if rng.Float64() < crashRate {
					crashes.Add(1)
					return fmt.Errorf("%w at %s", errTransferCrash, step)
				}
				return nil
			})
			for range nTransfers / nGoroutines {
				from := ids[rng.IntN(nAccounts)]
				to := ids[rng.IntN(nAccounts)]
				for to == from {
					to = ids[rng.IntN(nAccounts)]
				}
				amount := 1 + rng.Int64N(2_000)
				var err error
				switch rng.IntN(20) {
				case 0: // the process died between writing the transaction and enqueueing its job
					lost.Add(1)
					_, err = b.txs.InsertOne(ctx, handlers.Transaction{ID: fmt.Sprintf("lost-%d-%d", g, rng.Int64()),
						Source: from, Destination: to, Value: amount, State: handlers.TxInitial, LastModified: time.Now()})
				case 1: // to an account that does not exist: debited, then undone
					err = insertAndEnqueue(ctx, fmt.Sprintf("closed-%d-%d", g, rng.Int64()), from, "closed", amount)
				case 2: // an amount that is not whole cents
					err = insertAndEnqueue(ctx, fmt.Sprintf("double-%d-%d", g, rng.Int64()), from, to, float64(amount))
				default:
					_, _, err = handlers.EnqueueTransfer(ctx, b.db, b.q, from, to, amount)
				}
				if err != nil {
					fail(err)
					return
				}
				// Work one job: any goroutine's.
				j, err := claim(ctx, time.Millisecond)
				if err != nil {
					fail(err)
					return
				}
				if j == nil {
					continue
				}
				werr := h.Work(ctx, j)
				switch {
				case werr == nil:
					err = store.Of(b.q).Complete(ctx, store.LeaseOf(j))
				case !errors.Is(werr, errTransferCrash) && !errors.Is(werr, handlers.ErrTransferOwned):
					fail(fmt.Errorf("job %s: %w", j.ID, werr))
					return
				default:
					switch rng.IntN(4) {
					case 0: // the job is dead; the recovery pass must notice
						dead.Add(1)
						_, err = store.Of(b.q).Fail(ctx, store.LeaseOf(j), j, jobs.Permanent(werr))
					case 1: // the worker vanished; the reaper must notice
						abandoned.Add(1)
					default: // the worker records the failure; the job retries
						_, err = store.Of(b.q).Fail(ctx, store.LeaseOf(j), j, werr)
					}
				}
				if err != nil {
					fail(fmt.Errorf("job %s: %w", j.ID, err))
					return
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	t.Logf("load: %s; crashes %d: %d jobs left dead, %d abandoned running; %d transactions without a job",
		time.Since(start).Round(time.Millisecond), crashes.Load(), dead.Load(), abandoned.Load(), lost.Load())
	start = time.Now()

	// Recover until every transaction is finished: re-queue abandoned jobs,
	// give stalled transactions a job, run whatever is runnable.
	rec, err := handlers.NewTransferRecovery(b.db, b.q, handlers.TransferRecoveryConfig{Threshold: time.Nanosecond, Logger: b.log})
	require.NoError(t, err)
	unfinished := func() int64 {
		n, err := b.txs.CountDocuments(b.ctx, bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: handlers.UnfinishedTxStates}}}})
		require.NoError(t, err)
		return n
	}
	deadline := time.Now().Add(60 * time.Second)
	for unfinished() > 0 {
		require.True(t, time.Now().Before(deadline), "%d transfers left unfinished", unfinished())
		_, err := store.Of(b.q).Reap(b.ctx, 0, 1_000)
		require.NoError(t, err)
		_, err = rec.RunOnce(b.ctx)
		require.NoError(t, err)
		for range nGoroutines {
			wg.Go(func() {
				for {
					j, err := claim(b.ctx, time.Minute)
					if err != nil {
						fail(err)
						return
					}
					if j == nil {
						return // the rest wait for their backoff
					}
					if err := h.Work(b.ctx, j); err != nil {
						fail(fmt.Errorf("job %s: %w", j.ID, err))
						return
					}
					if err := store.Of(b.q).Complete(b.ctx, store.LeaseOf(j)); err != nil {
						fail(fmt.Errorf("job %s: %w", j.ID, err))
						return
					}
				}
			})
		}
		wg.Wait()
		require.Empty(t, errs)
	}

	t.Logf("recovery: %s", time.Since(start).Round(time.Millisecond))
	checkMoneyInvariants(t, b.db, opening)
	var states []struct {
		State handlers.TxState `bson:"_id"`
		N     int              `bson:"n"`
	}
	cur, err := b.txs.Aggregate(b.ctx, mongo.Pipeline{{{Key: "$group", Value: bson.D{
		{Key: "_id", Value: "$state"}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}},
	}}}})
	require.NoError(t, err)
	require.NoError(t, cur.All(b.ctx, &states))
	total := 0
	for _, s := range states {
		total += s.N
	}
	require.Equal(t, nTransfers, total)
	t.Logf("transactions by state: %+v", states)

	// No transfer job is left to run.
	n, err := store.Of(b.q).Collection().CountDocuments(b.ctx, bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{jobs.StateAvailable, jobs.StateRunning}}}}})
	require.NoError(t, err)
	require.Zero(t, n)
}
