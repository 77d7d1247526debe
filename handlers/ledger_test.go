package handlers_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
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
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// The steps of one clean posting.
var ledgerPostSteps = []string{"ledger:claim-from", "ledger:claim-to", "ledger:post"}

type ledgerBundle struct {
	ctx  context.Context
	db   *mongo.Database
	q    *queue.Client
	txs  *mongo.Collection
	seq  *mongo.Collection
	acct *mongo.Collection
	log  *zap.Logger
}

func ledgerSetup(t *testing.T) *ledgerBundle {
	t.Helper()
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(ctx))
	require.NoError(t, handlers.Setup(ctx, db))
	return &ledgerBundle{
		ctx: ctx, db: db, q: q,
		txs:  db.Collection(handlers.LedgerCollection),
		seq:  db.Collection(handlers.LedgerSeqCollection),
		acct: db.Collection(handlers.LedgerAccountsCollection),
		log:  zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
	}
}

func (b *ledgerBundle) open(t *testing.T, opening map[string]int64) {
	t.Helper()
	for id, bal := range opening {
		require.NoError(t, handlers.OpenLedgerAccount(b.ctx, b.db, id, bal))
	}
}

func (b *ledgerBundle) handler(t *testing.T, hook func(context.Context, string) error) jobs.Handler {
	t.Helper()
	reg := jobs.NewRegistry()
	require.NoError(t, handlers.Register(reg, handlers.Deps{DB: b.db, Queue: b.q, Logger: b.log, Hook: hook}))
	h, _, ok := reg.Lookup(handlers.LedgerTransferKind)
	require.True(t, ok)
	return h
}

// ledgerJob is an attempt of job id posting args, with its own lease.
func ledgerJob(id, lease string, args handlers.LedgerTransferArgs) *jobs.Job {
	raw, err := bson.Marshal(args)
	if err != nil {
		panic(err)
	}
	return &jobs.Job{ID: id, Kind: handlers.LedgerTransferKind, Attempt: 1, Args: raw, LeaseToken: lease}
}

func (b *ledgerBundle) sweeper(t *testing.T, threshold time.Duration, hook func(context.Context, string) error) *handlers.LedgerSweeper {
	t.Helper()
	s, err := handlers.NewLedgerSweeper(b.db, handlers.LedgerSweeperConfig{Threshold: threshold, Logger: b.log})
	require.NoError(t, err)
	if hook != nil {
		handlers.SetLedgerSweeperHook(s, hook)
	}
	return s
}

// settle sweeps until nothing is left to fold or commit.
func (b *ledgerBundle) settle(t *testing.T, threshold time.Duration) {
	t.Helper()
	ledgerSettle(t, b.ctx, b.db, b.sweeper(t, threshold, nil))
}

func ledgerSettle(t *testing.T, ctx context.Context, db *mongo.Database, s *handlers.LedgerSweeper) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res, err := s.RunOnce(ctx)
		require.NoError(c, err)
		n, err := db.Collection(handlers.LedgerCollection).CountDocuments(ctx, bson.D{{Key: "proc", Value: handlers.LedgerUncommitted}})
		require.NoError(c, err)
		assert.Zero(c, res.Waiting, "waiting")
		assert.Zero(c, n, "uncommitted")
		assert.Zero(c, res.Folded, "folded")
	}, time.Minute, time.Millisecond, "the ledger never settled")
}

func (b *ledgerBundle) tx(t *testing.T, id string) handlers.LedgerTx {
	t.Helper()
	var tx handlers.LedgerTx
	require.NoError(t, b.txs.FindOne(b.ctx, bson.D{{Key: "_id", Value: id}}).Decode(&tx))
	return tx
}

func (b *ledgerBundle) balance(t *testing.T, id string) int64 {
	t.Helper()
	bal, err := handlers.LedgerBalance(b.ctx, b.db, id)
	require.NoError(t, err)
	return bal
}

