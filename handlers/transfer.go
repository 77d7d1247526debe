package handlers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.uber.org/zap"
)

// Collections of the transfer handler.
const (
	// AccountsCollection holds the accounts.
	AccountsCollection = "accounts"
	// TransactionsCollection holds the transfers' transaction documents.
	TransactionsCollection = "transactions"
)

// TransferKind is the job kind that drives a transfer.
//
// A transfer moves money between two accounts with MongoDB's classic
// two-phase commit: one guarded single-document write at a time, so that it
// needs no multi-document transaction and any step can be repeated:
//
//	initial → pending → applied → done
//	          pending → canceling → cancelled
//
// An account is {_id, balance (int64 cents), pendingTransactions: [txId]}; a
// transaction is {_id, source, destination, value (int64 cents), state,
// lastModified, owner, reason, reverses}. A transfer that cannot apply (no
// such account, too little money, an amount that is not a positive whole
// number of cents) is rolled back to cancelled with a reason, and its job
// succeeds: the rollback is the transfer's correct outcome.
const TransferKind = "transfer"

// TxState is where a transfer's transaction is in its two-phase commit.
type TxState string

// The states of a transaction. A transfer that cannot apply is rolled back
// from pending; an applied transaction is only ever finished, never rolled
// back.
const (
	TxInitial   TxState = "initial"
	TxPending   TxState = "pending"
	TxApplied   TxState = "applied"
	TxDone      TxState = "done"
	TxCanceling TxState = "canceling"
	TxCancelled TxState = "cancelled"
)

// Finished reports whether s is a final state.
func (s TxState) Finished() bool { return s == TxDone || s == TxCancelled }

// UnfinishedTxStates are the states a transaction can stall in; the
// recovery pass gives a stalled one a job.
var UnfinishedTxStates = []TxState{TxInitial, TxPending, TxApplied, TxCanceling}

// Account is one document of the accounts collection.
type Account struct {
	// ID names the account.
	ID string `bson:"_id"`
	// Balance is in cents.
	Balance int64 `bson:"balance"`
	// PendingTransactions are the transfers applied to the balance but not
	// yet finished.
	PendingTransactions []string `bson:"pendingTransactions"`
}

// Transaction is one document of the transactions collection, as
// EnqueueTransfer writes it.
type Transaction struct {
	// ID is a UUID, or ReversalID of the transaction a reversal undoes.
	ID string `bson:"_id"`
	// Source is the account debited.
	Source string `bson:"source"`
	// Destination is the account credited.
	Destination string `bson:"destination"`
	// Value is the amount in cents, a 64-bit integer: any other BSON type
	// cancels the transfer.
	Value int64 `bson:"value"`
	// State is the transaction's state.
	State TxState `bson:"state"`
	// LastModified is the time of the last change of state.
	LastModified time.Time `bson:"lastModified"`
	// Owner is the id of the job that drives the transaction, set when it
	// leaves initial.
	Owner string `bson:"owner,omitempty"`
	// Reason says why a cancelled transaction was rolled back.
	Reason string `bson:"reason,omitempty"`
	// Reverses is the transaction that this one reverses.
	Reverses string `bson:"reverses,omitempty"`
}

// TransferArgs are the args of a transfer job: the transaction it drives.
type TransferArgs struct {
	TxID string `bson:"txId"`
}

// Kind implements jobs.Args.
func (TransferArgs) Kind() string { return TransferKind }

// Validate implements jobs.Validator.
func (a TransferArgs) Validate() error {
	if a.TxID == "" {
		return jobs.InvalidArgs("txId", "must not be empty")
	}
	return nil
}

// TransferUniqueKey is the unique key of the job that drives transaction
// txID: at most one unfinished job drives a transaction.
func TransferUniqueKey(txID string) string { return "transfer:" + txID }

// ReversalID is the id of the transaction that reverses txID. It is fixed
// so that a transaction can be reversed only once.
func ReversalID(txID string) string { return "reverse:" + txID }

