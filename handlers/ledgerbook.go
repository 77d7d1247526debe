package handlers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// LedgerCancelOutcome is what CancelLedgerTx did.
type LedgerCancelOutcome struct {
	// Cancelled: the transaction is CANCELLED (now or before); its changes
	// never count.
	Cancelled bool
	// Compensation is the id of the compensating transaction, when the
	// transaction could not be cancelled; JobID is the job posting it.
	Compensation, JobID string
	// Why says why it was compensated rather than cancelled.
	Why string
}

// CompensationID is the id of the transaction that compensates transfer
// txID: fixed, so that a transfer is compensated at most once.
func CompensationID(txID string) string { return "compensate:" + txID }

// CancelLedgerTx cancels the VALID transaction txID if no later change
// depends on it, and otherwise enqueues a compensating transaction (the
// same amount the other way).
//
// A later change depends on it when any of its accounts has a seqId after
// the transaction's: its poster's overdraft check counted the transaction.
// Or once a sweeper has sealed it (started folding it into a cache). To
// cancel, the canceller claims the seqId right after the transaction's on
// every account (a cancel marker in ledgerSeq), so that no later change
// can appear; a poster that reads a marker counts the transaction's
// deposit as gone until it is sealed. Only then is the transaction moved to
// CANCELLED, conditioned on it being VALID and unsealed. A marker claimed
// by a cancel that then fails counts nothing.
func CancelLedgerTx(ctx context.Context, db *mongo.Database, q *queue.Client, txID string) (LedgerCancelOutcome, error) {
	c := ledgerCollections(db)
	tx, err := readLedgerTx(ctx, c, txID)
	if err != nil {
		return LedgerCancelOutcome{}, fmt.Errorf("handlers: cancel ledger transaction %q: %w", txID, err)
	}
	if tx == nil {
		return LedgerCancelOutcome{}, fmt.Errorf("handlers: cancel ledger transaction %q: %w", txID, ErrTransactionNotFound)
	}
	if tx.State == LedgerCancelled && tx.Abandoned {
		// An abandoned posting counts nothing, but its transfer's job
		// posts it again under the next id of its chain: that is the one
		// to cancel.
		if tx, err = latestLedgerPosting(ctx, c, tx); err != nil {
			return LedgerCancelOutcome{}, fmt.Errorf("handlers: cancel ledger transaction %q: %w", txID, err)
		}
		txID = tx.ID
	}
	if tx.State == LedgerCancelled {
		return LedgerCancelOutcome{Cancelled: true}, nil
	}
	why := ""
	if tx.Sealed {
		why = "a sweeper has folded it into a cached balance"
	}
	for _, ch := range tx.Changes {
		if why != "" {
			break
		}
		next := ch.SeqID + 1
		_, err := c.seq.InsertOne(ctx, ledgerSlot{
			ID: ledgerSlotID(ch.Account, next), Account: ch.Account, SeqID: next, Tx: txID, Try: tx.Try, Kind: seqCancel,
		})
		if mongo.IsDuplicateKeyError(err) {
			var s ledgerSlot
			if rerr := c.seq.FindOne(ctx, bson.D{{Key: "_id", Value: ledgerSlotID(ch.Account, next)}}).Decode(&s); rerr == nil && s.Kind == seqCancel && s.Tx == txID {
				continue // ours, from an earlier call
			}
			why = fmt.Sprintf("account %q has a later change (seqId %d)", ch.Account, next)
			break
		}
		if err != nil {
			return LedgerCancelOutcome{}, fmt.Errorf("handlers: cancel ledger transaction %q: claim seqId %d of %q: %w", txID, next, ch.Account, err)
		}
	}
	if why == "" {
		upd, err := c.txs.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: txID}, {Key: "state", Value: LedgerValid}, {Key: "sealed", Value: bson.D{{Key: "$ne", Value: true}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: LedgerCancelled}, {Key: "reason", Value: cancelledByRequest}}}})
		if err != nil {
			return LedgerCancelOutcome{}, fmt.Errorf("handlers: cancel ledger transaction %q: %w", txID, err)
		}
		if upd.MatchedCount == 1 {
			return LedgerCancelOutcome{Cancelled: true}, nil
		}
		if tx, err = readLedgerTx(ctx, c, txID); err != nil {
			return LedgerCancelOutcome{}, fmt.Errorf("handlers: cancel ledger transaction %q: %w", txID, err)
		}
		if tx.State == LedgerCancelled {
			return LedgerCancelOutcome{Cancelled: true}, nil
		}
		why = "a sweeper has folded it into a cached balance"
	}
	return compensate(ctx, q, tx, why)
}

