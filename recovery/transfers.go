package recovery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// Defaults for TransferRecoveryConfig.
const (
	// DefaultTransferRecoverySchedule is how often the pass runs.
	DefaultTransferRecoverySchedule = "@every 15s"
	// DefaultTransferRecoveryThreshold is how long a transaction may stay
	// unfinished without a change before it counts as stalled.
	DefaultTransferRecoveryThreshold = 30 * time.Second
	// DefaultTransferRecoveryBatch is how many transactions one query of
	// the pass reads at most.
	DefaultTransferRecoveryBatch = 500
)

// TransferRecoveryConfig configures a TransferRecovery: Schedule defaults
// to DefaultTransferRecoverySchedule, Threshold (how long a transaction may
// stay initial, pending, applied or canceling without a change before the
// pass gives it a job) to DefaultTransferRecoveryThreshold, Batch to
// DefaultTransferRecoveryBatch.
type TransferRecoveryConfig SweepConfig

// WithDefaults returns c with every unset field set to its default.
func (c TransferRecoveryConfig) WithDefaults() TransferRecoveryConfig {
	return TransferRecoveryConfig(SweepConfig(c).withDefaults(SweepConfig{
		Schedule: DefaultTransferRecoverySchedule, Threshold: DefaultTransferRecoveryThreshold, Batch: DefaultTransferRecoveryBatch,
	}))
}

// Validate reports the first invalid field, naming it and its value.
func (c TransferRecoveryConfig) Validate() error { return SweepConfig(c).validate("transferRecovery") }

// TransferRecovery finishes transfers whose job was lost: a crash between
// writing a transaction and enqueueing its job, or a job that died (its
// attempts used up) with the transaction half done. Each stalled
// transaction gets a transfer job, which resumes it from the state it is
// in, taking it over from its dead owner.
type TransferRecovery struct {
	accounts *mongo.Collection
	cfg      TransferRecoveryConfig
	txs      *mongo.Collection
	q        *queue.Client
	log      *zap.Logger
}

// NewTransferRecovery returns a TransferRecovery for the transactions in db,
// enqueueing its jobs with q.
func NewTransferRecovery(db *mongo.Database, q *queue.Client, cfg TransferRecoveryConfig) (*TransferRecovery, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &TransferRecovery{
		cfg:      cfg,
		accounts: db.Collection(handlers.AccountsCollection),
		txs:      db.Collection(handlers.TransactionsCollection),
		q:        q,
		log:      cfg.Logger.Named("transfer-recovery"),
	}, nil
}

// Schedule returns the pass's cron spec.
func (r *TransferRecovery) Schedule() string { return r.cfg.Schedule }

// RunOnce makes one pass: every transaction unfinished and unchanged for
// longer than the threshold gets a transfer job, unless an unfinished job
// for it exists already (the unique key handlers.TransferUniqueKey). It
// returns how many jobs it enqueued.
func (r *TransferRecovery) RunOnce(ctx context.Context) (int, error) {
	cutoff := time.Now().Add(-r.cfg.Threshold)
	states := make(bson.A, len(handlers.UnfinishedTxStates))
	for i, s := range handlers.UnfinishedTxStates {
		states[i] = s
	}
	enqueued := 0
	after := ""
	for {
		filter := bson.D{
			{Key: "state", Value: bson.D{{Key: "$in", Value: states}}},
			{Key: "lastModified", Value: bson.D{{Key: "$lt", Value: cutoff}}},
		}
		if after != "" {
			filter = append(filter, bson.E{Key: "_id", Value: bson.D{{Key: "$gt", Value: after}}})
		}
		cur, err := r.txs.Find(ctx, filter, options.Find().
			SetSort(bson.D{{Key: "_id", Value: 1}}).
			SetLimit(int64(r.cfg.Batch)).
			SetProjection(bson.D{{Key: "state", Value: 1}}))
		if err != nil {
			return enqueued, fmt.Errorf("recovery: find stalled transfers: %w", err)
		}
		var stalled []stalledTx
		if err := cur.All(ctx, &stalled); err != nil {
			return enqueued, fmt.Errorf("recovery: read stalled transfers: %w", err)
		}
		if len(stalled) == 0 {
			break
		}
		n, err := r.enqueue(ctx, stalled)
		enqueued += n
		if err != nil {
			return enqueued, err
		}
		if len(stalled) < r.cfg.Batch {
			break
		}
		after = stalled[len(stalled)-1].ID
	}
	if _, err := r.repairOrphans(ctx); err != nil {
		return enqueued, err
	}
	return enqueued, nil
}