// Errors of EnqueueTransfer and EnqueueReverse.
var (
	// ErrInvalidTransfer: the amount or the accounts can never make a
	// transfer.
	ErrInvalidTransfer = errors.New("invalid transfer")
	// ErrAccountNotFound: an account of the transfer does not exist.
	ErrAccountNotFound = errors.New("account not found")
	// ErrTransactionNotFound: no transaction has the id given.
	ErrTransactionNotFound = errors.New("transaction not found")
	// ErrNotReversible: only a done transaction can be reversed.
	ErrNotReversible = errors.New("transaction cannot be reversed")
	// ErrAlreadyReversed: the transaction's reversal exists and has
	// finished (done, or cancelled with a reason).
	ErrAlreadyReversed = errors.New("transaction already reversed")
)

// transferColls returns the accounts and transactions collections of db,
// writing with majority: money is not written with a weaker concern.
func transferColls(db *mongo.Database) (accounts, txs *mongo.Collection) {
	o := options.Collection().SetWriteConcern(writeconcern.Majority())
	return db.Collection(AccountsCollection, o), db.Collection(TransactionsCollection, o)
}

// EnqueueTransfer writes a transaction moving amount cents from account
// from to account to, and enqueues the job that applies it. It checks what
// can be checked now (a positive amount, two distinct accounts that exist);
// whether the source has the funds is decided when the job applies it.
//
// The transaction is written first. If the enqueue then fails, txID is
// returned with the error: the transaction stays initial, and the transfer
// recovery pass gives it a job once it is older than its threshold.
func EnqueueTransfer(ctx context.Context, db *mongo.Database, q *queue.Client, from, to string, amount int64) (txID, jobID string, err error) {
	if err := checkTransfer(ctx, db, from, to, amount); err != nil {
		return "", "", err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return "", "", fmt.Errorf("handlers: transfer: new id: %w", err)
	}
	tx := Transaction{ID: id.String(), Source: from, Destination: to, Value: amount, State: TxInitial, LastModified: time.Now().UTC()}
	_, txs := transferColls(db)
	if _, err := txs.InsertOne(ctx, tx); err != nil {
		return "", "", fmt.Errorf("handlers: transfer: insert transaction: %w", err)
	}
	jobID, err = enqueueTransferJob(ctx, q, tx.ID)
	return tx.ID, jobID, err
}

// checkTransfer returns an error wrapping ErrInvalidTransfer when from, to
// and amount can never make a transfer.
func checkTransfer(ctx context.Context, db *mongo.Database, from, to string, amount int64) error {
	switch {
	case amount <= 0:
		return fmt.Errorf("handlers: %w: amount %d must be a positive number of cents", ErrInvalidTransfer, amount)
	case from == "" || to == "":
		return fmt.Errorf("handlers: %w: source and destination accounts must not be empty", ErrInvalidTransfer)
	case from == to:
		return fmt.Errorf("handlers: %w: source and destination are the same account %q", ErrInvalidTransfer, from)
	}
	accounts, _ := transferColls(db)
	cur, err := accounts.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{from, to}}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return fmt.Errorf("handlers: transfer: look up accounts: %w", err)
	}
	var found []Account
	if err := cur.All(ctx, &found); err != nil {
		return fmt.Errorf("handlers: transfer: look up accounts: %w", err)
	}
	for _, want := range []string{from, to} {
		if !slices.ContainsFunc(found, func(a Account) bool { return a.ID == want }) {
			return fmt.Errorf("handlers: %w: %w: %q", ErrInvalidTransfer, ErrAccountNotFound, want)
		}
	}
	return nil
}

func enqueueTransferJob(ctx context.Context, q *queue.Client, txID string) (string, error) {
	res, err := q.Enqueue(ctx, TransferKind, TransferArgs{TxID: txID}, queue.InsertOpts{UniqueKey: TransferUniqueKey(txID)})
	if err != nil {
		return "", fmt.Errorf("handlers: transfer %s: enqueue its job (the transfer recovery pass will give it one): %w", txID, err)
	}
	return res.ID, nil
}