// latestLedgerPosting follows the chain of re-posts from the abandoned
// posting tx to the transfer's posting that was not abandoned. When there
// is none yet (the transfer's job has not posted it again), the transfer
// has no transaction to cancel: ErrTransactionNotFound, for the caller to
// cancel the job instead.
func latestLedgerPosting(ctx context.Context, c ledgerColls, tx *LedgerTx) (*LedgerTx, error) {
	transfer, link := tx.Transfer, 1
	if transfer == "" {
		transfer = tx.ID
	}
	if base, n, ok := strings.Cut(tx.ID, ledgerChainSep); ok {
		i, err := strconv.Atoi(n)
		if err != nil || base != transfer {
			return nil, fmt.Errorf("%w: posting %q is not of transfer %q's chain", ErrLedgerNotCancellable, tx.ID, transfer)
		}
		link = i
	}
	for link++; link <= maxLedgerChain; link++ {
		id := ledgerChainID(transfer, link)
		next, err := readLedgerTx(ctx, c, id)
		if err != nil {
			return nil, err
		}
		if next == nil {
			return nil, fmt.Errorf("%w: posting %q of transfer %q was abandoned and the transfer is not posted again yet (cancel its job to stop it)", ErrTransactionNotFound, tx.ID, transfer)
		}
		if next.Transfer != "" && next.Transfer != transfer {
			return nil, fmt.Errorf("%w: ledger transaction %q belongs to transfer %q, not %q", ErrLedgerNotCancellable, id, next.Transfer, transfer)
		}
		if !(next.State == LedgerCancelled && next.Abandoned) {
			return next, nil
		}
	}
	return nil, fmt.Errorf("%w: transfer %q: %d postings abandoned", ErrTransactionNotFound, transfer, maxLedgerChain)
}

// compensate enqueues the transaction that undoes tx.
func compensate(ctx context.Context, q *queue.Client, tx *LedgerTx, why string) (LedgerCancelOutcome, error) {
	var from, to string
	var amount int64
	for _, ch := range tx.Changes {
		switch ch.Type {
		case LedgerWithdraw:
			from, amount = ch.Account, ch.Value
		case LedgerDeposit:
			to = ch.Account
		}
	}
	if len(tx.Changes) != 2 || from == "" || to == "" {
		return LedgerCancelOutcome{}, fmt.Errorf("handlers: compensate ledger transaction %q: %w: it is not a transfer between two accounts", tx.ID, ErrLedgerNotCancellable)
	}
	// A re-posted transaction (ID "T~repost-2") is compensated as its
	// transfer T: a transfer is posted once, so it is compensated once.
	base := tx.Transfer
	if base == "" {
		base = tx.ID
	}
	args := LedgerTransferArgs{TxID: CompensationID(base), From: to, To: from, Amount: amount}
	if err := args.Validate(); err != nil {
		return LedgerCancelOutcome{}, fmt.Errorf("handlers: compensate ledger transaction %q: %w", tx.ID, err)
	}
	res, err := q.Enqueue(ctx, LedgerTransferKind, args, queue.InsertOpts{UniqueKey: "ledger:" + args.TxID})
	if err != nil {
		return LedgerCancelOutcome{}, fmt.Errorf("handlers: compensate ledger transaction %q: %w", tx.ID, err)
	}
	return LedgerCancelOutcome{Compensation: args.TxID, JobID: res.ID, Why: why}, nil
}