// repairOrphans undoes account writes made by a transfer attempt that had
// lost its lease without knowing it (a worker stalled past its lease, then
// resumed): such an attempt may debit or credit an account after the live
// attempt has pulled the transaction from it, leaving a finished (done or
// cancelled) transaction among the account's pendingTransactions, which the
// two-phase protocol never does. The marker says exactly what was applied,
// so the repair is exact: give the value back to a source, take it back
// from a destination, pull the marker, all guarded on the marker. It
// returns how many accounts it repaired.
//
// Not covered: a second zombie, or a retried step, pulling such a marker
// before this pass sees it; that would need account writes fenced on the
// attempt, which pendingTransactions of plain ids cannot carry.
func (r *TransferRecovery) repairOrphans(ctx context.Context) (int, error) {
	cur, err := r.accounts.Find(ctx,
		bson.D{{Key: "pendingTransactions.0", Value: bson.D{{Key: "$exists", Value: true}}}},
		options.Find().SetProjection(bson.D{{Key: "pendingTransactions", Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("recovery: find accounts with pending transfers: %w", err)
	}
	var accts []handlers.Account
	if err := cur.All(ctx, &accts); err != nil {
		return 0, fmt.Errorf("recovery: read accounts with pending transfers: %w", err)
	}
	repaired := 0
	for _, a := range accts {
		for _, txID := range a.PendingTransactions {
			var tx handlers.Transaction
			err := r.txs.FindOne(ctx, bson.D{{Key: "_id", Value: txID}}).Decode(&tx)
			if err != nil {
				if !errors.Is(err, mongo.ErrNoDocuments) {
					r.log.Warn("cannot read a pending transfer", zap.String("tx_id", txID), zap.Error(err))
				}
				continue
			}
			if !tx.State.Finished() {
				continue // its job is still at work
			}
			var delta int64
			switch a.ID {
			case tx.Source:
				delta = tx.Value
			case tx.Destination:
				delta = -tx.Value
			default:
				continue
			}
			res, err := r.accounts.UpdateOne(ctx,
				bson.D{{Key: "_id", Value: a.ID}, {Key: "pendingTransactions", Value: txID}},
				bson.D{
					{Key: "$inc", Value: bson.D{{Key: "balance", Value: delta}}},
					{Key: "$pull", Value: bson.D{{Key: "pendingTransactions", Value: txID}}},
				})
			if err != nil {
				return repaired, fmt.Errorf("recovery: repair account %s: %w", a.ID, err)
			}
			if res.ModifiedCount == 1 {
				repaired++
				r.log.Warn("undid a late write by a transfer attempt that had lost its lease",
					zap.String("account", a.ID), zap.String("tx_id", txID), zap.String("tx_state", string(tx.State)), zap.Int64("delta", delta))
			}
		}
	}
	return repaired, nil
}

// stalledTx is a transaction the pass found stalled.
type stalledTx struct {
	ID    string `bson:"_id"`
	State string `bson:"state"`
}

// enqueue gives each of stalled a job unless it has an unfinished one, and
// returns how many jobs it added. The jobs that hold the transactions' keys
// are looked up first, in one query, so that a pass over transactions whose
// jobs are merely slow writes nothing; the unique key still settles a race
// with a job enqueued in between.
func (r *TransferRecovery) enqueue(ctx context.Context, stalled []stalledTx) (int, error) {
	keys := make(bson.A, len(stalled))
	for i, tx := range stalled {
		keys[i] = handlers.TransferUniqueKey(tx.ID)
	}
	cur, err := r.q.Collection().Find(ctx, bson.D{{Key: "uniqueKey", Value: bson.D{{Key: "$in", Value: keys}}}},
		options.Find().SetProjection(bson.D{{Key: "uniqueKey", Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("recovery: find the jobs of stalled transfers: %w", err)
	}
	var held []struct {
		UniqueKey string `bson:"uniqueKey"`
	}
	if err := cur.All(ctx, &held); err != nil {
		return 0, fmt.Errorf("recovery: read the jobs of stalled transfers: %w", err)
	}
	alive := make(map[string]bool, len(held))
	for _, h := range held {
		alive[h.UniqueKey] = true
	}
	var ins []queue.Insert
	var txs []stalledTx
	for _, tx := range stalled {
		key := handlers.TransferUniqueKey(tx.ID)
		if alive[key] {
			continue // its job is waiting, retrying or running
		}
		ins = append(ins, queue.Insert{
			Kind: handlers.TransferKind,
			Args: handlers.TransferArgs{TxID: tx.ID},
			Opts: queue.InsertOpts{UniqueKey: key},
		})
		txs = append(txs, tx)
	}
	if len(ins) == 0 {
		return 0, nil
	}
	res, err := r.q.EnqueueMany(ctx, ins)
	if err != nil {
		return 0, fmt.Errorf("recovery: enqueue jobs for stalled transfers: %w", err)
	}
	n := 0
	for i, rs := range res {
		if rs.Duplicate {
			continue // a job was enqueued for it in the meantime
		}
		n++
		r.log.Info("enqueued a job for a stalled transfer",
			zap.String("tx_id", txs[i].ID), zap.String("state", txs[i].State), zap.String("job_id", rs.ID))
	}
	return n, nil
}

// Run is a cron job: one pass, with its error logged.
func (r *TransferRecovery) Run() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := r.RunOnce(ctx); err != nil {
		r.log.Warn("transfer recovery pass failed; it runs again on schedule", zap.Error(err))
	}
}