// EnqueueReverse enqueues a new transfer that undoes the done transaction
// txID: the same amount, the other way, recorded with reverses: txID.
//
// The reversal's id is ReversalID(txID), so a transaction is reversed at
// most once however often, or however concurrently, this is called. A call
// for a transaction whose reversal exists but has not finished is a retry:
// it returns the reversal and the job that drives it (enqueueing one if a
// crash lost it). Once the reversal has finished, the call fails with
// ErrAlreadyReversed and returns the reversal's id.
func EnqueueReverse(ctx context.Context, db *mongo.Database, q *queue.Client, txID string) (newTxID, jobID string, err error) {
	_, txs := transferColls(db)
	var orig struct {
		Source      string  `bson:"source"`
		Destination string  `bson:"destination"`
		Value       int64   `bson:"value"`
		State       TxState `bson:"state"`
	}
	err = txs.FindOne(ctx, bson.D{{Key: "_id", Value: txID}}).Decode(&orig)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return "", "", fmt.Errorf("handlers: reverse %s: %w", txID, ErrTransactionNotFound)
	}
	if err != nil {
		return "", "", fmt.Errorf("handlers: reverse %s: %w", txID, err)
	}
	if orig.State != TxDone {
		return "", "", fmt.Errorf("handlers: reverse %s: %w: it is %s, not done", txID, ErrNotReversible, orig.State)
	}
	rev := Transaction{
		ID:           ReversalID(txID),
		Source:       orig.Destination,
		Destination:  orig.Source,
		Value:        orig.Value,
		State:        TxInitial,
		LastModified: time.Now().UTC(),
		Reverses:     txID,
	}
	_, err = txs.InsertOne(ctx, rev)
	if mongo.IsDuplicateKeyError(err) {
		var existing struct {
			State  TxState `bson:"state"`
			Reason string  `bson:"reason"`
		}
		if err := txs.FindOne(ctx, bson.D{{Key: "_id", Value: rev.ID}}).Decode(&existing); err != nil {
			return "", "", fmt.Errorf("handlers: reverse %s: read reversal %s: %w", txID, rev.ID, err)
		}
		if existing.State.Finished() {
			msg := string(existing.State)
			if existing.Reason != "" {
				msg += ": " + existing.Reason
			}
			return rev.ID, "", fmt.Errorf("handlers: reverse %s: %w by %s (%s)", txID, ErrAlreadyReversed, rev.ID, msg)
		}
	} else if err != nil {
		return "", "", fmt.Errorf("handlers: reverse %s: insert reversal: %w", txID, err)
	}
	jobID, err = enqueueTransferJob(ctx, q, rev.ID)
	return rev.ID, jobID, err
}

// setupTransfer creates the index the transfer recovery pass needs.
func setupTransfer(ctx context.Context, db *mongo.Database) error {
	_, txs := transferColls(db)
	err := queue.EnsureIndexes(ctx, txs, []mongo.IndexModel{{
		Keys:    bson.D{{Key: "state", Value: 1}, {Key: "lastModified", Value: 1}},
		Options: options.Index().SetName("state_lastModified"),
	}})
	if err != nil {
		return fmt.Errorf("handlers: create index on %s: %w", TransactionsCollection, err)
	}
	return nil
}

// registerTransfer adds the transfer handler to reg.
func registerTransfer(reg *jobs.Registry, d Deps) error {
	accounts, txs := transferColls(d.DB)
	h := &transferHandler{d: d, accounts: accounts, txs: txs, log: d.logger().Named("transfer")}
	return jobs.Register(reg, h.work, jobs.KindOptions{})
}

// ErrTransferOwned is returned by a transfer job whose transaction is held
// by another job that is still alive. It is not permanent: the job retries
// and finds the transaction finished, or takes it over once the holder has
// finished without finishing it.
var ErrTransferOwned = errors.New("transaction is owned by another live job")

// maxTransitions bounds one attempt: a transfer takes three changes of
// state at most, plus a takeover and a few lost races.
const maxTransitions = 16

