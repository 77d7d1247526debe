package handlers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

var _ recovery.Task = (*handlers.TransferRecovery)(nil)

func TestTransferRecoveryConfig(t *testing.T) {
	t.Parallel()
	d := handlers.TransferRecoveryConfig{}.WithDefaults()
	require.Equal(t, handlers.DefaultTransferRecoverySchedule, d.Schedule)
	require.Equal(t, "@every 15s", d.Schedule)
	require.Equal(t, 30*time.Second, d.Threshold)
	require.Equal(t, handlers.DefaultTransferRecoveryThreshold, d.Threshold)
	require.Equal(t, 500, d.Batch)
	require.Equal(t, handlers.DefaultTransferRecoveryBatch, d.Batch)
	require.NotNil(t, d.Logger)
	require.NoError(t, d.Validate())

	set := handlers.TransferRecoveryConfig{Schedule: "@every 1m", Threshold: time.Minute, Batch: 7}.WithDefaults()
	require.Equal(t, "@every 1m", set.Schedule)
	require.Equal(t, time.Minute, set.Threshold)
	require.Equal(t, 7, set.Batch)

	for _, tc := range []struct {
		name string
		cfg  handlers.TransferRecoveryConfig
		want string
	}{
		{"schedule", handlers.TransferRecoveryConfig{Schedule: "nope"}, `transferRecovery.schedule: "nope" is not a cron schedule`},
		{"threshold", handlers.TransferRecoveryConfig{Threshold: -time.Second}, "transferRecovery.threshold: -1s must be positive"},
		{"batch", handlers.TransferRecoveryConfig{Batch: -1}, "transferRecovery.batch: -1 must be at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg.WithDefaults()
			require.ErrorContains(t, cfg.Validate(), tc.want)
		})
	}
}

// recoveryBundle is what a recovery test needs: a database, a queue, and
// the transfer handler.
type recoveryBundle struct {
	ctx context.Context
	db  *mongo.Database
	q   *queue.Client
	h   jobs.Handler
	log *zap.Logger
}