// LedgerDrift is an account whose cache does not match the log.
type LedgerDrift struct {
	Account string
	// Cache is the cached balance at CacheSeqID; Recomputed is the opening
	// balance plus every VALID change of the log up to CacheSeqID.
	Cache, Recomputed, CacheSeqID int64
	// Problem, when set, says why the account could not be checked.
	Problem string
}

func (d LedgerDrift) String() string {
	if d.Problem != "" {
		return fmt.Sprintf("%s: %s", d.Account, d.Problem)
	}
	return fmt.Sprintf("%s: cache %d at seqId %d, log %d", d.Account, d.Cache, d.CacheSeqID, d.Recomputed)
}

// VerifyLedger recomputes every account from the whole log and compares it
// with its cache; it returns the accounts that differ, by id.
func VerifyLedger(ctx context.Context, db *mongo.Database) ([]LedgerDrift, error) {
	c := ledgerCollections(db)
	var drift []LedgerDrift
	accts, err := readLedgerAccounts(ctx, c, func(id string, err error) {
		drift = append(drift, LedgerDrift{Account: id, Problem: err.Error()})
	})
	if err != nil {
		return nil, fmt.Errorf("handlers: verify ledger: %w", err)
	}
	sums, err := ledgerSums(ctx, c, func(s ledgerSlot) bool {
		a, ok := accts[s.Account]
		return ok && s.SeqID <= a.seq
	})
	if err != nil {
		return nil, err
	}
	for id, a := range accts {
		if got := a.opening + sums[id]; got != a.balance {
			drift = append(drift, LedgerDrift{Account: id, Cache: a.balance, CacheSeqID: a.seq, Recomputed: got})
		}
	}
	slices.SortFunc(drift, func(a, b LedgerDrift) int { return strings.Compare(a.Account, b.Account) })
	return drift, nil
}

// ledgerSums returns, per account, the sum of the counted changes of the
// whole log whose claim keep accepts.
func ledgerSums(ctx context.Context, c ledgerColls, keep func(ledgerSlot) bool) (map[string]int64, error) {
	cur, err := c.seq.Find(ctx, bson.D{{Key: "kind", Value: seqChange}})
	if err != nil {
		return nil, fmt.Errorf("handlers: read the ledger's seqIds: %w", err)
	}
	defer closeCursor(ctx, cur)
	var slots []ledgerSlot
	var ids bson.A
	for cur.Next(ctx) {
		var s ledgerSlot
		if bson.Unmarshal(cur.Current, &s) == nil && s.ID == ledgerSlotID(s.Account, s.SeqID) && keep(s) {
			slots = append(slots, s)
			ids = append(ids, s.Tx)
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("handlers: read the ledger's seqIds: %w", err)
	}
	txs := map[string]*LedgerTx{}
	for len(ids) > 0 {
		batch := ids[:min(len(ids), 1000)]
		ids = ids[len(batch):]
		if err := readLedgerTxs(ctx, c, batch, txs); err != nil {
			return nil, err
		}
	}
	sums := map[string]int64{}
	for _, s := range slots {
		if ch, _, owns := ledgerOwns(txs[s.Tx], s); owns && txs[s.Tx].State == LedgerValid {
			sums[s.Account] += ch.delta()
		}
	}
	return sums, nil
}

// EnqueueLedgerTransfer checks args and enqueues the job that posts them,
// unique by the transaction's id when one is given.
func EnqueueLedgerTransfer(ctx context.Context, q *queue.Client, args LedgerTransferArgs) (string, error) {
	if err := args.Validate(); err != nil {
		return "", err
	}
	var o queue.InsertOpts
	if args.TxID != "" {
		o.UniqueKey = "ledger:" + args.TxID
	}
	res, err := q.Enqueue(ctx, LedgerTransferKind, args, o)
	if err != nil {
		return "", fmt.Errorf("handlers: enqueue ledger transfer: %w", err)
	}
	return res.ID, nil
}