// transferHandler runs transfer jobs.
type transferHandler struct {
	d        Deps
	accounts *mongo.Collection
	txs      *mongo.Collection
	log      *zap.Logger
}

// work drives the transaction from whatever state it is in to done or
// cancelled. Each write is guarded so that repeating it is a no-op, and every
// change of the transaction's state is fenced on the owner: only the job
// that moved it to pending (or took it over from a finished job) drives it,
// in any of its attempts.
//
// The account writes cannot be fenced on the owner (that would take a
// multi-document transaction): they rely on the worker cancelling the
// handler's context when the job's lease is lost, so an attempt that has
// lost its job stops within a heartbeat.
func (h *transferHandler) work(ctx context.Context, job *jobs.Job, args TransferArgs) error {
	log := h.log.With(job.LogFields(zap.String("tx_id", args.TxID))...)
	tx, err := h.load(ctx, args.TxID)
	if err != nil {
		return err
	}
	for range maxTransitions {
		if tx.stale { // a guarded write matched nothing: see what changed
			if tx, err = h.load(ctx, args.TxID); err != nil {
				return err
			}
		}
		switch tx.state {
		case TxDone, TxCancelled:
			log.Debug("transfer finished", zap.String("state", string(tx.state)), zap.String("reason", tx.reason))
			return nil
		case TxInitial:
			if err := h.begin(ctx, job, &tx); err != nil {
				return err
			}
			continue
		case TxPending, TxApplied, TxCanceling:
		default:
			return jobs.Permanent(fmt.Errorf("transaction %s: unknown state %q", tx.id, tx.state))
		}
		if !tx.hasOwner || tx.owner != job.ID {
			if err := h.takeOver(ctx, job, &tx, log); err != nil {
				return err
			}
			continue
		}
		switch tx.state {
		case TxPending:
			err = h.apply(ctx, job, &tx, log)
		case TxApplied:
			err = h.commit(ctx, job, &tx)
		case TxCanceling:
			err = h.rollback(ctx, job, &tx)
		}
		if err != nil {
			return err
		}
	}
	return fmt.Errorf("transaction %s: not finished after %d state changes; retrying", args.TxID, maxTransitions)
}

// txDoc is a transaction as read, with its value checked by BSON type.
type txDoc struct {
	id          string
	state       TxState
	source      string
	destination string
	value       int64
	owner       string
	hasOwner    bool
	reason      string
	// invalid says why the transaction can never apply; empty when it can.
	invalid string
	// accountsOK is false when source or destination is not an account id,
	// so the transaction cannot have touched any account.
	accountsOK bool
	// stale is set when a guarded write to the transaction matched nothing:
	// it changed under us and must be read again.
	stale bool
}

func (h *transferHandler) load(ctx context.Context, id string) (txDoc, error) {
	raw, err := h.txs.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return txDoc{}, jobs.InvalidArgs("txId", "no transaction %q", id)
	}
	if err != nil {
		return txDoc{}, fmt.Errorf("read transaction %s: %w", id, err)
	}
	return parseTx(id, raw), nil
}

// parseTx reads the fields of a transaction from its raw BSON, deciding by
// type: an amount is a whole number of cents, so a double (even 5.0), a
// string or a missing value makes the transaction invalid.
func parseTx(id string, raw bson.Raw) txDoc {
	tx := txDoc{id: id}
	str := func(key string) (string, bool) {
		return raw.Lookup(key).StringValueOK()
	}
	state, _ := str("state")
	tx.state = TxState(state)
	tx.owner, tx.hasOwner = str("owner")
	tx.reason, _ = str("reason")
	var problems []string
	src, srcOK := str("source")
	dst, dstOK := str("destination")
	tx.source, tx.destination = src, dst
	tx.accountsOK = srcOK && dstOK && src != "" && dst != ""
	if !srcOK || src == "" {
		problems = append(problems, "source: "+describeNonString(raw.Lookup("source"), src))
	}
	if !dstOK || dst == "" {
		problems = append(problems, "destination: "+describeNonString(raw.Lookup("destination"), dst))
	}
	if tx.accountsOK && src == dst {
		problems = append(problems, fmt.Sprintf("source and destination: the same account %q", src))
	}
	v := raw.Lookup("value")
	switch v.Type {
	case bson.TypeInt64:
		tx.value = v.Int64()
	case bson.TypeInt32:
		tx.value = int64(v.Int32())
	}
	switch {
	case v.Type == 0:
		problems = append(problems, "value: missing; want a positive 64-bit integer number of cents")
	case v.Type != bson.TypeInt64 && v.Type != bson.TypeInt32:
		problems = append(problems, fmt.Sprintf("value: %s is not a whole number of cents; want a positive 64-bit integer", describeValue(v)))
	case tx.value <= 0:
		problems = append(problems, fmt.Sprintf("value: %d must be a positive number of cents", tx.value))
	}
	if len(problems) > 0 {
		tx.invalid = problems[0]
		for _, p := range problems[1:] {
			tx.invalid += "; " + p
		}
	}
	return tx
}

