package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"text/tabwriter"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Defaults of the ledger run.
const (
	// DefaultLedgerTransfers is how many transfers each shape runs.
	DefaultLedgerTransfers = 48
	// DefaultLedgerHot and DefaultLedgerCold are the accounts of the hot
	// shape (every transfer contends for them) and of the cold one.
	DefaultLedgerHot, DefaultLedgerCold = 2, 32
)

// ledgerOpening is every account's opening balance: enough that no
// transfer of the run is refused.
const ledgerOpening = 1_000_000

// LedgerBench is the ledger run: the same transfers, between the same
// accounts, from the same worker processes, posted to the ledger
// (ledger-transfer) and as two-phase transfers (transfer), on few hot
// accounts and on many cold ones.
type LedgerBench struct {
	Transfers   int `json:"transfers"`
	Procs       int `json:"procs"`
	Concurrency int `json:"concurrency"`
	// Rows are ledger-hot, 2pc-hot, ledger-cold, 2pc-cold.
	Rows []*LedgerRow `json:"rows"`
	// HotRate and ColdRate are the ledger's transfers/s as a ratio of the
	// two-phase transfer's; HotCommands and ColdCommands its commands per
	// transfer, its sweep's included, as a ratio of the two-phase
	// transfer's.
	HotRate, ColdRate, HotCommands, ColdCommands float64 `json:",omitempty"`
}

// LedgerRow is one pattern on one shape.
type LedgerRow struct {
	Name     string `json:"name"`
	Pattern  string `json:"pattern"` // "ledger" or "2pc"
	Accounts int    `json:"accounts"`
	// Seconds is from the workers' start until every job completed.
	Seconds         float64 `json:"seconds"`
	TransfersPerSec float64 `json:"transfersPerSec"`
	// Commands counts every command the worker processes sent after
	// setting up until they stopped: claims, handlers, completions, and
	// the maintenance of the default schedules. The two-phase transfer's
	// enqueue also writes its transaction: +1 per transfer, not counted.
	Commands            int64            `json:"commands"`
	CommandsPerTransfer float64          `json:"commandsPerTransfer"`
	ByName              map[string]int64 `json:"byName"`
	// SweepCommands are what the ledger sweeper sent to commit and cache
	// the postings afterwards (the ledger only: the workers' sweeper is
	// kept out of the way), in SweepSeconds; its passes that found nothing
	// to do are not counted. TotalPerTransfer is CommandsPerTransfer plus
	// SweepCommands per transfer.
	SweepCommands    int64   `json:"sweepCommands,omitempty"`
	SweepSeconds     float64 `json:"sweepSeconds,omitempty"`
	TotalPerTransfer float64 `json:"totalPerTransfer"`
	// Attempts is how many attempts the jobs took in all (a two-phase
	// transfer that finds its account locked retries with backoff; a
	// posting that lost a seqId race tries again within its attempt).
	Attempts int `json:"attempts"`
}

