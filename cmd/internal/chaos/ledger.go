//go:build linux

package chaos

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The ledger's share of the run: ledger-transfer jobs among a few hot
// accounts with little money (so that postings race for the same seqIds
// and some are refused as overdrafts) and more cold ones; some ask for more
// than the whole ledger holds and must be refused, some name an account
// that does not exist and must end dead; a few posted transactions are
// cancelled with `docketctl ledger cancel` while the sweeper may be folding
// them. After the drain every invariant of the ledger is checked from the
// database.

const (
	ledgerHotOpening  = 20_000
	ledgerColdOpening = 100_000
	// ledgerGhost is an account nobody opened.
	ledgerGhost = "ledger-ghost"
)

// ledgerLoad is what the run did to the ledger.
type ledgerLoad struct {
	hot, cold []string
	opening   map[string]int64
	total     int64 // money in the ledger: every opening balance
	next      int   // numbers the transfers given a txId

	// cancelled and compensated are the transfers `ledger cancel` cancelled
	// or compensated, by the transaction id it was given; compensations are
	// the compensating transfers' ids.
	cancelled, compensated map[string]bool
}

// seedLedger opens the hot and the cold ledger accounts.
func (r *run) seedLedger() {
	ctx := context.Background()
	l := &r.ledger
	l.opening = map[string]int64{}
	l.cancelled, l.compensated = map[string]bool{}, map[string]bool{}
	for i := 1; i <= r.cfg.LedgerHot; i++ {
		l.hot = append(l.hot, fmt.Sprintf("ledger-hot-%d", i))
	}
	for i := 1; i <= r.cfg.LedgerCold; i++ {
		l.cold = append(l.cold, fmt.Sprintf("ledger-cold-%d", i))
	}
	if err := r.retry("set up the handlers' collections", func() error { return handlers.Setup(ctx, r.db) }); err != nil {
		r.fatalf("chaos: set up the handlers' collections: %v", err)
	}
	for _, a := range l.hot {
		l.opening[a] = ledgerHotOpening
	}
	for _, a := range l.cold {
		l.opening[a] = ledgerColdOpening
	}
	for _, a := range slices.Sorted(maps.Keys(l.opening)) {
		if err := r.retry("open ledger account "+a, func() error { return handlers.OpenLedgerAccount(ctx, r.db, a, l.opening[a]) }); err != nil {
			r.fatalf("chaos: %v", err)
		}
		l.total += l.opening[a]
	}
}

// ledgerWave enqueues n ledger transfers: two in three touch a hot
// account; one in ten asks for more than the ledger holds; the first of
// the first wave names an account that does not exist. One in four goes
// through the enqueue command, without a txId (the job's id is the
// transfer's).
func (r *run) ledgerWave(ctx context.Context, w, n int) {
	l := &r.ledger
	pick := func(from []string) string { return from[r.intN(len(from))] }
	for i := range n {
		var from, to string
		switch k := r.intN(3); {
		case k == 0 || len(l.hot) < 2:
			from, to = pick(l.cold), pick(l.cold)
			for len(l.cold) > 1 && to == from {
				to = pick(l.cold)
			}
		case k == 1:
			from, to = pick(l.hot), pick(l.hot)
			for to == from {
				to = pick(l.hot)
			}
		default: // between a hot and a cold one, either way round
			from, to = pick(l.hot), pick(l.cold)
			if r.intN(2) == 0 {
				from, to = to, from
			}
		}
		amount := int64(1 + r.intN(8_000))
		if r.intN(10) == 0 {
			amount = l.total + 1
		}
		if w == 0 && i == 0 {
			to = ledgerGhost
		}
		if i%4 == 3 {
			r.enqueue("", "ledger-transfer", "--from", from, "--to", to, "--amount", strconv.FormatInt(amount, 10))
			continue
		}
		l.next++
		args := handlers.LedgerTransferArgs{TxID: fmt.Sprintf("lt-%d", l.next), From: from, To: to, Amount: amount}
		if err := r.retry("enqueue ledger transfer "+args.TxID, func() error {
			_, err := handlers.EnqueueLedgerTransfer(ctx, r.q, args)
			return err
		}); err != nil {
			r.errorf("chaos: enqueue ledger transfer: %v", err)
			return
		}
	}
}