func describeNonString(v bson.RawValue, s string) string {
	switch {
	case v.Type == 0:
		return "missing; want an account id"
	case v.Type != bson.TypeString:
		return describeValue(v) + " is not an account id"
	case s == "":
		return "empty; want an account id"
	}
	return "invalid"
}

// describeValue names v's BSON type and shows its value.
func describeValue(v bson.RawValue) string {
	switch v.Type {
	case bson.TypeNull:
		return "null"
	case bson.TypeDouble:
		return "double " + strconv.FormatFloat(v.Double(), 'g', -1, 64)
	case bson.TypeString:
		return "string " + strconv.Quote(v.StringValue())
	}
	return v.Type.String() + " " + v.String()
}

// txFilter matches transaction tx in state s while job owns it.
func txFilter(tx *txDoc, s TxState, job *jobs.Job) bson.D {
	return bson.D{{Key: "_id", Value: tx.id}, {Key: "state", Value: s}, {Key: "owner", Value: job.ID}}
}

// moveTx changes the state of tx to to, fenced on filter, also setting
// owner or reason when given, and reports the step. A write that matches
// nothing is not an error: it marks tx stale, and the caller reads the
// transaction again and acts on what it finds.
func (h *transferHandler) moveTx(ctx context.Context, tx *txDoc, filter bson.D, to TxState, step string, set ...bson.E) error {
	set = append(bson.D{{Key: "state", Value: to}}, set...)
	res, err := h.txs.UpdateOne(ctx, filter, bson.D{
		{Key: "$set", Value: set},
		{Key: "$currentDate", Value: bson.D{{Key: "lastModified", Value: true}}},
	})
	if err != nil {
		return fmt.Errorf("transaction %s: %s: %w", tx.id, step, err)
	}
	if res.MatchedCount == 1 {
		tx.state = to
		for _, e := range set {
			switch e.Key {
			case "owner":
				tx.owner, tx.hasOwner = e.Value.(string), true
			case "reason":
				tx.reason = e.Value.(string)
			}
		}
	} else {
		tx.stale = true
	}
	return h.d.step(ctx, step)
}

// begin moves an initial transaction to pending, making job its owner.
func (h *transferHandler) begin(ctx context.Context, job *jobs.Job, tx *txDoc) error {
	filter := bson.D{{Key: "_id", Value: tx.id}, {Key: "state", Value: TxInitial}}
	return h.moveTx(ctx, tx, filter, TxPending, "transfer:pending", bson.E{Key: "owner", Value: job.ID})
}

