package handlers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/recovery"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
)

// Defaults for LedgerSweeperConfig.
const (
	// DefaultLedgerSweepSchedule is how often the ledger sweeper runs.
	DefaultLedgerSweepSchedule = "@every 10s"
	// DefaultLedgerAbandonAfter is how long a seqId claim may wait for its
	// transaction before the sweeper cancels the posting as abandoned.
	DefaultLedgerAbandonAfter = time.Minute
	// DefaultLedgerSweepBatch is how many changes the sweeper folds into
	// one account's cache per pass at most.
	DefaultLedgerSweepBatch = 1000
)

// LedgerSweeperConfig configures a LedgerSweeper: Schedule defaults to
// DefaultLedgerSweepSchedule, Threshold (how long a claim may wait for its
// transaction before the posting is cancelled as abandoned) to
// DefaultLedgerAbandonAfter, Batch (changes folded per account and pass)
// to DefaultLedgerSweepBatch.
type LedgerSweeperConfig recovery.SweepConfig

// WithDefaults returns c with every unset field set to its default.
func (c LedgerSweeperConfig) WithDefaults() LedgerSweeperConfig {
	return LedgerSweeperConfig(recovery.SweepConfig(c).WithDefaults(recovery.SweepConfig{
		Schedule: DefaultLedgerSweepSchedule, Threshold: DefaultLedgerAbandonAfter, Batch: DefaultLedgerSweepBatch,
	}))
}

// Validate reports the first invalid field, naming it and its value.
func (c LedgerSweeperConfig) Validate() error {
	return recovery.SweepConfig(c).Validate("ledgerSweeper")
}

// Steps of the ledger sweeper, reported to its hook after each write.
const (
	stepLedgerAbandon = "ledger-sweep:abandon"
	stepLedgerSeal    = "ledger-sweep:seal"
	stepLedgerCache   = "ledger-sweep:cache"
	stepLedgerCommit  = "ledger-sweep:commit"
)

// LedgerSweeper commits the ledger: for each account, in seqId order, it
// folds each change into the account's cache, fenced on the cache's seqId
// (two sweepers, or a stalled one, cannot fold a change twice), then marks
// COMMITTED every transaction whose accounts' caches have all passed it.
// It also cancels, as abandoned, a posting whose seqId claim has waited for
// its transaction longer than the threshold. It runs in the leader, which
// may die at any moment: each pass first commits what earlier passes
// folded, and folds the account whose next claim has waited longest first,
// so passes cut short still settle every account.
type LedgerSweeper struct {
	cfg LedgerSweeperConfig
	c   ledgerColls
	log *zap.Logger
	// hook, when set (tests), is called after each write.
	hook func(ctx context.Context, step string) error
}

// NewLedgerSweeper returns a LedgerSweeper for the ledger in db.
func NewLedgerSweeper(db *mongo.Database, cfg LedgerSweeperConfig) (*LedgerSweeper, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &LedgerSweeper{cfg: cfg, c: ledgerCollections(db), log: cfg.Logger.Named("ledger-sweeper")}, nil
}

// Schedule returns the sweeper's cron spec.
func (s *LedgerSweeper) Schedule() string { return s.cfg.Schedule }

// Run is a cron job: one pass, with its error logged.
func (s *LedgerSweeper) Run() { runPass(s.log, "ledger sweep", s.RunOnce) }

// LedgerSweepResult counts what one pass did.
type LedgerSweepResult struct {
	// Folded is how many seqIds the caches passed.
	Folded int
	// Committed is how many transactions were marked COMMITTED.
	Committed int
	// Abandoned is how many postings were cancelled as abandoned.
	Abandoned int
	// Waiting is how many accounts stopped at a claim still in flight.
	Waiting int
}

func (s *LedgerSweeper) step(ctx context.Context, name string) error {
	if s.hook == nil {
		return nil
	}
	return s.hook(ctx, name)
}

