package handlers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// An attemptCtl steers one attempt of a transfer job through the hook: it
// stalls the attempt after step stallAt until resumed (a SIGSTOP, a VM
// pause), or stops it dead after step crashAt, writing nothing more (a
// SIGKILL).
type attemptCtl struct {
	stallAt, crashAt string
	reached, resume  chan struct{}
}

type attemptKey struct{}

// stallHook is the hook of every handler in these tests: it does what the
// attempt's attemptCtl in the context says.
func stallHook(ctx context.Context, step string) error {
	ctl, ok := ctx.Value(attemptKey{}).(*attemptCtl)
	if !ok {
		return nil
	}
	if step == ctl.stallAt && ctl.reached != nil {
		close(ctl.reached)
		ctl.reached = nil
		<-ctl.resume
	}
	if step == ctl.crashAt {
		return fmt.Errorf("%w at %s", errTransferCrash, step)
	}
	return nil
}

// runningAttempt is an attempt running in its own goroutine.
type runningAttempt struct {
	job  *jobs.Job
	ctl  *attemptCtl
	done chan error
}

// start claims the transfer job with a lease that expires at once (it
// lasts until the test reaps it) and runs the handler on it.
func (b *transferBundle) start(t *testing.T, h jobs.Handler, ctl *attemptCtl) *runningAttempt {
	t.Helper()
	var j *jobs.Job
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		j, err = store.Of(b.q).Claim(b.ctx, store.ClaimParams{
			Owner: "stall", Queues: []string{jobs.DefaultQueue}, Kinds: []string{handlers.TransferKind}, Lease: time.Millisecond,
		})
		require.NoError(c, err)
		assert.NotNil(c, j)
	}, 10*time.Second, 5*time.Millisecond, "no transfer job became runnable")
	if ctl.stallAt != "" {
		ctl.reached, ctl.resume = make(chan struct{}), make(chan struct{})
	}
	a := &runningAttempt{job: j, ctl: ctl, done: make(chan error, 1)}
	reached := ctl.reached
	ctx := context.WithValue(b.ctx, attemptKey{}, ctl)
	go func() { a.done <- h.Work(ctx, j) }()
	if reached != nil {
		select {
		case <-reached:
		case err := <-a.done:
			require.FailNowf(t, "the attempt never reached its stall", "at %s: returned %v", ctl.stallAt, err)
		}
	}
	return a
}

// wait returns the attempt's handler error once it has returned.
func (a *runningAttempt) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-a.done:
		return err
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the attempt did not return")
		return nil
	}
}

// reapAll re-queues every running job, as the reaper does once their
// leases have expired.
func (b *transferBundle) reapAll(t *testing.T) {
	t.Helper()
	time.Sleep(2 * time.Millisecond) // the 1 ms leases are over
	_, err := store.Of(b.q).Reap(b.ctx, 0, 100)
	require.NoError(t, err)
}

// finishAttempt records a's outcome as its worker would, and reports
// whether the job's lease still let it.
func (b *transferBundle) finishAttempt(t *testing.T, a *runningAttempt, herr error) bool {
	t.Helper()
	var err error
	if herr == nil {
		err = store.Of(b.q).Complete(b.ctx, store.LeaseOf(a.job))
	} else {
		_, err = store.Of(b.q).Fail(b.ctx, store.LeaseOf(a.job), a.job, herr)
	}
	if err != nil {
		require.ErrorIs(t, err, jobs.ErrLeaseLost)
		return false
	}
	return true
}