// checkLedgerInvariants checks a settled ledger from the database: every
// transaction COMMITTED; the VALID changes sum to zero and each moved
// money between accounts that exist; no two VALID changes of one account
// share a seqId; in seqId order no account's balance is ever negative;
// every cache equals the opening balance plus the account's VALID changes,
// and VerifyLedger agrees; it returns the balances.
func checkLedgerInvariants(t *testing.T, db *mongo.Database, opening map[string]int64) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	cur, err := db.Collection(handlers.LedgerCollection).Find(ctx, bson.D{})
	require.NoError(t, err)
	var txs []handlers.LedgerTx
	require.NoError(t, cur.All(ctx, &txs))
	type change struct {
		seq, delta int64
		cacheBal   *int64
	}
	byAccount := map[string][]change{}
	seen := map[string]string{}
	var sum int64
	for _, tx := range txs {
		require.Equal(t, handlers.LedgerCommitted, tx.Proc, "transaction %s", tx.ID)
		if tx.State != handlers.LedgerValid {
			require.Equal(t, handlers.LedgerCancelled, tx.State, "transaction %s", tx.ID)
			require.NotEmpty(t, tx.Reason, "cancelled transaction %s has no reason", tx.ID)
			continue
		}
		for _, c := range tx.Changes {
			require.Contains(t, opening, c.Account, "transaction %s", tx.ID)
			key := fmt.Sprintf("%s#%d", c.Account, c.SeqID)
			require.NotContains(t, seen, key, "seqId %d of %s is held by %s and %s", c.SeqID, c.Account, seen[key], tx.ID)
			seen[key] = tx.ID
			d := c.Value
			if c.Type == handlers.LedgerWithdraw {
				d = -d
			}
			sum += d
			byAccount[c.Account] = append(byAccount[c.Account], change{c.SeqID, d, c.CacheBal})
		}
	}
	require.Zero(t, sum, "the VALID changes do not sum to zero: money was created or destroyed")
	balances := map[string]int64{}
	for id, open := range opening {
		cs := byAccount[id]
		slices.SortFunc(cs, func(a, b change) int { return cmp.Compare(a.seq, b.seq) })
		bal := open
		for _, c := range cs {
			bal += c.delta
			require.GreaterOrEqual(t, bal, int64(0), "account %s is overdrawn at seqId %d", id, c.seq)
			require.NotNil(t, c.cacheBal, "account %s seqId %d was never folded", id, c.seq)
			require.Equal(t, bal, *c.cacheBal, "account %s seqId %d: cacheBal", id, c.seq)
		}
		var acct struct {
			Cache struct {
				Balance int64 `bson:"balance"`
			} `bson:"cache"`
		}
		require.NoError(t, db.Collection(handlers.LedgerAccountsCollection).FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&acct))
		require.Equal(t, bal, acct.Cache.Balance, "account %s: cache against the log", id)
		got, err := handlers.LedgerBalance(ctx, db, id)
		require.NoError(t, err)
		require.Equal(t, bal, got, "account %s: LedgerBalance", id)
		balances[id] = bal
	}
	drift, err := handlers.VerifyLedger(ctx, db)
	require.NoError(t, err)
	require.Empty(t, drift)
	return balances
}

func TestLedgerPostSweepAndVerify(t *testing.T) {
	b := ledgerSetup(t)
	opening := map[string]int64{"alice": 1_000, "bob": 100}
	b.open(t, opening)
	var steps []string
	h := b.handler(t, func(_ context.Context, s string) error { steps = append(steps, s); return nil })
	args := handlers.LedgerTransferArgs{From: "alice", To: "bob", Amount: 250}
	j := ledgerJob("job-1", "lease-1", args)
	require.NoError(t, h.Work(b.ctx, j))
	require.Equal(t, ledgerPostSteps, steps)

	tx := b.tx(t, "job-1")
	require.Equal(t, handlers.LedgerValid, tx.State)
	require.Equal(t, handlers.LedgerUncommitted, tx.Proc)
	require.Equal(t, "job-1", tx.Job)
	require.Equal(t, "lease-1", tx.Lease)
	require.Len(t, tx.Changes, 2)
	require.Equal(t, handlers.LedgerChange{Account: "alice", Type: "withdraw", Value: 250, SeqID: 1}, tx.Changes[0])
	require.Equal(t, handlers.LedgerChange{Account: "bob", Type: "deposit", Value: 250, SeqID: 1}, tx.Changes[1])
	require.Equal(t, int64(750), b.balance(t, "alice"), "the balance counts changes after the cache")
	require.Equal(t, int64(350), b.balance(t, "bob"))

	// Running the job again, as a retry after a lost reply would, posts
	// nothing.
	steps = nil
	require.NoError(t, h.Work(b.ctx, ledgerJob("job-1", "lease-2", args)))
	require.Empty(t, steps)

	b.settle(t, time.Hour)
	tx = b.tx(t, "job-1")
	require.Equal(t, handlers.LedgerCommitted, tx.Proc)
	require.Equal(t, int64(750), *tx.Changes[0].CacheBal)
	require.Equal(t, int64(350), *tx.Changes[1].CacheBal)
	require.Equal(t, map[string]int64{"alice": 750, "bob": 350}, checkLedgerInvariants(t, b.db, opening))

	// An insufficient balance is refused, recorded, and the job succeeds.
	steps = nil
	require.NoError(t, h.Work(b.ctx, ledgerJob("job-2", "l", handlers.LedgerTransferArgs{From: "bob", To: "alice", Amount: 351})))
	require.Equal(t, []string{"ledger:refuse"}, steps)
	refused := b.tx(t, "job-2")
	require.Equal(t, handlers.LedgerCancelled, refused.State)
	require.Contains(t, refused.Reason, `insufficient funds: account "bob" has 350 cents available, the transfer needs 351`)
	b.settle(t, time.Hour)
	checkLedgerInvariants(t, b.db, opening)

	// Drift is found: another app changes a cache.
	_, err := b.acct.UpdateOne(b.ctx, bson.D{{Key: "_id", Value: "bob"}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "cache.balance", Value: int64(1)}}}})
	require.NoError(t, err)
	drift, err := handlers.VerifyLedger(b.ctx, b.db)
	require.NoError(t, err)
	require.Len(t, drift, 1)
	require.Equal(t, "bob: cache 351 at seqId 1, log 350", drift[0].String())
}