// RunOnce makes one pass: it commits what earlier passes folded, folds
// every account that has a claim past its cache, the one whose next claim
// has waited longest first, then commits again. An account that another
// app left unusable is skipped with a log line.
//
// A pass may end at any point (its leader killed, its context cancelled):
// every write is fenced, and what it folded is committed by the next pass's
// first step. So that passes cut short still settle the whole ledger, a
// pass costs few commands before its first fold (the accounts in one read,
// their next claims in another), and no account is always folded last.
func (s *LedgerSweeper) RunOnce(ctx context.Context) (LedgerSweepResult, error) {
	var res LedgerSweepResult
	accts, err := s.accounts(ctx)
	if err != nil {
		return res, err
	}
	n, err := s.commit(ctx, accts)
	res.Committed += n
	if err != nil {
		return res, err
	}
	order, next, err := s.pending(ctx, accts)
	if err != nil {
		return res, err
	}
	for _, id := range order {
		if err := s.fold(ctx, accts[id], next[id], &res); err != nil {
			if errors.Is(err, ErrLedgerAccount) {
				s.log.Warn("skipping an unusable ledger account", zap.Error(err))
				continue
			}
			return res, err
		}
	}
	if res.Folded == 0 {
		return res, nil // nothing more to commit than the first step did
	}
	if accts, err = s.accounts(ctx); err != nil {
		return res, err
	}
	n, err = s.commit(ctx, accts)
	res.Committed += n
	return res, err
}

// accounts reads every account's cache, in one read; an unusable account
// is logged and left out.
func (s *LedgerSweeper) accounts(ctx context.Context) (map[string]ledgerAccount, error) {
	accts, err := readLedgerAccounts(ctx, s.c, func(_ string, err error) {
		s.log.Warn("skipping an unusable ledger account", zap.Error(err))
	})
	if err != nil {
		return nil, fmt.Errorf("ledger sweep: list accounts: %w", err)
	}
	return accts, nil
}

// pending reads, in one read, the claim right after each account's cache,
// and returns the accounts that have one, the one claimed longest ago
// first (ties by id), with the claims read.
func (s *LedgerSweeper) pending(ctx context.Context, accts map[string]ledgerAccount) ([]string, map[string]bson.Raw, error) {
	next := map[string]bson.Raw{}
	at := map[string]time.Time{}
	byClaim := make(map[string]string, len(accts)) // the next claim's _id: its account
	ids := make(bson.A, 0, len(accts))
	for id, a := range accts {
		byClaim[ledgerSlotID(id, a.seq+1)] = id
		ids = append(ids, ledgerSlotID(id, a.seq+1))
	}
	for len(ids) > 0 {
		batch := ids[:min(len(ids), 1000)]
		ids = ids[len(batch):]
		cur, err := s.c.seq.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: batch}}}})
		if err != nil {
			return nil, nil, fmt.Errorf("ledger sweep: read the next claims: %w", err)
		}
		for cur.Next(ctx) {
			// The _id names the account and seqId; the other fields may be
			// another app's: only the claim's time is looked at here.
			claim, _ := cur.Current.Lookup("_id").StringValueOK()
			if acct, ok := byClaim[claim]; ok {
				next[acct] = append(bson.Raw(nil), cur.Current...)
				at[acct], _ = cur.Current.Lookup("at").TimeOK()
			}
		}
		err = cur.Err()
		closeCursor(ctx, cur)
		if err != nil {
			return nil, nil, fmt.Errorf("ledger sweep: read the next claims: %w", err)
		}
	}
	order := make([]string, 0, len(next))
	for id := range next {
		order = append(order, id)
	}
	slices.SortFunc(order, func(a, b string) int {
		return cmp.Or(at[a].Compare(at[b]), strings.Compare(a, b))
	})
	return order, next, nil
}

// fold advances account acct's cache over its claims, one seqId at a time,
// from raw, the claim after the cache as read. It reads the account again
// only when its cache moved under it.
func (s *LedgerSweeper) fold(ctx context.Context, acct ledgerAccount, raw bson.Raw, res *LedgerSweepResult) error {
	id := acct.id
	for range s.cfg.Batch {
		k := acct.seq + 1
		if raw == nil {
			var err error
			raw, err = s.c.seq.FindOne(ctx, bson.D{{Key: "_id", Value: ledgerSlotID(id, k)}}).Raw()
			if errors.Is(err, mongo.ErrNoDocuments) {
				return nil // nothing claimed after the cache
			}
			if err != nil {
				return fmt.Errorf("ledger sweep: read seqId %d of %q: %w", k, id, err)
			}
		}
		var slot ledgerSlot
		delta := int64(0)
		if bson.Unmarshal(raw, &slot) == nil && slot.Kind == seqChange {
			tx, err := readLedgerTx(ctx, s.c, slot.Tx)
			if err != nil && !jobs.IsPermanent(err) {
				return err
			}
			switch {
			case err != nil: // not docket's: counts nothing
			case tx == nil:
				if time.Since(slot.At) < s.cfg.Threshold {
					res.Waiting++
					return nil // in flight: its poster may still write it
				}
				if err := s.abandon(ctx, slot); err != nil {
					return err
				}
				res.Abandoned++
				continue // read its transaction again: the tombstone, or the poster's
			default:
				if c, i, owns := ledgerOwns(tx, slot); owns && tx.State == LedgerValid {
					ok, err := s.seal(ctx, tx, i, acct.balance+c.delta())
					if err != nil {
						return err
					}
					if !ok {
						continue // cancelled meanwhile: read again
					}
					delta = c.delta()
				}
			}
		}
		upd, err := s.c.accounts.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: id}, {Key: "cache.seqId", Value: acct.seq}, {Key: "cache.balance", Value: acct.balance}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "cache", Value: bson.D{{Key: "balance", Value: acct.balance + delta}, {Key: "seqId", Value: k}}}}}})
		if err != nil {
			return fmt.Errorf("ledger sweep: advance the cache of %q to seqId %d: %w", id, k, err)
		}
		raw = nil
		if upd.MatchedCount == 1 {
			res.Folded++
			acct.balance, acct.seq = acct.balance+delta, k
		} else if acct, err = readLedgerAccount(ctx, s.c, id); err != nil {
			return err // another sweeper moved the cache: go on from where it is
		}
		if err := s.step(ctx, stepLedgerCache); err != nil {
			return err
		}
	}
	return nil
}