// cancelLedger cancels, with `docketctl ledger cancel`, one transaction
// posted since the last wave: the newest VALID one, chosen without the
// run's random source (which ones are posted by now depends on timing).
// Whether it can still be cancelled or must be compensated depends on the
// sweeper and on later postings; either is checked at the end.
func (r *run) cancelLedger(ctx context.Context, w int) {
	cur, err := r.db.Collection(handlers.LedgerCollection).Find(ctx, bson.M{"state": handlers.LedgerValid},
		options.Find().SetSort(bson.D{{Key: "ts", Value: -1}, {Key: "_id", Value: 1}}))
	var txs []handlers.LedgerTx
	if err == nil {
		err = cur.All(ctx, &txs)
	}
	txs = slices.DeleteFunc(txs, func(tx handlers.LedgerTx) bool { return strings.HasPrefix(tx.Transfer, "compensate:") })
	if err != nil || len(txs) == 0 {
		r.t.Logf("chaos: no ledger cancel after wave %d: nothing posted yet (%v)", w, err)
		return
	}
	id := txs[0].ID
	out, stderr, code := r.command(r.ctlBin, "", "ledger", "cancel", id)
	switch {
	case code != 0:
		r.errorf("chaos: docketctl ledger cancel %s: exit %d: %s%s", id, code, out, stderr)
	case strings.HasPrefix(out, id+"\tcancelled"):
		r.ledger.cancelled[id] = true
	case strings.HasPrefix(out, id+"\tcompensated by "+handlers.CompensationID(txs[0].Transfer)):
		r.ledger.compensated[id] = true
	default:
		r.errorf("chaos: docketctl ledger cancel %s: unexpected output %q", id, out)
	}
}

// ledgerUnsettled counts what the ledger sweeper has still to do: the
// transactions not COMMITTED, and the accounts with a seqId claimed past
// their cache.
func (r *run) ledgerUnsettled(ctx context.Context) (int64, error) {
	n, err := r.db.Collection(handlers.LedgerCollection).CountDocuments(ctx, bson.M{"proc": bson.M{"$ne": handlers.LedgerCommitted}})
	if err != nil {
		return 0, err
	}
	for _, a := range slices.Sorted(maps.Keys(r.ledger.opening)) {
		var acct struct {
			Cache struct {
				SeqID int64 `bson:"seqId"`
			} `bson:"cache"`
		}
		if err := r.db.Collection(handlers.LedgerAccountsCollection).FindOne(ctx, bson.M{"_id": a}).Decode(&acct); err != nil {
			return 0, err
		}
		past, err := r.db.Collection(handlers.LedgerSeqCollection).CountDocuments(ctx, bson.M{"account": a, "seqId": bson.M{"$gt": acct.Cache.SeqID}})
		if err != nil {
			return 0, err
		}
		if past > 0 {
			n++
		}
	}
	return n, nil
}

// ledgerArgs decodes a ledger-transfer job's args and names its transfer:
// its txId, else its id.
func ledgerArgs(j *jobs.Job) (handlers.LedgerTransferArgs, string, error) {
	var a handlers.LedgerTransferArgs
	if err := bson.Unmarshal(j.Args, &a); err != nil {
		return a, "", err
	}
	if a.TxID == "" {
		return a, j.ID, nil
	}
	return a, a.TxID, nil
}