// takeOver makes job the owner of tx when the job that owns it has finished
// (succeeded, dead, cancelled) or is gone, so it will never drive tx again.
// While the owner is alive (waiting to run, retrying, running) tx is left to
// it and ErrTransferOwned is returned.
func (h *transferHandler) takeOver(ctx context.Context, job *jobs.Job, tx *txDoc, log *zap.Logger) error {
	filter := bson.D{{Key: "_id", Value: tx.id}, {Key: "state", Value: tx.state}}
	if tx.hasOwner {
		owner, err := h.d.Queue.Get(ctx, tx.owner)
		switch {
		case errors.Is(err, queue.ErrNotFound):
		case err != nil:
			return fmt.Errorf("transaction %s: look up its owner: %w", tx.id, err)
		case !owner.State.Finished():
			return fmt.Errorf("transaction %s is %s and held by job %s (%s): %w", tx.id, tx.state, tx.owner, owner.State, ErrTransferOwned)
		}
		filter = append(filter, bson.E{Key: "owner", Value: tx.owner})
	} else {
		filter = append(filter, bson.E{Key: "owner", Value: bson.D{{Key: "$exists", Value: false}}})
	}
	res, err := h.txs.UpdateOne(ctx, filter, bson.D{
		{Key: "$set", Value: bson.D{{Key: "owner", Value: job.ID}}},
		{Key: "$currentDate", Value: bson.D{{Key: "lastModified", Value: true}}},
	})
	if err != nil {
		return fmt.Errorf("transaction %s: take over from job %s: %w", tx.id, tx.owner, err)
	}
	if res.MatchedCount == 1 {
		tx.owner, tx.hasOwner = job.ID, true
		log.Info("took over a transaction whose job has finished", zap.String("previous_owner", tx.owner), zap.String("state", string(tx.state)))
	} else {
		tx.stale = true
	}
	return h.d.step(ctx, "transfer:takeover")
}

// apply debits the source and credits the destination of a pending
// transaction, then marks it applied. A transaction that cannot apply is
// moved to canceling with the reason.
func (h *transferHandler) apply(ctx context.Context, job *jobs.Job, tx *txDoc, log *zap.Logger) error {
	if tx.invalid != "" {
		return h.cancel(ctx, job, tx, tx.invalid, log)
	}
	for _, side := range []func(context.Context, *txDoc) (string, error){h.debit, h.credit} {
		reason, err := side(ctx, tx)
		if err != nil {
			return err
		}
		if reason != "" {
			return h.cancel(ctx, job, tx, reason, log)
		}
	}
	return h.moveTx(ctx, tx, txFilter(tx, TxPending, job), TxApplied, "transfer:applied")
}

// cancel moves a pending transaction to canceling, recording why.
func (h *transferHandler) cancel(ctx context.Context, job *jobs.Job, tx *txDoc, reason string, log *zap.Logger) error {
	log.Info("rolling back a transfer that cannot apply", zap.String("reason", reason))
	return h.moveTx(ctx, tx, txFilter(tx, TxPending, job), TxCanceling, "transfer:canceling", bson.E{Key: "reason", Value: reason})
}

// notPending matches the account while tx is not among its pending
// transactions.
func notPending(account, txID string) bson.D {
	return bson.D{{Key: "_id", Value: account}, {Key: "pendingTransactions", Value: bson.D{{Key: "$ne", Value: txID}}}}
}

// isPending matches the account while tx is among its pending transactions.
func isPending(account, txID string) bson.D {
	return bson.D{{Key: "_id", Value: account}, {Key: "pendingTransactions", Value: txID}}
}

// change adds delta to the balance and pushes or pulls tx.
func change(delta int64, op, txID string) bson.D {
	return bson.D{
		{Key: "$inc", Value: bson.D{{Key: "balance", Value: delta}}},
		{Key: op, Value: bson.D{{Key: "pendingTransactions", Value: txID}}},
	}
}

