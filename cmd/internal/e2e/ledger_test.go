package e2e

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestLedgerWorkersKilledAndStalled: three worker processes post ledger
// transfers among three hot accounts while one of them is SIGKILLed every
// few jobs (and replaced) and another is SIGSTOPped past its lease; the
// workers' leader runs the ledger sweeper every second, cancelling as
// abandoned a posting whose claims waited a second. Afterwards every
// transfer was posted at most once (exactly once or refused), and the
// ledger's invariants hold from the database.
func TestLedgerWorkersKilledAndStalled(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	ctx := context.Background()
	must(t, "set up the handlers", func() error { return handlers.Setup(ctx, db) })
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	accounts := []string{"hot-0", "hot-1", "hot-2"}
	opening := map[string]int64{}
	for _, a := range accounts {
		opening[a] = 5_000
		must(t, "open account "+a, func() error { return handlers.OpenLedgerAccount(ctx, db, a, 5_000) })
	}
	args := append(slices.Clone(fastWorker), "--ledger-sweep-schedule", "@every 1s", "--ledger-abandon-after", "1s")
	workers := make([]*proc, 3)
	for i := range workers {
		workers[i] = startWorker(t, db, fmt.Sprintf("worker-%d", i), args...)
	}
	const transfers = 48
	var ids []string
	kills, stalls := 0, 0
	for i := range transfers {
		from := rng.IntN(len(accounts))
		to := (from + 1 + rng.IntN(len(accounts)-1)) % len(accounts)
		res := enqueue(t, q, handlers.LedgerTransferKind, handlers.LedgerTransferArgs{
			From: accounts[from], To: accounts[to], Amount: 1 + rng.Int64N(1_500),
		}, queue.InsertOpts{})
		ids = append(ids, res.ID)
		if i%8 == 7 {
			k := rng.IntN(len(workers))
			workers[k].signal(syscall.SIGKILL)
			workers[k].wait(10 * time.Second)
			workers[k] = startWorker(t, db, fmt.Sprintf("worker-%d-%d", k, i), args...)
			kills++
		}
		if i == transfers/2 {
			w := workers[rng.IntN(len(workers))]
			w.signal(syscall.SIGSTOP)
			time.Sleep(4 * time.Second) // twice the lease: its jobs go to others
			w.signal(syscall.SIGCONT)
			stalls++
		}
		time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
	}
	for _, id := range ids {
		waitJob(t, q, id, 3*time.Minute, "succeeded", inState(jobs.StateSucceeded))
	}
	// The leader's sweeper commits everything.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := db.Collection(handlers.LedgerCollection).CountDocuments(ctx, bson.D{{Key: "proc", Value: handlers.LedgerUncommitted}})
		assert.NoError(c, err)
		assert.Zero(c, n, "transactions left uncommitted")
	}, time.Minute, 50*time.Millisecond)
	for _, w := range workers {
		w.signal(syscall.SIGTERM)
		require.Equal(t, 0, w.wait(time.Minute))
	}
	valid := checkLedger(t, db, opening, ids)
	abandoned := count(t, db.Collection(handlers.LedgerCollection), bson.D{{Key: "abandoned", Value: true}})
	t.Logf("%d transfers: %d posted, %d refused, %d postings abandoned and re-posted; %d SIGKILLs, %d SIGSTOP past the lease",
		transfers, valid, transfers-valid, abandoned, kills, stalls)
}

// checkLedger checks the ledger from the database: each job's transfer is
// posted at most once and has one outcome; the VALID changes sum to zero,
// no two share an account's seqId, no balance is negative at any seqId;
// every change's cacheBal and every cache equal recomputation, and
// VerifyLedger finds no drift. It returns how many transfers were posted.
func checkLedger(t *testing.T, db *mongo.Database, opening map[string]int64, jobIDs []string) int {
	t.Helper()
	ctx := context.Background()
	var txs []handlers.LedgerTx
	findAll(t, db.Collection(handlers.LedgerCollection), bson.D{}, &txs)
	outcomes := map[string]int{}
	posted := map[string]int{}
	type change struct {
		seq, delta int64
		cacheBal   *int64
	}
	byAccount := map[string][]change{}
	var sum int64
	for _, tx := range txs {
		require.Equal(t, handlers.LedgerCommitted, tx.Proc, "transaction %s", tx.ID)
		if !tx.Abandoned {
			outcomes[tx.Transfer]++
		}
		if tx.State != handlers.LedgerValid {
			require.NotEmpty(t, tx.Reason, "transaction %s", tx.ID)
			continue
		}
		posted[tx.Transfer]++
		for _, c := range tx.Changes {
			d := c.Value
			if c.Type == handlers.LedgerWithdraw {
				d = -d
			}
			sum += d
			byAccount[c.Account] = append(byAccount[c.Account], change{c.SeqID, d, c.CacheBal})
		}
	}
	require.Zero(t, sum, "money was created or destroyed")
	for _, id := range jobIDs {
		require.Equal(t, 1, outcomes[id], "transfer %s: outcomes", id)
		require.LessOrEqual(t, posted[id], 1, "transfer %s posted twice", id)
	}
	for id, open := range opening {
		cs := byAccount[id]
		slices.SortFunc(cs, func(a, b change) int { return cmp.Compare(a.seq, b.seq) })
		bal := open
		for i, c := range cs {
			if i > 0 {
				require.NotEqual(t, cs[i-1].seq, c.seq, "account %s: seqId %d held twice", id, c.seq)
			}
			bal += c.delta
			require.GreaterOrEqual(t, bal, int64(0), "account %s overdrawn at seqId %d", id, c.seq)
			require.NotNil(t, c.cacheBal, "account %s seqId %d never folded", id, c.seq)
			require.Equal(t, bal, *c.cacheBal, "account %s seqId %d", id, c.seq)
		}
		var got int64
		must(t, "read the balance of "+id, func() (err error) { got, err = handlers.LedgerBalance(ctx, db, id); return err })
		require.Equal(t, bal, got, "account %s", id)
	}
	var drift []handlers.LedgerDrift
	must(t, "verify the ledger", func() (err error) { drift, err = handlers.VerifyLedger(ctx, db); return err })
	require.Empty(t, drift)
	n := 0
	for _, c := range posted {
		n += c
	}
	return n
}
