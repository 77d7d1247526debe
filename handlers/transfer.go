package handlers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
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
	// OwnerLease is the lease token of the attempt of Owner that drives the
	// transaction: every change of state is fenced on it.
	OwnerLease string `bson:"ownerLease,omitempty"`
	// Applying is set once an attempt has started to apply the transfer;
	// from then on it can no longer be cancelled by request.
	Applying bool `bson:"applying,omitempty"`
	// CancelRequestedAt is set by CancelTransfer: the transfer is rolled
	// back instead of applied.
	CancelRequestedAt *time.Time `bson:"cancelRequestedAt,omitempty"`
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

// Errors of EnqueueTransfer, EnqueueTransferRequest and EnqueueReverse.
var (
	// ErrInvalidTransfer: the amount or the accounts can never make a
	// transfer.
	ErrInvalidTransfer = errors.New("invalid transfer")
	// ErrTransactionExists: a transaction of the id a TransferRequest
	// gives exists with other accounts or amount.
	ErrTransactionExists = errors.New("transaction id taken")
	// ErrAccountNotFound: an account of the transfer does not exist.
	ErrAccountNotFound = errors.New("account not found")
	// ErrTransactionNotFound: no transaction has the id given.
	ErrTransactionNotFound = errors.New("transaction not found")
	// ErrNotReversible: only a done transaction can be reversed.
	ErrNotReversible = errors.New("transaction cannot be reversed")
	// ErrAlreadyReversed: the transaction's reversal exists and has
	// finished (done, or cancelled with a reason).
	ErrAlreadyReversed = errors.New("transaction already reversed")
	// ErrNotCancellable: the transfer has started applying, or has
	// finished; a done transfer can be reversed instead.
	ErrNotCancellable = fmt.Errorf("transfer %w", queue.ErrNotCancellable)
)

// transferColls returns the accounts and transactions collections of db,
// writing with majority (money is not written with a weaker concern) and
// reading from the primary, whatever the URI asks: every read decides a
// write.
func transferColls(db *mongo.Database) (accounts, txs *mongo.Collection) {
	o := options.Collection().SetWriteConcern(writeconcern.Majority()).SetReadPreference(readpref.Primary())
	return db.Collection(AccountsCollection, o), db.Collection(TransactionsCollection, o)
}

// EnqueueTransfer writes a transaction moving amount cents from account
// from to account to, and enqueues the job that applies it. It checks what
// can be checked now (a positive amount, two distinct accounts that exist);
// whether the source has the funds is decided when the job applies it.
//
// Each call makes a new transaction, of a new id. After an error, txID is
// that id when the transaction may have been written (its reply lost): send
// the request again with EnqueueTransferRequest and that TxID, never with
// EnqueueTransfer, which would move the money twice.
//
// The transaction is written first. If the enqueue then fails, txID is
// returned with the error: the transaction stays initial, and the transfer
// recovery pass gives it a job once it is older than its threshold.
func EnqueueTransfer(ctx context.Context, db *mongo.Database, q *queue.Client, from, to string, amount int64) (txID, jobID string, err error) {
	return EnqueueTransferRequest(ctx, db, q, TransferRequest{From: from, To: to, Amount: amount})
}

// TransferRequest is a transfer an app asks EnqueueTransferRequest for.
type TransferRequest struct {
	// TxID is the transaction's id and the request's idempotency key: a
	// request sent again with the same TxID (after an error whose reply
	// may have been lost) finds the transaction the first send wrote and
	// makes no second one. At most MaxTxIDBytes bytes, not starting with
	// "reverse:" (ReversalID's). Defaults to a new UUID.
	TxID string
	// From is the account debited.
	From string
	// To is the account credited.
	To string
	// Amount is in cents, positive.
	Amount int64
}

// MaxTxIDBytes is the longest TransferRequest.TxID.
const MaxTxIDBytes = 200

// EnqueueTransferRequest is EnqueueTransfer of r, safe to send again: when
// the transaction r.TxID exists as r asks for (an earlier send wrote it),
// it writes nothing new and returns it with the job that drives it (if
// none does while it is unfinished, it enqueues one; once it has finished,
// jobID is the job that drove it). A transaction r.TxID of other accounts
// or amount fails the call with ErrTransactionExists. After any other
// error, txID is the id to send the request again with.
func EnqueueTransferRequest(ctx context.Context, db *mongo.Database, q *queue.Client, r TransferRequest) (txID, jobID string, err error) {
	if err := r.checkID(); err != nil {
		return "", "", err
	}
	if err := checkTransfer(ctx, db, r.From, r.To, r.Amount); err != nil {
		return "", "", err
	}
	if r.TxID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return "", "", fmt.Errorf("handlers: transfer: new id: %w", err)
		}
		r.TxID = id.String()
	}
	tx := Transaction{ID: r.TxID, Source: r.From, Destination: r.To, Value: r.Amount, State: TxInitial, LastModified: time.Now().UTC()}
	_, txs := transferColls(db)
	_, err = txs.InsertOne(ctx, tx)
	if mongo.IsDuplicateKeyError(err) {
		return r.resent(ctx, txs, q)
	}
	if err != nil {
		return tx.ID, "", fmt.Errorf("handlers: transfer %s: insert transaction (send the request again with this id): %w", tx.ID, err)
	}
	jobID, err = enqueueTransferJob(ctx, q, tx.ID)
	return tx.ID, jobID, err
}

