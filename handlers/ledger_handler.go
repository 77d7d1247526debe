package handlers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
)

// How a ledger posting stays exact when its attempts stall.
//
// Every write of a posting is an insert that the first writer wins:
//
//  1. the claim of seqId n of the source (ledgerSeq _id from both),
//  2. the claim of seqId m of the destination,
//  3. the transaction, whose _id is the job's TxID.
//
// The overdraft check reads the source's cache, then every claim after it:
// a concurrent poster that took seqId n makes insert 1 fail, and the
// posting reads again; no claim below n can appear once n-1 is claimed, so
// what the check read is the whole prefix its change follows. Claims in
// flight count pessimistically (see ledgerView.available), so the check
// stays sound whatever they become.
//
// Two attempts of one job (a stalled one resumed, a retry after a lost
// reply) write the same transaction id: one insert wins, the other is a
// duplicate, and the claims of the loser name a try the transaction does
// not hold, so they count nothing. No attempt continues another's half-done
// work, so nothing needs fencing on the lease beyond that; the transaction
// records the job and lease of the attempt that wrote it. A posting
// abandoned by the sweeper (its claims in flight past the threshold) is
// re-posted under the next id of the transfer's chain (ledgerChainID).

// Steps of a ledger posting, reported to Deps.Hook after each write.
const (
	stepLedgerClaimFrom = "ledger:claim-from"
	stepLedgerClaimTo   = "ledger:claim-to"
	stepLedgerPost      = "ledger:post"
	stepLedgerRefuse    = "ledger:refuse"
)

// maxLedgerRounds bounds one attempt: each round reads the books and makes
// one try; a round is lost only to a poster that claimed the same seqId.
const maxLedgerRounds = 32

// maxLedgerChain bounds the re-posts of one transfer.
const maxLedgerChain = 16

func registerLedger(reg *jobs.Registry, d Deps) error {
	h := &ledgerHandler{d: d, c: ledgerCollections(d.DB), log: d.logger().Named("ledger")}
	return jobs.Register(reg, h.work, jobs.KindOptions{})
}

type ledgerHandler struct {
	d   Deps
	c   ledgerColls
	log *zap.Logger
}

func (h *ledgerHandler) work(ctx context.Context, job *jobs.Job, args LedgerTransferArgs) error {
	transfer := args.TxID
	if transfer == "" {
		transfer = job.ID
	}
	log := h.log.With(job.LogFields(zap.String("tx_id", transfer))...)
	link, lost := 1, 0
	for range maxLedgerRounds {
		id := ledgerChainID(transfer, link)
		tx, err := readLedgerTx(ctx, h.c, id)
		if err != nil {
			return err
		}
		if tx != nil {
			if tx.Transfer != "" && tx.Transfer != transfer {
				return jobs.Permanent(fmt.Errorf("ledger transaction %q belongs to transfer %q, not %q", id, tx.Transfer, transfer))
			}
			if tx.State == LedgerCancelled && tx.Abandoned {
				if link++; link > maxLedgerChain {
					return jobs.Permanent(fmt.Errorf("ledger transfer %q: %d postings abandoned", transfer, maxLedgerChain))
				}
				continue
			}
			log.Debug("ledger transfer finished", zap.String("id", id), zap.String("state", tx.State), zap.String("reason", tx.Reason))
			return nil
		}
		raced, err := h.try(ctx, job, transfer, id, args)
		if err != nil {
			return err
		}
		if raced {
			// Posters on a hot account all claim the same next seqId; one
			// wins each round. Backing off with jitter spreads them out.
			lost++
			if err := jitter(ctx, lost); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("ledger transfer %q: not posted after %d tries (postings on the same accounts kept racing); retrying", transfer, maxLedgerRounds)
}

func readLedgerTx(ctx context.Context, c ledgerColls, id string) (*LedgerTx, error) {
	raw, err := c.txs.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ledger transaction %q: %w", id, err)
	}
	var tx LedgerTx
	if err := bson.Unmarshal(raw, &tx); err != nil {
		return nil, jobs.Permanent(fmt.Errorf("ledger transaction %q is not docket's (%w): %s", id, err, raw))
	}
	return &tx, nil
}

// jitter waits a random time up to 2^lost ms (at most 64 ms).
func jitter(ctx context.Context, lost int) error {
	t := time.NewTimer(time.Duration(rand.Int64N(int64(time.Millisecond) << min(lost, 6))))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// try makes one try at posting id: it returns once the transaction is
// written (or was, by another attempt), or, reporting raced, once a claim
// was lost to a concurrent poster, for the caller to read everything
// again.
func (h *ledgerHandler) try(ctx context.Context, job *jobs.Job, transfer, id string, args LedgerTransferArgs) (raced bool, err error) {
	src, err := readLedgerView(ctx, h.c, args.From)
	if err != nil {
		return false, ledgerReadErr(err)
	}
	dst, err := readLedgerView(ctx, h.c, args.To)
	if err != nil {
		return false, ledgerReadErr(err)
	}
	now := time.Now().UTC()
	base := LedgerTx{ID: id, TS: now, Transfer: transfer, Job: job.ID, Lease: job.LeaseToken}
	if avail := src.available(id); avail < args.Amount {
		base.Proc, base.State, base.Changes = LedgerCommitted, LedgerCancelled, []LedgerChange{}
		base.Reason = fmt.Sprintf("insufficient funds: account %q has %d cents available, the transfer needs %d", args.From, avail, args.Amount)
		if _, err := h.c.txs.InsertOne(ctx, base); err != nil && !mongo.IsDuplicateKeyError(err) {
			return false, fmt.Errorf("ledger transfer %q: record the refusal: %w", transfer, err)
		}
		return false, h.d.step(ctx, stepLedgerRefuse)
	}
	try := uuid.NewString()
	changes := []LedgerChange{
		{Account: args.From, Type: LedgerWithdraw, Value: args.Amount, SeqID: src.max + 1},
		{Account: args.To, Type: LedgerDeposit, Value: args.Amount, SeqID: dst.max + 1},
	}
	for i, step := range []string{stepLedgerClaimFrom, stepLedgerClaimTo} {
		c := changes[i]
		_, err := h.c.seq.InsertOne(ctx, ledgerSlot{
			ID: ledgerSlotID(c.Account, c.SeqID), Account: c.Account, SeqID: c.SeqID,
			Tx: id, Try: try, Kind: seqChange, Type: c.Type, Value: c.Value, At: now,
		})
		if mongo.IsDuplicateKeyError(err) {
			return true, h.d.step(ctx, step) // another posting took it: read again
		}
		if err != nil {
			return false, fmt.Errorf("ledger transfer %q: claim seqId %d of %q: %w", transfer, c.SeqID, c.Account, err)
		}
		if err := h.d.step(ctx, step); err != nil {
			return false, err
		}
	}
	base.Proc, base.State, base.Changes, base.Try = LedgerUncommitted, LedgerValid, changes, try
	if _, err := h.c.txs.InsertOne(ctx, base); err != nil && !mongo.IsDuplicateKeyError(err) {
		return false, fmt.Errorf("ledger transfer %q: write the transaction: %w", transfer, err)
	}
	return false, h.d.step(ctx, stepLedgerPost)
}

// ledgerReadErr makes an unusable account a permanent error: no retry can
// post on it until someone fixes it.
func ledgerReadErr(err error) error {
	if errors.Is(err, ErrLedgerAccount) {
		return jobs.Permanent(err)
	}
	return err
}