// TestTransferStalledAttemptsMoveNoMoney replays the schedules of issue 10:
// an attempt stalls past its lease, the reaper hands the job to another
// attempt that gets further (or finishes), and the stalled one resumes with
// its context alive, as a stalled process does before its heartbeat learns
// that the lease is gone. Whatever it writes then must count for nothing.
func TestTransferStalledAttemptsMoveNoMoney(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// stall1: where attempt 1 stalls. crash2 / stall2: where attempt 2
		// is killed, or stalls too ("" runs it to the end).
		stall1, crash2, stall2 string
	}{
		// The case: a late credit after attempt 2 pulled the
		// markers, then a commit of attempt 1's own.
		{name: "late credit after the pulls", stall1: "transfer:debit", crash2: "transfer:pull-destination"},
		// The mirror case: a late debit.
		{name: "late debit after the pulls", stall1: "transfer:applying", crash2: "transfer:pull-destination"},
		{name: "late debit after done", stall1: "transfer:applying"},
		{name: "late credit after done", stall1: "transfer:debit"},
		{name: "late applied after done", stall1: "transfer:credit"},
		{name: "late pull after done", stall1: "transfer:pull-source"},
		{name: "late debit during attempt 2's credit", stall1: "transfer:applying", crash2: "transfer:credit"},
		{name: "stalled before its first account write", stall1: "transfer:pending", crash2: "transfer:applied"},
		// Two stalled attempts; a third finishes. Both resume.
		{name: "two stalls, third pulls", stall1: "transfer:debit", stall2: "transfer:credit"},
		{name: "two stalls before applying", stall1: "transfer:applying", stall2: "transfer:fence-destination"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := transferSetup(t)
			opening := map[string]int64{"alice": 1_000, "bob": 200}
			b.open(t, opening)
			h := b.handler(t, stallHook)
			txID, _, err := handlers.EnqueueTransfer(b.ctx, b.db, b.q, "alice", "bob", 400)
			require.NoError(t, err)

			a1 := b.start(t, h, &attemptCtl{stallAt: tc.stall1})
			b.reapAll(t) // attempt 1's lease expires while it is stalled
			a2 := b.start(t, h, &attemptCtl{crashAt: tc.crash2, stallAt: tc.stall2})
			var stalled []*runningAttempt
			stalled = append(stalled, a1)
			switch {
			case tc.stall2 != "":
				stalled = append(stalled, a2)
				b.reapAll(t)
				a3 := b.start(t, h, &attemptCtl{})
				require.NoError(t, a3.wait(t))
				require.True(t, b.finishAttempt(t, a3, nil))
			case tc.crash2 != "":
				require.ErrorIs(t, a2.wait(t), errTransferCrash) // killed: it records nothing
			default:
				require.NoError(t, a2.wait(t))
				require.True(t, b.finishAttempt(t, a2, nil))
			}

			// The stalled attempts resume, newest last, then oldest last.
			for _, a := range stalled {
				close(a.ctl.resume)
				herr := a.wait(t)
				require.False(t, b.finishAttempt(t, a, herr), "a stalled attempt cannot record an outcome")
			}
			// The reaper and a last attempt finish whatever is left.
			b.reapAll(t)
			if j, err := b.q.Get(b.ctx, a1.job.ID); err == nil && !j.State.Finished() {
				a := b.start(t, h, &attemptCtl{})
				require.NoError(t, a.wait(t))
				require.True(t, b.finishAttempt(t, a, nil))
			}

			tx := b.tx(t, txID)
			require.Equal(t, handlers.TxDone, tx.State)
			require.Equal(t, map[string]int64{"alice": 600, "bob": 600}, b.balances(t), "the transfer moved its money exactly once")
			checkMoneyInvariants(t, b.db, opening)
		})
	}
}

