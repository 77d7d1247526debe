package handlers

import (
	"context"
	"fmt"
	"time"

	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
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
type TransferRecoveryConfig recovery.SweepConfig

// WithDefaults returns c with every unset field set to its default.
func (c TransferRecoveryConfig) WithDefaults() TransferRecoveryConfig {
	return TransferRecoveryConfig(recovery.SweepConfig(c).WithDefaults(recovery.SweepConfig{
		Schedule: DefaultTransferRecoverySchedule, Threshold: DefaultTransferRecoveryThreshold, Batch: DefaultTransferRecoveryBatch,
	}))
}

// Validate reports the first invalid field, naming it and its value.
func (c TransferRecoveryConfig) Validate() error {
	return recovery.SweepConfig(c).Validate("transferRecovery")
}

// TransferRecovery finishes transfers whose job was lost: a crash between
// writing a transaction and enqueueing its job, or a job that died (its
// attempts used up) with the transaction half done. Each stalled
// transaction gets a transfer job, which resumes it from the state it is
// in, taking it over from its dead owner.
type TransferRecovery struct {
	cfg  TransferRecoveryConfig
	txs  *mongo.Collection
	jobs *mongo.Collection // read only: which stalled transactions have a job
	q    *queue.Client
	log  *zap.Logger
}

// NewTransferRecovery returns a TransferRecovery for the transactions in db,
// enqueueing its jobs with q.
func NewTransferRecovery(db *mongo.Database, q *queue.Client, cfg TransferRecoveryConfig) (*TransferRecovery, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &TransferRecovery{
		cfg:  cfg,
		txs:  db.Collection(TransactionsCollection),
		jobs: db.Collection(q.CollectionName()),
		q:    q,
		log:  cfg.Logger.Named("transfer-recovery"),
	}, nil
}

// Schedule returns the pass's cron spec.
func (r *TransferRecovery) Schedule() string { return r.cfg.Schedule }

// RunOnce makes one pass: every transaction unfinished and unchanged for
// longer than the threshold gets a transfer job, unless an unfinished job
// for it exists already (the unique key TransferUniqueKey). It
// returns how many jobs it enqueued.
func (r *TransferRecovery) RunOnce(ctx context.Context) (int, error) {
	cutoff := time.Now().Add(-r.cfg.Threshold)
	states := make(bson.A, len(UnfinishedTxStates))
	for i, s := range UnfinishedTxStates {
		states[i] = s
	}
	enqueued := 0
	after := ""
	for {
		// A transfer job names its transaction by a string id: others are
		// not this pass's to drive.
		id := bson.D{{Key: "$type", Value: "string"}}
		if after != "" {
			id = append(id, bson.E{Key: "$gt", Value: after})
		}
		filter := bson.D{
			{Key: "state", Value: bson.D{{Key: "$in", Value: states}}},
			{Key: "lastModified", Value: bson.D{{Key: "$lt", Value: cutoff}}},
			{Key: "_id", Value: id},
		}
		cur, err := r.txs.Find(ctx, filter, options.Find().
			SetSort(bson.D{{Key: "_id", Value: 1}}).
			SetLimit(int64(r.cfg.Batch)).
			SetProjection(bson.D{{Key: "state", Value: 1}}))
		if err != nil {
			return enqueued, fmt.Errorf("recovery: find stalled transfers: %w", err)
		}
		stalled, read, err := r.decodeStalled(ctx, cur)
		if err != nil {
			return enqueued, err
		}
		n, err := r.enqueue(ctx, stalled)
		enqueued += n
		if err != nil {
			return enqueued, err
		}
		if read < r.cfg.Batch || len(stalled) == 0 {
			return enqueued, nil
		}
		after = stalled[len(stalled)-1].ID
	}
}

// stalledTx is a transaction the pass found stalled.
type stalledTx struct {
	ID    string `bson:"_id"`
	State string `bson:"state"`
}

// decodeStalled reads the transactions cur returns one by one, and returns
// those it can give a job and how many documents it read. Another
// application may have written a transaction whose id is not a string (a
// transfer job names its transaction by a string): it is skipped with a
// log line, and never stops the pass.
func (r *TransferRecovery) decodeStalled(ctx context.Context, cur *mongo.Cursor) ([]stalledTx, int, error) {
	defer closeCursor(ctx, cur)
	var stalled []stalledTx
	n := 0
	for cur.Next(ctx) {
		n++
		var tx stalledTx
		if err := bson.Unmarshal(cur.Current, &tx); err != nil {
			r.log.Warn("skipping a stalled transaction that no transfer job can name",
				zap.Stringer("id", cur.Current.Lookup("_id")), zap.Error(err))
			continue
		}
		stalled = append(stalled, tx)
	}
	if err := cur.Err(); err != nil {
		return nil, n, fmt.Errorf("recovery: read stalled transfers: %w", err)
	}
	return stalled, n, nil
}

// enqueue gives each of stalled a job unless it has an unfinished one, and
// returns how many jobs it added. The jobs that hold the transactions' keys
// are looked up first, in one query, so that a pass over transactions whose
// jobs are merely slow writes nothing; the unique key still settles a race
// with a job enqueued in between.
func (r *TransferRecovery) enqueue(ctx context.Context, stalled []stalledTx) (int, error) {
	keys := make(bson.A, len(stalled))
	for i, tx := range stalled {
		keys[i] = TransferUniqueKey(tx.ID)
	}
	cur, err := r.jobs.Find(ctx, bson.D{{Key: "uniqueKey", Value: bson.D{{Key: "$in", Value: keys}}}},
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
		key := TransferUniqueKey(tx.ID)
		if alive[key] {
			continue // its job is waiting, retrying or running
		}
		ins = append(ins, queue.Insert{
			Kind: TransferKind,
			Args: TransferArgs{TxID: tx.ID},
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
func (r *TransferRecovery) Run() { runPass(r.log, "transfer recovery pass", r.RunOnce) }