// checkLedger checks the settled ledger from the database:
//   - every ledger job's transfer has exactly one outcome (abandoned
//     postings aside): posted once, as its args say; refused for
//     insufficient funds (always so when it asked for more than the ledger
//     holds); or cancelled, only if the run cancelled it; every
//     compensation was asked for;
//   - every transaction COMMITTED, every refusal and cancel with a reason;
//   - the VALID changes sum to zero; no two VALID changes of an account
//     share a seqId; in seqId order no balance is ever negative; each
//     change's cacheBal, each cache and LedgerBalance equal recomputation,
//     and VerifyLedger finds no drift.
func (r *run) checkLedger(all []jobs.Job) {
	ctx := context.Background()
	l := &r.ledger
	var txs []handlers.LedgerTx
	r.readAll(ctx, "the ledger", r.db.Collection(handlers.LedgerCollection), &txs)
	outcomes := map[string][]*handlers.LedgerTx{}
	type change struct {
		tx         string
		seq, delta int64
		cacheBal   *int64
	}
	byAccount := map[string][]change{}
	var sum int64
	for i := range txs {
		tx := &txs[i]
		if tx.Proc != handlers.LedgerCommitted {
			r.errorf("chaos: ledger transaction %s is %s after the drain", tx.ID, tx.Proc)
		}
		if tx.Abandoned {
			r.res.LedgerAbandoned++
			if tx.State != handlers.LedgerCancelled {
				r.errorf("chaos: abandoned ledger posting %s is %s", tx.ID, tx.State)
			}
			continue
		}
		outcomes[tx.Transfer] = append(outcomes[tx.Transfer], tx)
		if tx.State != handlers.LedgerValid {
			if tx.State != handlers.LedgerCancelled || tx.Reason == "" {
				r.errorf("chaos: ledger transaction %s is %s with reason %q", tx.ID, tx.State, tx.Reason)
			}
			continue
		}
		for _, c := range tx.Changes {
			d := c.Value
			if c.Type == handlers.LedgerWithdraw {
				d = -d
			}
			sum += d
			byAccount[c.Account] = append(byAccount[c.Account], change{tx.ID, c.SeqID, d, c.CacheBal})
		}
	}
	if sum != 0 {
		r.errorf("chaos: the VALID changes of the ledger sum to %d, not 0: money was created or destroyed", sum)
	}

	// Every job's transfer, and nothing else, has one outcome.
	transfers := map[string]bool{}
	for i := range all {
		j := &all[i]
		if j.Kind != handlers.LedgerTransferKind {
			continue
		}
		a, transfer, err := ledgerArgs(j)
		if err != nil {
			r.errorf("chaos: ledger job %s: %v", j.ID, err)
			continue
		}
		transfers[transfer] = true
		if j.State != jobs.StateSucceeded {
			if len(outcomes[transfer]) > 0 {
				r.errorf("chaos: ledger job %s is %s, yet its transfer %s has outcomes %v", j.ID, j.State, transfer, txIDs(outcomes[transfer]))
			}
			continue // checkJob judged its state
		}
		if base, ok := strings.CutPrefix(transfer, "compensate:"); ok && !l.compensated[base] && !slices.ContainsFunc(txs, func(tx handlers.LedgerTx) bool {
			return l.compensated[tx.ID] && tx.Transfer == base
		}) {
			r.errorf("chaos: ledger job %s compensates %s, which the run never asked to cancel", j.ID, base)
		}
		out := outcomes[transfer]
		if len(out) != 1 {
			r.errorf("chaos: ledger transfer %s (job %s) has %d outcomes, want exactly 1: %v", transfer, j.ID, len(out), txIDs(out))
			continue
		}
		tx := out[0]
		switch {
		case tx.State == handlers.LedgerValid:
			r.res.LedgerPosted++
			if a.Amount > l.total {
				r.errorf("chaos: ledger transfer %s of %d cents was posted; the whole ledger holds %d", transfer, a.Amount, l.total)
			}
			if len(tx.Changes) != 2 || tx.Changes[0] != (handlers.LedgerChange{Account: a.From, Type: handlers.LedgerWithdraw, Value: a.Amount, SeqID: tx.Changes[0].SeqID, CacheBal: tx.Changes[0].CacheBal}) ||
				tx.Changes[1] != (handlers.LedgerChange{Account: a.To, Type: handlers.LedgerDeposit, Value: a.Amount, SeqID: tx.Changes[1].SeqID, CacheBal: tx.Changes[1].CacheBal}) {
				r.errorf("chaos: ledger transfer %s posted %+v; its job asked %d from %s to %s", transfer, tx.Changes, a.Amount, a.From, a.To)
			}
		case strings.HasPrefix(tx.Reason, "insufficient funds"):
			r.res.LedgerRefused++
		case l.cancelled[tx.ID]:
			r.res.LedgerCancelled++
		default:
			r.errorf("chaos: ledger transfer %s is %s (%q) and the run did not cancel it", transfer, tx.State, tx.Reason)
		}
		if a.Amount > l.total && tx.State == handlers.LedgerCancelled && !strings.HasPrefix(tx.Reason, "insufficient funds") {
			r.errorf("chaos: ledger transfer %s of %d cents should be refused for insufficient funds; it is cancelled with %q", transfer, a.Amount, tx.Reason)
		}
	}
	for transfer, out := range outcomes {
		if !transfers[transfer] {
			r.errorf("chaos: ledger transactions %v post transfer %q, which no job asked for", txIDs(out), transfer)
		}
	}
	for id := range l.cancelled {
		if i := slices.IndexFunc(txs, func(tx handlers.LedgerTx) bool { return tx.ID == id }); i < 0 || txs[i].State != handlers.LedgerCancelled {
			r.errorf("chaos: ledger cancel said %s was cancelled; it is not", id)
		}
	}
	r.res.LedgerCompensated = len(l.compensated)

	// Each account's changes in seqId order, against its cache.
	for _, id := range slices.Sorted(maps.Keys(l.opening)) {
		cs := byAccount[id]
		slices.SortFunc(cs, func(a, b change) int { return cmp.Compare(a.seq, b.seq) })
		bal := l.opening[id]
		for i, c := range cs {
			if i > 0 && cs[i-1].seq == c.seq {
				r.errorf("chaos: ledger account %s: seqId %d is held by two VALID changes (%s and %s)", id, c.seq, cs[i-1].tx, c.tx)
			}
			bal += c.delta
			if bal < 0 {
				r.errorf("chaos: ledger account %s is overdrawn at seqId %d (%s): %d", id, c.seq, c.tx, bal)
			}
			switch {
			case c.cacheBal == nil:
				r.errorf("chaos: ledger account %s: the change at seqId %d (%s) was never folded into the cache", id, c.seq, c.tx)
			case *c.cacheBal != bal:
				r.errorf("chaos: ledger account %s: the change at seqId %d (%s) has cacheBal %d; recomputed %d", id, c.seq, c.tx, *c.cacheBal, bal)
			}
		}
		var acct struct {
			Cache struct {
				Balance int64 `bson:"balance"`
				SeqID   int64 `bson:"seqId"`
			} `bson:"cache"`
		}
		if err := r.db.Collection(handlers.LedgerAccountsCollection).FindOne(ctx, bson.M{"_id": id}).Decode(&acct); err != nil {
			r.errorf("chaos: read ledger account %s: %v", id, err)
			continue
		}
		if acct.Cache.Balance != bal {
			r.errorf("chaos: ledger account %s caches %d cents (at seqId %d); its opening plus its VALID changes is %d", id, acct.Cache.Balance, acct.Cache.SeqID, bal)
		}
		if n := len(cs); n > 0 && acct.Cache.SeqID < cs[n-1].seq {
			r.errorf("chaos: ledger account %s caches seqId %d; its last change is at %d", id, acct.Cache.SeqID, cs[n-1].seq)
		}
		if got, err := handlers.LedgerBalance(ctx, r.db, id); err != nil || got != bal {
			r.errorf("chaos: LedgerBalance(%s) = %d, %v; recomputed %d", id, got, err, bal)
		}
	}
	for id := range byAccount {
		if _, ok := l.opening[id]; !ok {
			r.errorf("chaos: VALID ledger changes on %s, an account nobody opened", id)
		}
	}
	drift, err := handlers.VerifyLedger(ctx, r.db)
	if err != nil {
		r.errorf("chaos: verify the ledger: %v", err)
	}
	for _, d := range drift {
		r.errorf("chaos: VerifyLedger: %s", d)
	}
}