// TestTransferRefusesForeignAccounts: an account written by another
// application with a field docket writes of another type is found before
// the first write, and the transfer ends cancelled naming the account and
// the field, with no money moved and nothing left pending.
func TestTransferRefusesForeignAccounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		account string
		field   string
		value   any
		reason  string
	}{
		{"destination pendingTransactions null", "bob", "pendingTransactions", nil, `account "bob": pendingTransactions: null is not an array`},
		{"source pendingTransactions string", "alice", "pendingTransactions", "t1", `account "alice": pendingTransactions: string "t1" is not an array`},
		{"destination balance string", "bob", "balance", "100", `account "bob": balance: string "100" is not a whole number of cents`},
		{"source balance double", "alice", "balance", 1000.5, `account "alice": balance: double 1000.5 is not a whole number of cents`},
		{"destination version string", "bob", "version", "v1", `account "bob": version: string "v1" is not an integer`},
		{"destination balance null", "bob", "balance", nil, `account "bob": balance: null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := transferSetup(t)
			opening := map[string]int64{"alice": 1_000, "bob": 200}
			b.open(t, opening)
			_, err := b.accounts.UpdateOne(b.ctx, bson.D{{Key: "_id", Value: tc.account}},
				bson.D{{Key: "$set", Value: bson.D{{Key: tc.field, Value: tc.value}}}})
			require.NoError(t, err)
			before := b.rawAccounts(t)
			var steps []string
			h := b.handler(t, func(_ context.Context, s string) error { steps = append(steps, s); return nil })
			txID, _, err := handlers.EnqueueTransfer(b.ctx, b.db, b.q, "alice", "bob", 400)
			require.NoError(t, err)
			j := b.claim(t)
			require.NoError(t, h.Work(b.ctx, j), "a refused transfer's job succeeds: the rollback is its outcome")
			tx := b.tx(t, txID)
			require.Equal(t, handlers.TxCancelled, tx.State)
			require.Contains(t, tx.Reason, tc.reason)
			require.NotContains(t, steps, "transfer:debit")
			require.NotContains(t, steps, "transfer:credit")
			after := b.rawAccounts(t)
			for id, doc := range before {
				require.Equal(t, doc.Lookup("balance"), after[id].Lookup("balance"), "account %s: balance", id)
				require.Equal(t, doc.Lookup("pendingTransactions"), after[id].Lookup("pendingTransactions"), "account %s: pendingTransactions", id)
			}
		})
	}
}

func (b *transferBundle) rawAccounts(t *testing.T) map[string]bson.Raw {
	t.Helper()
	cur, err := b.accounts.Find(b.ctx, bson.D{})
	require.NoError(t, err)
	out := map[string]bson.Raw{}
	for cur.Next(b.ctx) {
		out[cur.Current.Lookup("_id").StringValue()] = append(bson.Raw(nil), cur.Current...)
	}
	require.NoError(t, cur.Err())
	return out
}

// TestCancelTransfer: a transfer can be cancelled until an attempt starts
// applying it; then, and once it is done, the request is refused, pointing
// at a reversal. An accepted cancel is never lost: the transfer ends
// cancelled whatever its jobs do.
func TestCancelTransfer(t *testing.T) {
	t.Parallel()
	t.Run("before it runs", func(t *testing.T) {
		b := transferSetup(t)
		opening := map[string]int64{"alice": 1_000, "bob": 200}
		b.open(t, opening)
		txID, _, err := handlers.EnqueueTransfer(b.ctx, b.db, b.q, "alice", "bob", 400)
		require.NoError(t, err)
		require.NoError(t, handlers.CancelTransfer(b.ctx, b.db, txID))
		require.NoError(t, handlers.CancelTransfer(b.ctx, b.db, txID), "asking twice is fine")
		h := b.handler(t, nil)
		j := b.claim(t)
		require.NoError(t, h.Work(b.ctx, j))
		tx := b.tx(t, txID)
		require.Equal(t, handlers.TxCancelled, tx.State)
		require.Equal(t, "cancelled by request", tx.Reason)
		require.Equal(t, opening, b.balances(t))
		checkMoneyInvariants(t, b.db, opening)
		require.NoError(t, handlers.CancelTransfer(b.ctx, b.db, txID), "cancelling a cancelled transfer changes nothing")
	})
	t.Run("while an attempt holds it, before it applies", func(t *testing.T) {
		b := transferSetup(t)
		opening := map[string]int64{"alice": 1_000, "bob": 200}
		b.open(t, opening)
		txID, _, err := handlers.EnqueueTransfer(b.ctx, b.db, b.q, "alice", "bob", 400)
		require.NoError(t, err)
		h := b.handler(t, stallHook)
		a := b.start(t, h, &attemptCtl{stallAt: "transfer:pending"})
		require.NoError(t, handlers.CancelTransfer(b.ctx, b.db, txID))
		close(a.ctl.resume)
		require.NoError(t, a.wait(t))
		tx := b.tx(t, txID)
		require.Equal(t, handlers.TxCancelled, tx.State)
		require.Equal(t, "cancelled by request", tx.Reason)
		require.Equal(t, opening, b.balances(t))
	})
	t.Run("once applying", func(t *testing.T) {
		b := transferSetup(t)
		opening := map[string]int64{"alice": 1_000, "bob": 200}
		b.open(t, opening)
		txID, _, err := handlers.EnqueueTransfer(b.ctx, b.db, b.q, "alice", "bob", 400)
		require.NoError(t, err)
		h := b.handler(t, stallHook)
		a := b.start(t, h, &attemptCtl{stallAt: "transfer:applying"})
		err = handlers.CancelTransfer(b.ctx, b.db, txID)
		require.ErrorIs(t, err, handlers.ErrNotCancellable)
		require.ErrorContains(t, err, "--reverse "+txID)
		close(a.ctl.resume)
		require.NoError(t, a.wait(t))
		require.Equal(t, handlers.TxDone, b.tx(t, txID).State)
		require.Equal(t, map[string]int64{"alice": 600, "bob": 600}, b.balances(t))

		err = handlers.CancelTransfer(b.ctx, b.db, txID)
		require.ErrorIs(t, err, handlers.ErrNotCancellable)
		require.ErrorContains(t, err, "it is done")
		require.ErrorIs(t, handlers.CancelTransfer(b.ctx, b.db, "nope"), handlers.ErrTransactionNotFound)
	})
}

// TestCancelTransferJob: cancelling a transfer's job (with the handlers'
// cancel hooks registered on the queue client) cancels the transfer too, so that the recovery pass, which gives a job to every unfinished
// transaction, rolls it back instead of applying it.
func TestCancelTransferJob(t *testing.T) {
	b := transferSetup(t)
	opening := map[string]int64{"alice": 1_000, "bob": 200}
	b.open(t, opening)
	txID, jobID, err := handlers.EnqueueTransfer(b.ctx, b.db, b.q, "alice", "bob", 400)
	require.NoError(t, err)
	handlers.CancelHooks(b.q, b.db)
	out, err := b.q.Cancel(b.ctx, jobID)
	require.NoError(t, err)
	require.Equal(t, queue.Cancelled, out)

	rec, err := handlers.NewTransferRecovery(b.db, b.q, handlers.TransferRecoveryConfig{Threshold: time.Nanosecond, Logger: b.log})
	require.NoError(t, err)
	n, err := rec.RunOnce(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the unfinished transaction gets a job")
	j := b.claim(t)
	require.NotEqual(t, jobID, j.ID)
	require.NoError(t, b.handler(t, nil).Work(b.ctx, j))
	tx := b.tx(t, txID)
	require.Equal(t, handlers.TxCancelled, tx.State)
	require.Equal(t, "cancelled by request", tx.Reason)
	require.Equal(t, opening, b.balances(t))

	// A transfer that has started applying keeps its job.
	txID, jobID, err = handlers.EnqueueTransfer(b.ctx, b.db, b.q, "alice", "bob", 100)
	require.NoError(t, err)
	a := b.start(t, b.handler(t, stallHook), &attemptCtl{stallAt: "transfer:applying"})
	_, err = b.q.Cancel(b.ctx, jobID)
	require.ErrorIs(t, err, handlers.ErrNotCancellable)
	require.ErrorIs(t, err, queue.ErrNotCancellable, "what docketctl and the dashboard check")
	got, err := b.q.Get(b.ctx, jobID)
	require.NoError(t, err)
	require.Nil(t, got.CancelRequestedAt, "the job is not asked to stop")
	close(a.ctl.resume)
	require.NoError(t, a.wait(t))
	require.Equal(t, handlers.TxDone, b.tx(t, txID).State)
}