// TestLedgerSeqIDUniqueOnDevdb: the server refuses a second claim of one
// (account, seqId), and a poster that finds a seqId taken by a claim in
// flight takes the next one, counting the claim's withdrawal.
func TestLedgerSeqIDUniqueOnDevdb(t *testing.T) {
	b := ledgerSetup(t)
	b.open(t, map[string]int64{"alice": 1_000, "bob": 0})
	claim := func(tx string, seq int64, value int64) error {
		_, err := b.seq.InsertOne(b.ctx, bson.D{
			{Key: "_id", Value: fmt.Sprintf("%q#%d", "alice", seq)}, {Key: "account", Value: "alice"}, {Key: "seqId", Value: seq},
			{Key: "tx", Value: tx}, {Key: "try", Value: "t-" + tx}, {Key: "kind", Value: "change"},
			{Key: "type", Value: "withdraw"}, {Key: "value", Value: value}, {Key: "at", Value: time.Now()},
		})
		return err
	}
	require.NoError(t, claim("other", 1, 900))
	err := claim("mine", 1, 10)
	require.True(t, mongo.IsDuplicateKeyError(err), "devdb accepted seqId 1 of alice twice: %v", err)

	// The claim in flight withdraws 900: 100 is all that is available.
	h := b.handler(t, nil)
	require.NoError(t, h.Work(b.ctx, ledgerJob("j1", "l", handlers.LedgerTransferArgs{From: "alice", To: "bob", Amount: 101})))
	require.Equal(t, handlers.LedgerCancelled, b.tx(t, "j1").State)
	require.NoError(t, h.Work(b.ctx, ledgerJob("j2", "l", handlers.LedgerTransferArgs{From: "alice", To: "bob", Amount: 100})))
	tx := b.tx(t, "j2")
	require.Equal(t, handlers.LedgerValid, tx.State)
	require.Equal(t, int64(2), tx.Changes[0].SeqID, "seqId 1 is taken")
	require.Equal(t, int64(900), b.balance(t, "alice"), "a claim in flight does not count in the balance")

	// Its poster never writes it: the sweeper cancels it as abandoned.
	b.settle(t, time.Nanosecond)
	other := b.tx(t, "other")
	require.True(t, other.Abandoned)
	require.Equal(t, handlers.LedgerCancelled, other.State)
	require.Equal(t, map[string]int64{"alice": 900, "bob": 100}, checkLedgerInvariants(t, b.db, map[string]int64{"alice": 1_000, "bob": 0}))
}