// checkID returns an error wrapping ErrInvalidTransfer when r's TxID
// cannot name a transfer.
func (r TransferRequest) checkID() error {
	switch {
	case len(r.TxID) > MaxTxIDBytes:
		return fmt.Errorf("handlers: %w: transaction id of %d bytes, more than %d", ErrInvalidTransfer, len(r.TxID), MaxTxIDBytes)
	case strings.HasPrefix(r.TxID, ReversalID("")):
		return fmt.Errorf("handlers: %w: transaction id %q starts with %q, which names reversals", ErrInvalidTransfer, r.TxID, ReversalID(""))
	}
	return nil
}

// resent answers r once its insert found the transaction r.TxID there: an
// earlier send of r wrote it, or another request holds the id.
func (r TransferRequest) resent(ctx context.Context, txs *mongo.Collection, q *queue.Client) (txID, jobID string, err error) {
	raw, err := txs.FindOne(ctx, bson.D{{Key: "_id", Value: r.TxID}}).Raw()
	if err != nil {
		return r.TxID, "", fmt.Errorf("handlers: transfer %s: read the transaction an earlier send wrote: %w", r.TxID, err)
	}
	if !r.madeBy(raw) {
		return "", "", fmt.Errorf("handlers: transfer %s: %w with other accounts or amount", r.TxID, ErrTransactionExists)
	}
	if st, _ := raw.Lookup("state").StringValueOK(); TxState(st).Finished() {
		owner, _ := raw.Lookup("owner").StringValueOK()
		return r.TxID, owner, nil
	}
	jobID, err = enqueueTransferJob(ctx, q, r.TxID)
	return r.TxID, jobID, err
}

// madeBy reports whether the transaction tx is the transfer r asks for.
func (r TransferRequest) madeBy(tx bson.Raw) bool {
	src, _ := tx.Lookup("source").StringValueOK()
	dst, _ := tx.Lookup("destination").StringValueOK()
	v, ok := tx.Lookup("value").Int64OK()
	_, noReverses := tx.LookupErr("reverses")
	return ok && v == r.Amount && src == r.From && dst == r.To && noReverses != nil
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

// CancelTransfer asks for the transaction txID to be rolled back instead of
// applied. It is accepted while the transfer is initial, or pending and not
// yet applying: from then on no attempt applies it, and the job that drives
// it (or, if that job is cancelled, the one the transfer recovery pass
// gives it) moves it to cancelled with the reason "cancelled by request".
// Asking again, or for a transfer already rolled back, changes nothing.
// Once an attempt has started to apply the transfer, or it is done, the
// request is refused with ErrNotCancellable: reverse a done transfer with
// EnqueueReverse.
func CancelTransfer(ctx context.Context, db *mongo.Database, txID string) error {
	_, txs := transferColls(db)
	res, err := txs.UpdateOne(ctx, bson.D{
		{Key: "_id", Value: txID},
		{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{TxInitial, TxPending}}}},
		{Key: "applying", Value: bson.D{{Key: "$exists", Value: false}}},
		{Key: "cancelRequestedAt", Value: bson.D{{Key: "$exists", Value: false}}},
	}, bson.D{{Key: "$set", Value: bson.D{{Key: "cancelRequestedAt", Value: time.Now().UTC()}}}})
	if err != nil {
		return fmt.Errorf("handlers: cancel transfer %s: %w", txID, err)
	}
	if res.MatchedCount == 1 {
		return nil
	}
	var tx struct {
		State     TxState    `bson:"state"`
		Applying  bool       `bson:"applying"`
		Requested *time.Time `bson:"cancelRequestedAt"`
	}
	err = txs.FindOne(ctx, bson.D{{Key: "_id", Value: txID}}).Decode(&tx)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return fmt.Errorf("handlers: cancel transfer %s: %w", txID, ErrTransactionNotFound)
	case err != nil:
		return fmt.Errorf("handlers: cancel transfer %s: %w", txID, err)
	case tx.State == TxCanceling || tx.State == TxCancelled:
		return nil
	case tx.Requested != nil && !tx.Applying:
		return nil // asked before
	case tx.State == TxDone:
		return fmt.Errorf("handlers: cancel transfer %s: %w: it is done; undo it with a reversal (enqueue transfer --reverse %s)", txID, ErrNotCancellable, txID)
	}
	return fmt.Errorf("handlers: cancel transfer %s: %w: it is %s and has started applying; once it is done, undo it with a reversal (enqueue transfer --reverse %s)",
		txID, ErrNotCancellable, tx.State, txID)
}

// CancelHooks registers on q the cancel hooks of docket's kinds: before a
// transfer job is cancelled, its transfer is cancelled with CancelTransfer
// (cancelling only the job would leave the transaction to the transfer
// recovery pass, which would finish it). A transfer that can no longer be
// cancelled leaves its job untouched, and the cancel returns
// ErrNotCancellable. Register calls it; a program that only cancels
// (docketctl, the dashboard) calls it on its own queue client.
func CancelHooks(q *queue.Client, db *mongo.Database) {
	q.OnCancel(TransferKind, func(ctx context.Context, id queue.JobID, args bson.Raw) error {
		if _, ok := id.StringID(); !ok {
			return fmt.Errorf("%w: a transfer job whose id is not a string was not enqueued by docket, and its transfer cannot be cancelled with it", ErrNotCancellable)
		}
		if args == nil {
			return errors.New("args: not a document")
		}
		a, err := jobs.DecodeArgs[TransferArgs](args)
		if err != nil {
			return err
		}
		return CancelTransfer(ctx, db, a.TxID)
	})
}