func recoverySetup(t *testing.T) *recoveryBundle {
	t.Helper()
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	q, err := queue.New(db, queue.Config{RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(ctx))
	require.NoError(t, handlers.Setup(ctx, db))
	reg := jobs.NewRegistry()
	require.NoError(t, handlers.Register(reg, handlers.Deps{DB: db, Queue: q, Logger: log}))
	h, _, ok := reg.Lookup(handlers.TransferKind)
	require.True(t, ok)
	return &recoveryBundle{ctx: ctx, db: db, q: q, h: h, log: log}
}

func (b *recoveryBundle) recovery(t *testing.T, cfg handlers.TransferRecoveryConfig) *handlers.TransferRecovery {
	t.Helper()
	cfg.Logger = b.log
	r, err := handlers.NewTransferRecovery(b.db, b.q, cfg)
	require.NoError(t, err)
	return r
}

func (b *recoveryBundle) insert(t *testing.T, coll string, docs ...bson.D) {
	t.Helper()
	all := make([]any, len(docs))
	for i, d := range docs {
		all[i] = d
	}
	_, err := b.db.Collection(coll).InsertMany(b.ctx, all)
	require.NoError(t, err)
}

func (b *recoveryBundle) claim(t *testing.T) *jobs.Job {
	t.Helper()
	j, err := store.Of(b.q).Claim(b.ctx, transferJobs)
	require.NoError(t, err)
	return j
}

// transferJobs claims the transfer jobs.
var transferJobs = store.ClaimParams{
	Owner: "test", Queues: []string{jobs.DefaultQueue}, Kinds: []string{handlers.TransferKind}, Lease: time.Minute,
}

// runAll runs every runnable transfer job to success.
func (b *recoveryBundle) runAll(t *testing.T) int {
	t.Helper()
	n, err := b.runEach()
	require.NoError(t, err)
	return n
}

// runEach is runAll without t (for EventuallyWithT's goroutine): it stops
// at the first error.
func (b *recoveryBundle) runEach() (int, error) {
	for n := 0; ; n++ {
		j, err := store.Of(b.q).Claim(b.ctx, transferJobs)
		if err != nil || j == nil {
			return n, err
		}
		if err := b.h.Work(b.ctx, j); err != nil {
			return n, fmt.Errorf("job %s: %w", j.ID, err)
		}
		if err := store.Of(b.q).Complete(b.ctx, store.LeaseOf(j)); err != nil {
			return n, err
		}
	}
}

func (b *recoveryBundle) jobCount(t *testing.T, filter bson.D) int64 {
	t.Helper()
	n, err := store.Of(b.q).Collection().CountDocuments(b.ctx, filter)
	require.NoError(t, err)
	return n
}

func (b *recoveryBundle) txState(t *testing.T, id string) handlers.TxState {
	t.Helper()
	var tx handlers.Transaction
	require.NoError(t, b.db.Collection(handlers.TransactionsCollection).FindOne(b.ctx, bson.D{{Key: "_id", Value: id}}).Decode(&tx))
	return tx.State
}

func (b *recoveryBundle) accounts(t *testing.T) map[string]handlers.Account {
	t.Helper()
	cur, err := b.db.Collection(handlers.AccountsCollection).Find(b.ctx, bson.D{})
	require.NoError(t, err)
	var all []handlers.Account
	require.NoError(t, cur.All(b.ctx, &all))
	out := map[string]handlers.Account{}
	for _, a := range all {
		out[a.ID] = a
	}
	return out
}

func recoveryTx(id, src, dst string, value int64, state handlers.TxState, extra ...bson.E) bson.D {
	return append(bson.D{
		{Key: "_id", Value: id}, {Key: "source", Value: src}, {Key: "destination", Value: dst},
		{Key: "value", Value: value}, {Key: "state", Value: state}, {Key: "lastModified", Value: time.Now()},
	}, extra...)
}

// TestTransferRecoveryFinishesStalled: transactions stalled in each
// unfinished state, with no job (lost before enqueue), with an owner job
// that is dead, with one that is gone, or with none, each get one job that
// finishes them; finished and recent transactions are left alone.
func TestTransferRecoveryFinishesStalled(t *testing.T) {
	b := recoverySetup(t)
	// A job that died holding t3.
	res, err := b.q.Enqueue(b.ctx, handlers.TransferKind, handlers.TransferArgs{TxID: "t3"}, queue.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	deadJob := b.claim(t)
	require.Equal(t, res.ID, deadJob.ID)
	_, err = store.Of(b.q).Fail(b.ctx, store.LeaseOf(deadJob), deadJob, jobs.Permanent(context.DeadlineExceeded))
	require.NoError(t, err)

	// alice opened with 1000 and bob with 0; t2, t3 and t4 are partly
	// applied.
	b.insert(t, handlers.AccountsCollection,
		bson.D{{Key: "_id", Value: "alice"}, {Key: "balance", Value: int64(1000 - 200 - 300 - 50)}, {Key: "pendingTransactions", Value: bson.A{"t2", "t3", "t4"}}},
		bson.D{{Key: "_id", Value: "bob"}, {Key: "balance", Value: int64(300)}, {Key: "pendingTransactions", Value: bson.A{"t3"}}},
	)
	b.insert(t, handlers.TransactionsCollection,
		recoveryTx("t1", "alice", "bob", 100, handlers.TxInitial), // its job was never enqueued
		recoveryTx("t2", "alice", "bob", 200, handlers.TxPending, bson.E{Key: "owner", Value: "gone-job"}),
		recoveryTx("t3", "alice", "bob", 300, handlers.TxApplied, bson.E{Key: "owner", Value: deadJob.ID}),
		recoveryTx("t4", "alice", "ghost", 50, handlers.TxCanceling, bson.E{Key: "reason", Value: `destination account "ghost" not found`}),
		recoveryTx("t5", "alice", "bob", 1, handlers.TxDone, bson.E{Key: "owner", Value: "old"}),
		recoveryTx("t6", "alice", "bob", 1, handlers.TxCancelled, bson.E{Key: "owner", Value: "old"}),
	)

	n, err := b.recovery(t, handlers.TransferRecoveryConfig{Threshold: time.Hour}).RunOnce(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing has been still for an hour")

	rec := b.recovery(t, handlers.TransferRecoveryConfig{Threshold: time.Nanosecond})
	total := 0
	require.Eventually(t, func() bool {
		n, err := rec.RunOnce(b.ctx)
		total += n
		return err == nil && total == 4
	}, 10*time.Second, 5*time.Millisecond)
	for _, id := range []string{"t1", "t2", "t3", "t4"} {
		require.EqualValues(t, 1, b.jobCount(t, bson.D{{Key: "uniqueKey", Value: handlers.TransferUniqueKey(id)}}), id)
	}
	n, err = rec.RunOnce(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "the jobs enqueued are alive: no second job")
	require.EqualValues(t, 5, b.jobCount(t, bson.D{}))

	require.Equal(t, 4, b.runAll(t))
	for id, want := range map[string]handlers.TxState{
		"t1": handlers.TxDone, "t2": handlers.TxDone, "t3": handlers.TxDone, "t4": handlers.TxCancelled,
		"t5": handlers.TxDone, "t6": handlers.TxCancelled,
	} {
		require.Equal(t, want, b.txState(t, id), id)
	}
	accts := b.accounts(t)
	require.Equal(t, int64(1000-100-200-300), accts["alice"].Balance)
	require.Equal(t, int64(600), accts["bob"].Balance)
	require.Empty(t, accts["alice"].PendingTransactions)
	require.Empty(t, accts["bob"].PendingTransactions)

	n, err = rec.RunOnce(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing is left unfinished")
}

// TestTransferRecoveryLeavesLiveJobs: a stalled transaction whose job is
// waiting, running or retrying gets no second job.
func TestTransferRecoveryLeavesLiveJobs(t *testing.T) {
	b := recoverySetup(t)
	b.insert(t, handlers.AccountsCollection,
		bson.D{{Key: "_id", Value: "alice"}, {Key: "balance", Value: int64(1000)}},
		bson.D{{Key: "_id", Value: "bob"}, {Key: "balance", Value: int64(0)}},
	)
	txID, jobID, err := handlers.EnqueueTransfer(b.ctx, b.db, b.q, "alice", "bob", 10)
	require.NoError(t, err)
	rec := b.recovery(t, handlers.TransferRecoveryConfig{Threshold: time.Nanosecond})
	check := func(state jobs.State) {
		t.Helper()
		j, err := b.q.Get(b.ctx, jobID)
		require.NoError(t, err)
		require.Equal(t, state, j.State)
		n, err := rec.RunOnce(b.ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		require.EqualValues(t, 1, b.jobCount(t, bson.D{}))
	}
	check(jobs.StateAvailable)
	j := b.claim(t)
	check(jobs.StateRunning)
	_, err = store.Of(b.q).Fail(b.ctx, store.LeaseOf(j), j, context.DeadlineExceeded)
	require.NoError(t, err)
	check(jobs.StateAvailable)

	var fault error // ends the wait at once; failed on below
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var n int
		if n, fault = b.runEach(); fault == nil {
			assert.Equal(c, 1, n)
		}
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, fault)
	require.Equal(t, handlers.TxDone, b.txState(t, txID))
}

// TestTransferRecoveryBatches: a pass reads batch after batch until it has
// seen every stalled transaction.
func TestTransferRecoveryBatches(t *testing.T) {
	b := recoverySetup(t)
	var docs []bson.D
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		docs = append(docs, recoveryTx(id, "x", "y", 1, handlers.TxInitial))
	}
	b.insert(t, handlers.TransactionsCollection, docs...)
	rec := b.recovery(t, handlers.TransferRecoveryConfig{Threshold: time.Nanosecond, Batch: 2})
	total := 0
	require.Eventually(t, func() bool {
		n, err := rec.RunOnce(b.ctx)
		total += n
		return err == nil && total == 5
	}, 10*time.Second, 5*time.Millisecond)
	require.EqualValues(t, 5, b.jobCount(t, bson.D{}))
}

// TestTransferRecoveryTask: the pass runs as a scheduled task.
func TestTransferRecoveryTask(t *testing.T) {
	b := recoverySetup(t)
	b.insert(t, handlers.TransactionsCollection, recoveryTx("t1", "x", "y", 1, handlers.TxInitial))
	rec := b.recovery(t, handlers.TransferRecoveryConfig{Schedule: "@every 1h", Threshold: time.Nanosecond})
	require.Equal(t, "@every 1h", rec.Schedule())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rec.Run()
		n, err := store.Of(b.q).Collection().CountDocuments(b.ctx, bson.D{})
		require.NoError(c, err)
		assert.EqualValues(c, 1, n)
	}, 10*time.Second, 5*time.Millisecond)

	_, err := handlers.NewTransferRecovery(b.db, b.q, handlers.TransferRecoveryConfig{Threshold: -time.Second})
	require.EqualError(t, err, "transferRecovery.threshold: -1s must be positive")
}