// TestLedgerConcurrentHotAccounts posts from many goroutines on a few
// accounts while two sweepers run, then checks every invariant.
func TestLedgerConcurrentHotAccounts(t *testing.T) {
	b := ledgerSetup(t)
	const (
		nAccounts   = 3
		nGoroutines = 8
		perG        = 12
	)
	opening := map[string]int64{}
	ids := make([]string, nAccounts)
	for i := range ids {
		ids[i] = fmt.Sprintf("hot-%d", i)
		opening[ids[i]] = 1_000
	}
	b.open(t, opening)
	h := b.handler(t, nil)
	stop := make(chan struct{})
	var sweeps sync.WaitGroup
	for range 2 {
		s := b.sweeper(t, time.Hour, nil)
		sweeps.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := s.RunOnce(b.ctx)
				require.NoError(t, err)
			}
		})
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for g := range nGoroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range perG {
				from := ids[rng.IntN(nAccounts)]
				to := ids[(slices.Index(ids, from)+1+rng.IntN(nAccounts-1))%nAccounts]
				j := ledgerJob(fmt.Sprintf("g%d-%d", g, i), "l", handlers.LedgerTransferArgs{From: from, To: to, Amount: 1 + rng.Int64N(600)})
				// A posting that kept losing its seqIds to the others
				// returns a retryable error; the queue would run the job
				// again, as here (the job is idempotent).
				var err error
				for range 5 {
					if err = h.Work(b.ctx, j); err == nil || jobs.IsPermanent(err) {
						break
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	sweeps.Wait()
	require.Empty(t, errs)
	b.settle(t, time.Hour)
	checkLedgerInvariants(t, b.db, opening)
	valid, err := b.txs.CountDocuments(b.ctx, bson.D{{Key: "state", Value: handlers.LedgerValid}})
	require.NoError(t, err)
	all, err := b.txs.CountDocuments(b.ctx, bson.D{})
	require.NoError(t, err)
	require.EqualValues(t, nGoroutines*perG, all, "one transaction per job")
	t.Logf("%d postings: %d VALID, %d refused", all, valid, all-valid)
	require.Positive(t, valid)
}

var errLedgerCrash = errors.New("injected crash")

func ledgerCrashAt(step string) (func(context.Context, string) error, *atomic.Bool) {
	var fired atomic.Bool
	return func(_ context.Context, s string) error {
		if s == step && fired.CompareAndSwap(false, true) {
			return fmt.Errorf("%w at %s", errLedgerCrash, step)
		}
		return nil
	}, &fired
}

// TestLedgerCrashAtEveryStep stops a posting after each of its writes and
// a sweep after each of its writes, then runs the job again (a retry: new
// lease) and the sweeper again: the ledger ends as one clean run would.
// "abandoned" lets the sweeper cancel the crashed posting first: the retry
// posts it again under the next id.
func TestLedgerCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	type cse struct{ name, post, sweep string }
	var cases []cse
	for _, s := range ledgerPostSteps {
		cases = append(cases, cse{name: "post/" + s, post: s})
		cases = append(cases, cse{name: "post/" + s + "/abandoned", post: s, sweep: "abandon"})
	}
	for _, s := range []string{"ledger-sweep:seal", "ledger-sweep:cache", "ledger-sweep:commit"} {
		cases = append(cases, cse{name: "sweep/" + s, sweep: s})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := ledgerSetup(t)
			opening := map[string]int64{"alice": 1_000, "bob": 0}
			b.open(t, opening)
			args := handlers.LedgerTransferArgs{From: "alice", To: "bob", Amount: 400}
			if c.post != "" {
				hook, fired := ledgerCrashAt(c.post)
				require.ErrorIs(t, b.handler(t, hook).Work(b.ctx, ledgerJob("j", "lease-1", args)), errLedgerCrash)
				require.True(t, fired.Load())
			} else {
				require.NoError(t, b.handler(t, nil).Work(b.ctx, ledgerJob("j", "lease-1", args)))
			}
			switch {
			case c.sweep == "abandon":
				res, err := b.sweeper(t, time.Nanosecond, nil).RunOnce(b.ctx)
				require.NoError(t, err)
				if c.post != "ledger:post" {
					require.Equal(t, 1, res.Abandoned)
				}
			case c.sweep != "":
				hook, fired := ledgerCrashAt(c.sweep)
				_, err := b.sweeper(t, time.Hour, hook).RunOnce(b.ctx)
				require.ErrorIs(t, err, errLedgerCrash)
				require.True(t, fired.Load())
			}
			require.NoError(t, b.handler(t, nil).Work(b.ctx, ledgerJob("j", "lease-2", args)))
			b.settle(t, time.Nanosecond)
			require.Equal(t, map[string]int64{"alice": 600, "bob": 400}, checkLedgerInvariants(t, b.db, opening))
			n, err := b.txs.CountDocuments(b.ctx, bson.D{{Key: "state", Value: handlers.LedgerValid}})
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "posted exactly once")
			// Once more: nothing changes.
			require.NoError(t, b.handler(t, nil).Work(b.ctx, ledgerJob("j", "lease-3", args)))
			b.settle(t, time.Nanosecond)
			require.Equal(t, map[string]int64{"alice": 600, "bob": 400}, checkLedgerInvariants(t, b.db, opening))
		})
	}
}

// ledgerStall returns a hook that blocks the attempt whose lease is lease
// after step until release is closed, signalling reached.
func ledgerStall(step string) (hook func(context.Context, string) error, reached, release chan struct{}) {
	reached, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	return func(_ context.Context, s string) error {
		if s == step {
			once.Do(func() { close(reached); <-release })
		}
		return nil
	}, reached, release
}

// TestLedgerStalledAttemptPostsOnce: an attempt stalls after each of its
// writes; another attempt of the same job (its lease expired) runs to the
// end, and, in the "abandoned" schedules, the sweeper first cancels the
// stalled posting; then the stalled one resumes. The money moves once.
func TestLedgerStalledAttemptPostsOnce(t *testing.T) {
	t.Parallel()
	for _, step := range ledgerPostSteps {
		for _, abandoned := range []bool{false, true} {
			name := step
			if abandoned {
				name += "/abandoned"
			}
			t.Run(name, func(t *testing.T) {
				b := ledgerSetup(t)
				opening := map[string]int64{"alice": 1_000, "bob": 0}
				b.open(t, opening)
				args := handlers.LedgerTransferArgs{From: "alice", To: "bob", Amount: 700}
				hook, reached, release := ledgerStall(step)
				done := make(chan error, 1)
				go func() { done <- b.handler(t, hook).Work(b.ctx, ledgerJob("j", "lease-1", args)) }()
				<-reached
				if abandoned {
					_, err := b.sweeper(t, time.Nanosecond, nil).RunOnce(b.ctx)
					require.NoError(t, err)
				}
				require.NoError(t, b.handler(t, nil).Work(b.ctx, ledgerJob("j", "lease-2", args)))
				close(release)
				require.NoError(t, <-done)
				b.settle(t, time.Nanosecond)
				require.Equal(t, map[string]int64{"alice": 300, "bob": 700}, checkLedgerInvariants(t, b.db, opening))
				n, err := b.txs.CountDocuments(b.ctx, bson.D{{Key: "state", Value: handlers.LedgerValid}})
				require.NoError(t, err)
				require.EqualValues(t, 1, n, "posted exactly once")
			})
		}
	}
}