// debit takes the value from the source unless it was taken already. It
// returns a reason when the transfer cannot apply: no such account, or not
// enough money.
func (h *transferHandler) debit(ctx context.Context, tx *txDoc) (string, error) {
	for range 3 {
		filter := append(notPending(tx.source, tx.id), bson.E{Key: "balance", Value: bson.D{{Key: "$gte", Value: tx.value}}})
		res, err := h.accounts.UpdateOne(ctx, filter, change(-tx.value, "$push", tx.id))
		if err != nil {
			return "", fmt.Errorf("transaction %s: debit %s: %w", tx.id, tx.source, err)
		}
		if err := h.d.step(ctx, "transfer:debit"); err != nil {
			return "", err
		}
		if res.MatchedCount == 1 {
			return "", nil
		}
		// Nothing matched: applied already, no such account, or too little
		// money. Only reading the account tells them apart.
		acct, found, err := h.account(ctx, tx.source)
		switch {
		case err != nil:
			return "", err
		case !found:
			return fmt.Sprintf("source account %q not found", tx.source), nil
		case slices.Contains(acct.PendingTransactions, tx.id):
			return "", nil
		case acct.Balance < tx.value:
			return fmt.Sprintf("insufficient funds: source account %q has %d cents, the transfer needs %d", tx.source, acct.Balance, tx.value), nil
		}
		// The balance changed between the write and the read: try again.
	}
	return "", fmt.Errorf("transaction %s: debit %s: the balance kept changing; retrying", tx.id, tx.source)
}

// credit adds the value to the destination unless it was added already. It
// returns a reason when the transfer cannot apply: no such account.
func (h *transferHandler) credit(ctx context.Context, tx *txDoc) (string, error) {
	res, err := h.accounts.UpdateOne(ctx, notPending(tx.destination, tx.id), change(tx.value, "$push", tx.id))
	if err != nil {
		return "", fmt.Errorf("transaction %s: credit %s: %w", tx.id, tx.destination, err)
	}
	if err := h.d.step(ctx, "transfer:credit"); err != nil {
		return "", err
	}
	if res.MatchedCount == 1 {
		return "", nil
	}
	acct, found, err := h.account(ctx, tx.destination)
	switch {
	case err != nil:
		return "", err
	case !found:
		return fmt.Sprintf("destination account %q not found", tx.destination), nil
	case slices.Contains(acct.PendingTransactions, tx.id):
		return "", nil
	}
	return "", fmt.Errorf("transaction %s: credit %s matched nothing, yet the account exists without it; retrying", tx.id, tx.destination)
}

func (h *transferHandler) account(ctx context.Context, id string) (Account, bool, error) {
	var a Account
	err := h.accounts.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&a)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return a, false, nil
	}
	if err != nil {
		return a, false, fmt.Errorf("read account %s: %w", id, err)
	}
	return a, true, nil
}

// commit removes an applied transaction from both accounts' pending lists
// and marks it done.
func (h *transferHandler) commit(ctx context.Context, job *jobs.Job, tx *txDoc) error {
	for _, side := range []struct{ account, step string }{
		{tx.source, "transfer:pull-source"},
		{tx.destination, "transfer:pull-destination"},
	} {
		_, err := h.accounts.UpdateOne(ctx, isPending(side.account, tx.id),
			bson.D{{Key: "$pull", Value: bson.D{{Key: "pendingTransactions", Value: tx.id}}}})
		if err != nil {
			return fmt.Errorf("transaction %s: %s: %w", tx.id, side.step, err)
		}
		if err := h.d.step(ctx, side.step); err != nil {
			return err
		}
	}
	return h.moveTx(ctx, tx, txFilter(tx, TxApplied, job), TxDone, "transfer:done")
}

// rollback undoes whichever side of a canceling transaction was applied and
// marks it cancelled.
func (h *transferHandler) rollback(ctx context.Context, job *jobs.Job, tx *txDoc) error {
	// A transaction whose value or accounts are unusable never touched an
	// account: there is nothing to undo.
	if tx.accountsOK && tx.value > 0 {
		for _, side := range []struct {
			account string
			delta   int64
			step    string
		}{
			{tx.source, tx.value, "transfer:undo-source"},
			{tx.destination, -tx.value, "transfer:undo-destination"},
		} {
			_, err := h.accounts.UpdateOne(ctx, isPending(side.account, tx.id), change(side.delta, "$pull", tx.id))
			if err != nil {
				return fmt.Errorf("transaction %s: %s: %w", tx.id, side.step, err)
			}
			if err := h.d.step(ctx, side.step); err != nil {
				return err
			}
		}
	}
	return h.moveTx(ctx, tx, txFilter(tx, TxCanceling, job), TxCancelled, "transfer:cancelled")
}