func txIDs(txs []*handlers.LedgerTx) []string {
	ids := make([]string, len(txs))
	for i, tx := range txs {
		ids[i] = fmt.Sprintf("%s (%s %q)", tx.ID, tx.State, tx.Reason)
	}
	return ids
}

// dumpLedger logs what the ledger sweeper has left to do, and what the
// workers logged about the ledger, for a run whose ledger did not settle.
func (r *run) dumpLedger(ctx context.Context) {
	for _, a := range slices.Sorted(maps.Keys(r.ledger.opening)) {
		raw, err := r.db.Collection(handlers.LedgerAccountsCollection).FindOne(ctx, bson.M{"_id": a}).Raw()
		if err != nil {
			r.t.Logf("ledger account %s: %v", a, err)
			continue
		}
		seq, _ := raw.Lookup("cache", "seqId").AsInt64OK()
		n, _ := r.db.Collection(handlers.LedgerSeqCollection).CountDocuments(ctx, bson.M{"account": a, "seqId": bson.M{"$gt": seq}})
		next, _ := r.db.Collection(handlers.LedgerSeqCollection).FindOne(ctx, bson.M{"account": a, "seqId": seq + 1}).Raw()
		r.t.Logf("ledger account %s: cache %s; %d claims past it; the next: %s", a, raw.Lookup("cache"), n, next)
	}
	cur, err := r.db.Collection(handlers.LedgerCollection).Find(ctx, bson.M{"proc": bson.M{"$ne": handlers.LedgerCommitted}}, options.Find().SetLimit(5))
	if err == nil {
		var txs []bson.Raw
		_ = cur.All(ctx, &txs)
		for _, tx := range txs {
			r.t.Logf("ledger transaction not committed: %s", tx)
		}
	}
	r.mu.Lock()
	procs := append([]*process(nil), r.procs...) // the killer starts workers meanwhile
	r.mu.Unlock()
	var lines []string
	for _, p := range procs {
		for _, l := range strings.Split(p.out.String(), "\n") {
			if strings.Contains(l, `"logger":"ledger-sweeper"`) || strings.Contains(l, "ledger sweep") {
				lines = append(lines, clip(l, 400))
			}
		}
	}
	r.t.Logf("the workers' last ledger sweeper lines (%d in all):\n%s", len(lines), strings.Join(lines[max(len(lines)-10, 0):], "\n"))
}