// TestLedgerRefusesForeignAccounts: an account another app wrote with a
// field of another type, or no account at all, fails the job permanently
// naming the account and the field, before any write.
func TestLedgerRefusesForeignAccounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		doc  bson.D // the account "bob"; nil: none
		msg  string
	}{
		{"missing", nil, `account "bob": not found in ledgerAccounts`},
		{"no cache", bson.D{{Key: "_id", Value: "bob"}}, `account "bob": cache: missing; want a document`},
		{"null cache", bson.D{{Key: "_id", Value: "bob"}, {Key: "cache", Value: nil}}, `account "bob": cache: null`},
		{"string balance", bson.D{{Key: "_id", Value: "bob"}, {Key: "cache", Value: bson.D{{Key: "balance", Value: "5"}, {Key: "seqId", Value: 0}}}}, `account "bob": cache.balance: string "5"`},
		{"double balance", bson.D{{Key: "_id", Value: "bob"}, {Key: "cache", Value: bson.D{{Key: "balance", Value: 5.5}, {Key: "seqId", Value: 0}}}}, `account "bob": cache.balance: double 5.5`},
		{"missing seqId", bson.D{{Key: "_id", Value: "bob"}, {Key: "cache", Value: bson.D{{Key: "balance", Value: 5}}}}, `account "bob": cache.seqId: missing`},
		{"negative seqId", bson.D{{Key: "_id", Value: "bob"}, {Key: "cache", Value: bson.D{{Key: "balance", Value: 5}, {Key: "seqId", Value: -1}}}}, `account "bob": cache.seqId: int32 -1`},
		{"string opening", bson.D{{Key: "_id", Value: "bob"}, {Key: "opening", Value: "x"}, {Key: "cache", Value: bson.D{{Key: "balance", Value: 5}, {Key: "seqId", Value: 0}}}}, `account "bob": opening: string "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := ledgerSetup(t)
			b.open(t, map[string]int64{"alice": 1_000})
			if tc.doc != nil {
				_, err := b.acct.InsertOne(b.ctx, tc.doc)
				require.NoError(t, err)
			}
			var steps []string
			h := b.handler(t, func(_ context.Context, s string) error { steps = append(steps, s); return nil })
			for _, args := range []handlers.LedgerTransferArgs{{From: "alice", To: "bob", Amount: 10}, {From: "bob", To: "alice", Amount: 10}} {
				err := h.Work(b.ctx, ledgerJob("j", "l", args))
				require.True(t, jobs.IsPermanent(err), "%v", err)
				require.ErrorIs(t, err, handlers.ErrLedgerAccount)
				require.ErrorContains(t, err, tc.msg)
			}
			require.Empty(t, steps, "nothing written")
			for _, c := range []*mongo.Collection{b.txs, b.seq} {
				n, err := c.CountDocuments(b.ctx, bson.D{})
				require.NoError(t, err)
				require.Zero(t, n)
			}
			// The sweeper skips the unusable account and carries on.
			_, err := b.sweeper(t, time.Hour, nil).RunOnce(b.ctx)
			require.NoError(t, err)
		})
	}
}

func TestLedgerArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args  handlers.LedgerTransferArgs
		field string
	}{
		{handlers.LedgerTransferArgs{To: "b", Amount: 1}, "from"},
		{handlers.LedgerTransferArgs{From: "a", Amount: 1}, "to"},
		{handlers.LedgerTransferArgs{From: "a", To: "a", Amount: 1}, "to"},
		{handlers.LedgerTransferArgs{From: "a", To: "b"}, "amount"},
		{handlers.LedgerTransferArgs{From: "a", To: "b", Amount: -3}, "amount"},
		{handlers.LedgerTransferArgs{TxID: "x~repost-2", From: "a", To: "b", Amount: 3}, "txId"},
	} {
		err := tc.args.Validate()
		var ae *jobs.ArgsError
		require.ErrorAs(t, err, &ae, "%+v", tc.args)
		require.Equal(t, tc.field, ae.Field)
	}
	require.NoError(t, handlers.LedgerTransferArgs{From: "a", To: "b", Amount: 3}.Validate())
}

// TestLedgerCancel: a transaction no later change depends on is cancelled
// and never counts; one with a later change on either account, or one a
// sweeper has sealed, gets a compensating transaction instead, at most
// once.
func TestLedgerCancel(t *testing.T) {
	t.Parallel()
	post := func(t *testing.T, b *ledgerBundle, id, from, to string, amount int64) {
		t.Helper()
		require.NoError(t, b.handler(t, nil).Work(b.ctx, ledgerJob(id, "l", handlers.LedgerTransferArgs{From: from, To: to, Amount: amount})))
		require.Equal(t, handlers.LedgerValid, b.tx(t, id).State)
	}
	runJobs := func(t *testing.T, b *ledgerBundle) {
		t.Helper()
		h := b.handler(t, nil)
		for {
			j, err := store.Of(b.q).Claim(b.ctx, store.ClaimParams{Owner: "t", Queues: []string{jobs.DefaultQueue}, Kinds: []string{handlers.LedgerTransferKind}, Lease: time.Minute})
			require.NoError(t, err)
			if j == nil {
				return
			}
			require.NoError(t, h.Work(b.ctx, j))
			require.NoError(t, store.Of(b.q).Complete(b.ctx, store.LeaseOf(j)))
		}
	}
	opening := map[string]int64{"alice": 1_000, "bob": 0, "carol": 0}

	t.Run("last change: cancelled", func(t *testing.T) {
		b := ledgerSetup(t)
		b.open(t, opening)
		post(t, b, "t1", "alice", "bob", 300)
		out, err := handlers.CancelLedgerTx(b.ctx, b.db, b.q, "t1")
		require.NoError(t, err)
		require.True(t, out.Cancelled)
		require.Equal(t, handlers.LedgerCancelled, b.tx(t, "t1").State)
		require.Equal(t, int64(1_000), b.balance(t, "alice"))
		out, err = handlers.CancelLedgerTx(b.ctx, b.db, b.q, "t1")
		require.NoError(t, err)
		require.True(t, out.Cancelled, "asking again changes nothing")
		// Later postings come after the cancel marker.
		post(t, b, "t2", "alice", "carol", 1_000)
		b.settle(t, time.Hour)
		require.Equal(t, map[string]int64{"alice": 0, "bob": 0, "carol": 1_000}, checkLedgerInvariants(t, b.db, opening))
		_, err = handlers.CancelLedgerTx(b.ctx, b.db, b.q, "nope")
		require.ErrorIs(t, err, handlers.ErrTransactionNotFound)
	})
	t.Run("a later change depends on it: compensated", func(t *testing.T) {
		b := ledgerSetup(t)
		b.open(t, opening)
		post(t, b, "t1", "alice", "bob", 300)
		post(t, b, "t2", "alice", "carol", 100) // counted t1's withdrawal
		out, err := handlers.CancelLedgerTx(b.ctx, b.db, b.q, "t1")
		require.NoError(t, err)
		require.False(t, out.Cancelled)
		require.Equal(t, handlers.CompensationID("t1"), out.Compensation)
		require.Contains(t, out.Why, `account "alice" has a later change`)
		again, err := handlers.CancelLedgerTx(b.ctx, b.db, b.q, "t1")
		require.NoError(t, err)
		require.Equal(t, out.JobID, again.JobID, "compensated at most once")
		runJobs(t, b)
		comp := b.tx(t, handlers.CompensationID("t1"))
		require.Equal(t, handlers.LedgerValid, comp.State)
		require.Equal(t, "bob", comp.Changes[0].Account)
		b.settle(t, time.Hour)
		require.Equal(t, map[string]int64{"alice": 900, "bob": 0, "carol": 100}, checkLedgerInvariants(t, b.db, opening))
	})
	t.Run("an abandoned posting: its re-post is cancelled", func(t *testing.T) {
		b := ledgerSetup(t)
		b.open(t, opening)
		// t1's first poster claimed alice's seqId 1 and stalled: a sweeper
		// abandons that posting, and t1's job posts it again as
		// t1~repost-2, which moves the money.
		_, err := b.seq.InsertOne(b.ctx, bson.D{
			{Key: "_id", Value: `"alice"#1`}, {Key: "account", Value: "alice"}, {Key: "seqId", Value: int64(1)},
			{Key: "tx", Value: "t1"}, {Key: "try", Value: "stalled"}, {Key: "kind", Value: "change"},
			{Key: "type", Value: "withdraw"}, {Key: "value", Value: int64(300)}, {Key: "at", Value: time.Now()},
		})
		require.NoError(t, err)
		_, err = handlers.CancelLedgerTx(b.ctx, b.db, b.q, "t1")
		require.ErrorIs(t, err, handlers.ErrTransactionNotFound, "no posting of t1 yet")
		b.settle(t, time.Nanosecond)
		require.True(t, b.tx(t, "t1").Abandoned)
		_, err = handlers.CancelLedgerTx(b.ctx, b.db, b.q, "t1")
		require.ErrorIs(t, err, handlers.ErrTransactionNotFound, "abandoned, not posted again yet: nothing to cancel")
		require.ErrorContains(t, err, "cancel its job")
		require.NoError(t, b.handler(t, nil).Work(b.ctx, ledgerJob("t1", "l", handlers.LedgerTransferArgs{From: "alice", To: "bob", Amount: 300})))
		require.Equal(t, handlers.LedgerValid, b.tx(t, "t1~repost-2").State)
		require.Equal(t, int64(700), b.balance(t, "alice"))

		out, err := handlers.CancelLedgerTx(b.ctx, b.db, b.q, "t1")
		require.NoError(t, err)
		require.True(t, out.Cancelled)
		require.Equal(t, handlers.LedgerCancelled, b.tx(t, "t1~repost-2").State, "the posting that moved the money is the one cancelled")
		require.Equal(t, int64(1_000), b.balance(t, "alice"))
		again, err := handlers.CancelLedgerTx(b.ctx, b.db, b.q, "t1~repost-2")
		require.NoError(t, err)
		require.True(t, again.Cancelled)
		b.settle(t, time.Hour)
		require.Equal(t, map[string]int64{"alice": 1_000, "bob": 0, "carol": 0}, checkLedgerInvariants(t, b.db, opening))
	})
	t.Run("sealed by a sweeper: compensated", func(t *testing.T) {
		b := ledgerSetup(t)
		b.open(t, opening)
		post(t, b, "t1", "alice", "bob", 300)
		b.settle(t, time.Hour)
		out, err := handlers.CancelLedgerTx(b.ctx, b.db, b.q, "t1")
		require.NoError(t, err)
		require.False(t, out.Cancelled)
		require.Contains(t, out.Why, "sweeper")
		runJobs(t, b)
		b.settle(t, time.Hour)
		require.Equal(t, map[string]int64{"alice": 1_000, "bob": 0, "carol": 0}, checkLedgerInvariants(t, b.db, opening))
	})
	t.Run("a cancel under way: its deposit is not available", func(t *testing.T) {
		b := ledgerSetup(t)
		b.open(t, opening)
		post(t, b, "t1", "alice", "bob", 300)
		// A cancel that claimed bob's next seqId and stopped: bob's 300
		// may still go away, so bob cannot spend it until a sweeper seals
		// t1.
		_, err := b.seq.InsertOne(b.ctx, bson.D{
			{Key: "_id", Value: `"bob"#2`}, {Key: "account", Value: "bob"}, {Key: "seqId", Value: int64(2)},
			{Key: "tx", Value: "t1"}, {Key: "try", Value: b.tx(t, "t1").Try}, {Key: "kind", Value: "cancel"},
		})
		require.NoError(t, err)
		require.NoError(t, b.handler(t, nil).Work(b.ctx, ledgerJob("t2", "l", handlers.LedgerTransferArgs{From: "bob", To: "carol", Amount: 100})))
		require.Equal(t, handlers.LedgerCancelled, b.tx(t, "t2").State)
		require.Contains(t, b.tx(t, "t2").Reason, "insufficient funds")
		b.settle(t, time.Hour) // seals t1
		require.NoError(t, b.handler(t, nil).Work(b.ctx, ledgerJob("t3", "l", handlers.LedgerTransferArgs{From: "bob", To: "carol", Amount: 100})))
		require.Equal(t, handlers.LedgerValid, b.tx(t, "t3").State)
		require.Equal(t, int64(3), b.tx(t, "t3").Changes[0].SeqID, "after the marker")
		b.settle(t, time.Hour)
		require.Equal(t, map[string]int64{"alice": 700, "bob": 200, "carol": 100}, checkLedgerInvariants(t, b.db, opening))
	})
}