// ledger runs the four rows.
func (b *bencher) ledger(ctx context.Context) (*LedgerBench, error) {
	o := b.o
	if o.LedgerTransfers == 0 {
		o.LedgerTransfers = min(max(o.Jobs/4, 8), DefaultLedgerTransfers)
	}
	if o.LedgerHot == 0 {
		o.LedgerHot = DefaultLedgerHot
	}
	if o.LedgerCold == 0 {
		o.LedgerCold = DefaultLedgerCold
	}
	if o.LedgerConcurrency == 0 {
		o.LedgerConcurrency = 4
	}
	if o.LedgerTransfers < 1 || o.LedgerConcurrency < 1 {
		return nil, fmt.Errorf("the ledger run's transfers (%d) and concurrency (%d) must be positive", o.LedgerTransfers, o.LedgerConcurrency)
	}
	if o.LedgerHot < 2 || o.LedgerCold < 2 {
		return nil, fmt.Errorf("the ledger run needs at least 2 hot and 2 cold accounts, not %d and %d", o.LedgerHot, o.LedgerCold)
	}
	n := o.LedgerTransfers
	res := &LedgerBench{Transfers: n, Procs: o.Procs, Concurrency: o.LedgerConcurrency}
	for _, shape := range []struct {
		name     string
		accounts int
	}{{"hot", o.LedgerHot}, {"cold", o.LedgerCold}} {
		for _, pattern := range []string{"ledger", "2pc"} {
			row, err := b.ledgerRow(ctx, pattern, shape.name, shape.accounts, n, o.LedgerConcurrency)
			if err != nil {
				return nil, fmt.Errorf("%s-%s: %w", pattern, shape.name, err)
			}
			res.Rows = append(res.Rows, row)
		}
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	res.HotRate = ratio(res.Rows[0].TransfersPerSec, res.Rows[1].TransfersPerSec)
	res.HotCommands = ratio(res.Rows[0].TotalPerTransfer, res.Rows[1].TotalPerTransfer)
	res.ColdRate = ratio(res.Rows[2].TransfersPerSec, res.Rows[3].TransfersPerSec)
	res.ColdCommands = ratio(res.Rows[2].TotalPerTransfer, res.Rows[3].TotalPerTransfer)
	return res, nil
}

// ledgerRow enqueues n transfers of 1 cent between accounts accounts
// (drawn with a fixed seed, so every row runs the same ones), runs the
// worker processes until all are done (and, for the ledger, settled), then
// checks the pattern's invariants.
func (b *bencher) ledgerRow(ctx context.Context, pattern, shape string, accounts, n, concurrency int) (*LedgerRow, error) {
	name := pattern + "-" + shape
	db, q, err := b.freshDB(ctx, name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Drop(context.Background()) }()
	if err := handlers.Setup(ctx, db); err != nil {
		return nil, err
	}
	ids := make([]string, accounts)
	for i := range ids {
		ids[i] = fmt.Sprintf("acct-%02d", i)
		if pattern == "ledger" {
			err = handlers.OpenLedgerAccount(ctx, db, ids[i], ledgerOpening)
		} else {
			_, err = db.Collection(handlers.AccountsCollection).InsertOne(ctx,
				handlers.Account{ID: ids[i], Balance: ledgerOpening, PendingTransactions: []string{}})
		}
		if err != nil {
			return nil, err
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var ins []queue.Insert
	for range n {
		from := rng.IntN(accounts)
		to := (from + 1 + rng.IntN(accounts-1)) % accounts
		if pattern == "ledger" {
			ins = append(ins, queue.Insert{Kind: handlers.LedgerTransferKind, Args: handlers.LedgerTransferArgs{From: ids[from], To: ids[to], Amount: 1}})
			continue
		}
		if _, _, err := handlers.EnqueueTransfer(ctx, db, q, ids[from], ids[to], 1); err != nil {
			return nil, err
		}
	}
	if len(ins) > 0 {
		if _, err := q.EnqueueMany(ctx, ins); err != nil {
			return nil, err
		}
	}
	var ps []*proc
	for range b.o.Procs {
		p, err := startWorker(workerOpts{uri: b.uri, db: db.Name(), concurrency: concurrency, claimBatch: 1,
			extra: []string{"--ledger-sweep-schedule", "@every 1h"}}, b.log)
		if err != nil {
			stopAll(ps)
			return nil, err
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		if err := p.waitReady(time.Minute); err != nil {
			stopAll(ps)
			return nil, err
		}
	}
	start := time.Now()
	deadline := start.Add(10 * time.Minute)
	for completed(ps) < int64(n) {
		if time.Now().After(deadline) {
			stopAll(ps)
			return nil, fmt.Errorf("%d of %d transfers done after 10 min", completed(ps), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	row := &LedgerRow{Name: name, Pattern: pattern, Accounts: accounts, Seconds: time.Since(start).Seconds()}
	us, err := stopAll(ps)
	if err != nil {
		return nil, err
	}
	row.TransfersPerSec = float64(n) / row.Seconds
	row.ByName = map[string]int64{}
	for _, u := range us {
		row.Commands += u.Commands
		for k, v := range u.ByName {
			row.ByName[k] += v
		}
	}
	row.CommandsPerTransfer = float64(row.Commands) / float64(n)
	if pattern == "ledger" {
		if err := b.sweepLedger(ctx, db.Name(), row); err != nil {
			return nil, err
		}
	}
	row.TotalPerTransfer = row.CommandsPerTransfer + float64(row.SweepCommands)/float64(n)
	if row.Attempts, err = ledgerAttempts(ctx, db, n); err != nil {
		return nil, err
	}
	if pattern == "ledger" {
		err = checkLedgerRun(ctx, db, n)
	} else {
		err = checkTransferRun(ctx, db, n, int64(accounts)*ledgerOpening)
	}
	return row, err
}

// sweepLedger commits and caches the postings with a ledger sweeper on a
// client of its own whose commands it counts, pass after pass until one
// finds nothing to do (that one is not counted).
func (b *bencher) sweepLedger(ctx context.Context, db string, row *LedgerRow) error {
	mon := newMonitor(queue.DefaultCollection)
	c, err := mongo.Connect(options.Client().ApplyURI(b.uri).SetMonitor(mon.commandMonitor()))
	if err != nil {
		return err
	}
	defer func() { _ = c.Disconnect(context.Background()) }()
	s, err := handlers.NewLedgerSweeper(c.Database(db), handlers.LedgerSweeperConfig{Threshold: time.Hour})
	if err != nil {
		return err
	}
	start := time.Now()
	for pass := 0; ; pass++ {
		if pass == 100 {
			return fmt.Errorf("the ledger was not settled after %d sweeps", pass)
		}
		before := mon.commands.Load()
		res, err := s.RunOnce(ctx)
		if err != nil {
			return err
		}
		if res.Folded == 0 && res.Committed == 0 && res.Abandoned == 0 {
			if res.Waiting > 0 {
				return fmt.Errorf("%d postings in flight after every job finished", res.Waiting)
			}
			break
		}
		row.SweepCommands += mon.commands.Load() - before
		row.SweepSeconds += time.Since(start).Seconds()
		start = time.Now()
	}
	return nil
}

// ledgerAttempts sums the attempts of the run's jobs, each of which must
// have succeeded.
func ledgerAttempts(ctx context.Context, db *mongo.Database, n int) (int, error) {
	cur, err := db.Collection(queue.DefaultCollection).Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "state", Value: 1}, {Key: "attempt", Value: 1}}))
	if err != nil {
		return 0, err
	}
	var js []jobs.Job
	if err := cur.All(ctx, &js); err != nil {
		return 0, err
	}
	attempts := 0
	for _, j := range js {
		if j.State != jobs.StateSucceeded {
			return 0, fmt.Errorf("job %s is %s", j.ID, j.State)
		}
		attempts += j.Attempt
	}
	if len(js) != n {
		return 0, fmt.Errorf("%d jobs, want %d", len(js), n)
	}
	return attempts, nil
}

// checkLedgerRun: n transactions, all VALID and COMMITTED, and every
// account's cache equal to its recomputation.
func checkLedgerRun(ctx context.Context, db *mongo.Database, n int) error {
	valid, err := db.Collection(handlers.LedgerCollection).CountDocuments(ctx,
		bson.D{{Key: "state", Value: handlers.LedgerValid}, {Key: "proc", Value: handlers.LedgerCommitted}})
	if err != nil {
		return err
	}
	if valid != int64(n) {
		return fmt.Errorf("%d ledger transactions VALID and COMMITTED, want %d", valid, n)
	}
	drift, err := handlers.VerifyLedger(ctx, db)
	if err != nil {
		return err
	}
	if len(drift) > 0 {
		return fmt.Errorf("ledger caches drifted: %v", drift)
	}
	return nil
}

// checkTransferRun: n transactions done, no account with a pending one,
// and the money all there.
func checkTransferRun(ctx context.Context, db *mongo.Database, n int, total int64) error {
	done, err := db.Collection(handlers.TransactionsCollection).CountDocuments(ctx, bson.D{{Key: "state", Value: handlers.TxDone}})
	if err != nil {
		return err
	}
	if done != int64(n) {
		return fmt.Errorf("%d transfers done, want %d", done, n)
	}
	cur, err := db.Collection(handlers.AccountsCollection).Find(ctx, bson.D{})
	if err != nil {
		return err
	}
	var accts []handlers.Account
	if err := cur.All(ctx, &accts); err != nil {
		return err
	}
	var sum int64
	for _, a := range accts {
		sum += a.Balance
		if len(a.PendingTransactions) > 0 {
			return fmt.Errorf("account %s still has pending transactions %v", a.ID, a.PendingTransactions)
		}
	}
	if sum != total {
		return fmt.Errorf("the accounts hold %d cents, want %d", sum, total)
	}
	return nil
}

func (l *LedgerBench) writeTable(w io.Writer) {
	fmt.Fprintf(w, "ledger vs two-phase transfer: %d transfers each, %d processes x %d, 1 cent each (commands include claims, completions and maintenance; the two-phase enqueue writes +1 more)\n",
		l.Transfers, l.Procs, l.Concurrency)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\taccounts\ttransfers/s\tseconds\tattempts\tcmds/transfer\t+ sweep\t= total\t")
	for _, r := range l.Rows {
		sweep := "-"
		if r.Pattern == "ledger" {
			sweep = fmt.Sprintf("%.1f (%.1fs)", float64(r.SweepCommands)/float64(l.Transfers), r.SweepSeconds)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1fs\t%d\t%.1f\t%s\t%.1f\t\n", r.Name, r.Accounts, r.TransfersPerSec, r.Seconds, r.Attempts, r.CommandsPerTransfer, sweep, r.TotalPerTransfer)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "ledger/2pc: hot %.2fx the transfers/s, %.2fx the commands; cold %.2fx the transfers/s, %.2fx the commands\n",
		l.HotRate, l.HotCommands, l.ColdRate, l.ColdCommands)
}