// abandon cancels the posting that claim slot waits for: a tombstone with
// its id, so that the stalled poster's late insert is a duplicate.
func (s *LedgerSweeper) abandon(ctx context.Context, slot ledgerSlot) error {
	_, err := s.c.txs.InsertOne(ctx, LedgerTx{
		ID: slot.Tx, TS: time.Now().UTC(), Proc: LedgerCommitted, State: LedgerCancelled, Changes: []LedgerChange{},
		Abandoned: true,
		Reason:    fmt.Sprintf("abandoned: its poster claimed seqId %d of %q at %s and did not write it within %s", slot.SeqID, slot.Account, slot.At.Format(time.RFC3339), s.cfg.Threshold),
	})
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("ledger sweep: cancel the abandoned posting %q: %w", slot.Tx, err)
	}
	s.log.Info("cancelled an abandoned ledger posting", zap.String("tx_id", slot.Tx), zap.String("account", slot.Account), zap.Int64("seq_id", slot.SeqID))
	return s.step(ctx, stepLedgerAbandon)
}

// seal marks tx as being folded, so that it can no longer be cancelled,
// and records change i's balance after it. Every sweeper computes the same
// balance from the same cache, so repeating it is harmless. It reports
// false when tx is no longer VALID.
func (s *LedgerSweeper) seal(ctx context.Context, tx *LedgerTx, i int, after int64) (bool, error) {
	upd, err := s.c.txs.UpdateOne(ctx, bson.D{{Key: "_id", Value: tx.ID}, {Key: "state", Value: LedgerValid}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "sealed", Value: true}, {Key: "changes." + strconv.Itoa(i) + ".cacheBal", Value: after}}}})
	if err != nil {
		return false, fmt.Errorf("ledger sweep: seal %q: %w", tx.ID, err)
	}
	return upd.MatchedCount == 1, s.step(ctx, stepLedgerSeal)
}

// commit marks COMMITTED, in one write, every UNCOMMITTED transaction
// whose changes every account's cache in accts has passed, and returns how
// many. Caches only move forward, so a transaction that was passed stays
// passed: a stale commit is harmless.
func (s *LedgerSweeper) commit(ctx context.Context, accts map[string]ledgerAccount) (int, error) {
	cur, err := s.c.txs.Find(ctx, bson.D{{Key: "proc", Value: LedgerUncommitted}})
	if err != nil {
		return 0, fmt.Errorf("ledger sweep: find uncommitted transactions: %w", err)
	}
	defer closeCursor(ctx, cur)
	var ids bson.A
	for cur.Next(ctx) {
		var tx LedgerTx
		if bson.Unmarshal(cur.Current, &tx) != nil {
			continue
		}
		passed := true
		for _, c := range tx.Changes {
			a, ok := accts[c.Account]
			passed = passed && ok && a.seq >= c.SeqID
		}
		if passed {
			ids = append(ids, tx.ID)
		}
	}
	if err := cur.Err(); err != nil {
		return 0, fmt.Errorf("ledger sweep: find uncommitted transactions: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	upd, err := s.c.txs.UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "proc", Value: LedgerUncommitted}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "proc", Value: LedgerCommitted}}}})
	if err != nil {
		return 0, fmt.Errorf("ledger sweep: commit %d transactions: %w", len(ids), err)
	}
	return int(upd.MatchedCount), s.step(ctx, stepLedgerCommit)
}