// TestLedgerStalledSweeperCountsOnce: a sweeper stalls after each of its
// writes while another sweeps everything and more is posted; the stalled
// one resumes with what it read before. Every change is counted once.
func TestLedgerStalledSweeperCountsOnce(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"ledger-sweep:seal", "ledger-sweep:cache", "ledger-sweep:commit", "ledger-sweep:abandon"} {
		t.Run(step, func(t *testing.T) {
			b := ledgerSetup(t)
			opening := map[string]int64{"alice": 1_000, "bob": 0}
			b.open(t, opening)
			h := b.handler(t, nil)
			if step == "ledger-sweep:abandon" {
				_, err := b.seq.InsertOne(b.ctx, bson.D{
					{Key: "_id", Value: `"alice"#1`}, {Key: "account", Value: "alice"}, {Key: "seqId", Value: int64(1)},
					{Key: "tx", Value: "lost"}, {Key: "try", Value: "t"}, {Key: "kind", Value: "change"},
					{Key: "type", Value: "withdraw"}, {Key: "value", Value: int64(10)}, {Key: "at", Value: time.Now()},
				})
				require.NoError(t, err)
			}
			require.NoError(t, h.Work(b.ctx, ledgerJob("t1", "l", handlers.LedgerTransferArgs{From: "alice", To: "bob", Amount: 100})))
			hook, reached, release := ledgerStall(step)
			done := make(chan error, 1)
			go func() {
				_, err := b.sweeper(t, time.Nanosecond, hook).RunOnce(b.ctx)
				done <- err
			}()
			<-reached
			b.settle(t, time.Nanosecond)
			require.NoError(t, h.Work(b.ctx, ledgerJob("t2", "l", handlers.LedgerTransferArgs{From: "alice", To: "bob", Amount: 50})))
			close(release)
			require.NoError(t, <-done)
			b.settle(t, time.Nanosecond)
			require.Equal(t, map[string]int64{"alice": 850, "bob": 150}, checkLedgerInvariants(t, b.db, opening))
		})
	}
}

// TestLedgerCommandsPerTransfer counts the commands one uncontended
// posting sends, and one two-phase transfer's handler, on one database:
// the figure that carries over to real MongoDB (devdb's speed does not).
func TestLedgerCommandsPerTransfer(t *testing.T) {
	b := ledgerSetup(t)
	var n atomic.Int64
	mon := &event.CommandMonitor{Started: func(context.Context, *event.CommandStartedEvent) { n.Add(1) }}
	client, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(mon))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	db := client.Database(b.db.Name())
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	reg := jobs.NewRegistry()
	require.NoError(t, handlers.Register(reg, handlers.Deps{DB: db, Queue: q}))
	b.open(t, map[string]int64{"alice": 1_000_000, "bob": 0})
	_, err = b.db.Collection(handlers.AccountsCollection).InsertMany(b.ctx, []any{
		handlers.Account{ID: "alice", Balance: 1_000_000, PendingTransactions: []string{}},
		handlers.Account{ID: "bob", PendingTransactions: []string{}},
	})
	require.NoError(t, err)

	ledger, _, _ := reg.Lookup(handlers.LedgerTransferKind)
	const rounds = 10
	n.Store(0)
	for i := range rounds {
		require.NoError(t, ledger.Work(b.ctx, ledgerJob(fmt.Sprintf("l%d", i), "l", handlers.LedgerTransferArgs{From: "alice", To: "bob", Amount: 1})))
	}
	perPosting := float64(n.Load()) / rounds
	s, err := handlers.NewLedgerSweeper(db, handlers.LedgerSweeperConfig{Threshold: time.Hour})
	require.NoError(t, err)
	n.Store(0)
	_, err = s.RunOnce(b.ctx)
	require.NoError(t, err)
	perSweep := float64(n.Load()) / rounds

	transfer, _, _ := reg.Lookup(handlers.TransferKind)
	n.Store(0)
	for i := range rounds {
		txID := b.insertTransfer(t, db, i)
		require.NoError(t, transfer.Work(b.ctx, transferJob(fmt.Sprintf("t%d", i), txID)))
	}
	perTransfer := float64(n.Load()) / rounds
	t.Logf("commands per transfer: ledger posting %.1f (+%.1f in the sweep that commits and caches it); two-phase transfer handler %.1f (+1 to write its transaction)",
		perPosting, perSweep, perTransfer)
	require.LessOrEqual(t, perPosting, 12.0)
}

func (b *ledgerBundle) insertTransfer(t *testing.T, db *mongo.Database, i int) string {
	t.Helper()
	id := fmt.Sprintf("tx-%d", i)
	_, err := b.db.Collection(handlers.TransactionsCollection).InsertOne(b.ctx, handlers.Transaction{
		ID: id, Source: "alice", Destination: "bob", Value: 1, State: handlers.TxInitial, LastModified: time.Now(),
	})
	require.NoError(t, err)
	return id
}

// TestLedgerSweeperSettlesUnderShortLivedLeaders: the leader that runs the
// sweeper is killed every few round trips (as the chaos run's killer does
// on a loaded machine, where each command waits its turn at the server):
// each pass gets a budget of commands, then its context is cancelled. The
// account every transfer pays into comes last in the accounts' order, so a
// pass that always starts from the first account and commits only at its
// end never reaches it, and nothing is ever committed. Passes that commit
// what earlier passes folded first, and fold the accounts whose next claim
// has waited longest first, settle it.
func TestLedgerSweeperSettlesUnderShortLivedLeaders(t *testing.T) {
	b := ledgerSetup(t)
	opening := map[string]int64{"zz-sink": 0}
	var sources []string
	for i := range 7 {
		id := fmt.Sprintf("a%d", i)
		sources = append(sources, id)
		opening[id] = 1_000
	}
	// Opened in id order, so that the sink is the last account listed.
	for _, id := range append(sources, "zz-sink") {
		require.NoError(t, handlers.OpenLedgerAccount(b.ctx, b.db, id, opening[id]))
	}
	h := b.handler(t, nil)
	for i, from := range sources {
		for j := range 2 {
			require.NoError(t, h.Work(b.ctx, ledgerJob(fmt.Sprintf("t%d-%d", i, j), "l", handlers.LedgerTransferArgs{From: from, To: "zz-sink", Amount: 10})))
		}
	}

	// A sweeper whose pass is cancelled when it starts its budget-th command.
	const budget = 10
	var n atomic.Int64
	var kill atomic.Pointer[context.CancelFunc]
	mon := &event.CommandMonitor{Started: func(context.Context, *event.CommandStartedEvent) {
		if n.Add(1) == budget {
			if c := kill.Load(); c != nil {
				(*c)()
			}
		}
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(mon))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	s, err := handlers.NewLedgerSweeper(client.Database(b.db.Name()), handlers.LedgerSweeperConfig{Threshold: time.Hour, Logger: b.log})
	require.NoError(t, err)

	settled := func() bool {
		uncommitted, err := b.txs.CountDocuments(b.ctx, bson.D{{Key: "proc", Value: handlers.LedgerUncommitted}})
		require.NoError(t, err)
		var sink struct {
			Cache struct {
				SeqID int64 `bson:"seqId"`
			} `bson:"cache"`
		}
		require.NoError(t, b.acct.FindOne(b.ctx, bson.D{{Key: "_id", Value: "zz-sink"}}).Decode(&sink))
		return uncommitted == 0 && sink.Cache.SeqID == 14
	}
	const passes = 100
	for pass := 0; pass < passes && !settled(); pass++ {
		ctx, cancel := context.WithCancel(b.ctx)
		n.Store(0)
		kill.Store(&cancel)
		_, _ = s.RunOnce(ctx) // killed part-way, or done
		kill.Store(nil)
		cancel()
	}
	require.True(t, settled(), "the ledger did not settle in %d passes of %d commands each", passes, budget)
	b.settle(t, time.Hour)
	checkLedgerInvariants(t, b.db, opening)
}
