package handlers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// How a transfer stays exact when its attempts stall.
//
// A process can stall (SIGSTOP, a VM pause, a long GC) between any two of
// its writes, for any length of time, and resume after other attempts of the
// same job have finished the transfer. Without a multi-document transaction
// an account write cannot check the transaction's state, so every write is
// fenced on the attempt in two ways:
//
//   - The transaction records the attempt that drives it: owner (the job)
//     and ownerLease (the lease token of that job's attempt). Every change of
//     the transaction's state is fenced on both, so only the attempt that
//     holds it moves it. An attempt takes a transaction over from an earlier
//     attempt of its own job only while it still holds the job's lease, and
//     from another job only once that job has finished.
//   - Every account carries a version that each of docket's writes to it
//     increments. An attempt applies a side of the transfer with a write
//     conditioned on the version it read, and it reads the account before it
//     confirms, with a write fenced on its hold, that the transaction is still
//     pending and still its own. Once the transaction leaves pending, every
//     account it touches is written again (pulled, undone, or just fenced),
//     which changes its version: a late write by an attempt that read the
//     account earlier then matches nothing. An attempt that takes a
//     transaction over fences both accounts before it reads them, so it sees
//     every write an earlier attempt can still land, and none lands after.
//
// So a stalled attempt that resumes writes nothing that counts: no money is
// created, destroyed or moved twice, however many attempts stall and resume
// in whatever order, with no bound on how long. The tests in
// transfer_stall_test.go and the schedule harness check exactly this.

// The steps of a transfer, reported to Deps.Hook after each write.
const (
	stepTxPending      = "transfer:pending"
	stepTxTakeover     = "transfer:takeover"
	stepFenceSource    = "transfer:fence-source"
	stepFenceDest      = "transfer:fence-destination"
	stepTxApplying     = "transfer:applying"
	stepDebit          = "transfer:debit"
	stepCredit         = "transfer:credit"
	stepTxApplied      = "transfer:applied"
	stepPullSource     = "transfer:pull-source"
	stepPullDest       = "transfer:pull-destination"
	stepTxDone         = "transfer:done"
	stepTxCanceling    = "transfer:canceling"
	stepCloseSource    = "transfer:close-source"
	stepUndoSource     = "transfer:undo-source"
	stepCloseDest      = "transfer:close-destination"
	stepUndoDest       = "transfer:undo-destination"
	stepTxCancelled    = "transfer:cancelled"
	cancelledByRequest = "cancelled by request"
)

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

// ErrStaleAttempt is returned by a transfer attempt that finds a newer
// attempt of its own job holding the job's lease: it has lost the job (it
// stalled past its lease) and stops without writing.
var ErrStaleAttempt = errors.New("a newer attempt of this job holds its lease")

// maxTransitions bounds one attempt: a transfer takes three changes of
// state at most, plus a takeover and a few lost races with transfers that
// touch the same accounts.
const maxTransitions = 32

// transferHandler runs transfer jobs.
type transferHandler struct {
	d        Deps
	accounts *mongo.Collection
	txs      *mongo.Collection
	log      *zap.Logger
}

// attempt is one run of a transfer job's handler.
type attempt struct {
	job *jobs.Job
	log *zap.Logger
	// fenced is false after a takeover until both accounts have been
	// fenced: an earlier attempt may still land a write it prepared.
	fenced bool
}

// work drives the transaction from whatever state it is in to done or
// cancelled. Every write is guarded so that repeating it is a no-op, and
// fenced on this attempt as the comment at the top of this file explains.
func (h *transferHandler) work(ctx context.Context, job *jobs.Job, args TransferArgs) error {
	a := &attempt{job: job, log: h.log.With(job.LogFields(zap.String("tx_id", args.TxID))...), fenced: true}
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
			a.log.Debug("transfer finished", zap.String("state", string(tx.state)), zap.String("reason", tx.reason))
			return nil
		case TxInitial:
			if err := h.begin(ctx, a, &tx); err != nil {
				return err
			}
			continue
		case TxPending, TxApplied, TxCanceling:
		default:
			return jobs.Permanent(fmt.Errorf("transaction %s: unknown state %s", tx.id, describeValue(tx.stateRaw)))
		}
		if !tx.heldBy(job) {
			if err := h.takeOver(ctx, a, &tx); err != nil {
				return err
			}
			continue
		}
		switch tx.state {
		case TxPending:
			err = h.apply(ctx, a, &tx)
		case TxApplied:
			err = h.commit(ctx, a, &tx)
		case TxCanceling:
			err = h.rollback(ctx, a, &tx)
		}
		if err != nil {
			return err
		}
	}
	return fmt.Errorf("transaction %s: not finished after %d changes (transfers on the same accounts kept racing); retrying", args.TxID, maxTransitions)
}

// txDoc is a transaction as read, with its value checked by BSON type.
type txDoc struct {
	id          string
	state       TxState
	stateRaw    bson.RawValue
	source      string
	destination string
	value       int64
	// owner and ownerLease are the fields as read (Type 0 when missing),
	// for filters that must match exactly what was read.
	owner, ownerLease bson.RawValue
	reason            string
	// cancelRequested: someone asked for the transfer to be cancelled
	// before it started applying.
	cancelRequested bool
	// applying: an attempt has started to apply it; it can no longer be
	// cancelled by request.
	applying bool
	// invalid says why the transaction can never apply; empty when it can.
	invalid string
	// accountsOK is false when source or destination is not an account id,
	// so the transaction cannot have touched any account.
	accountsOK bool
	// stale is set when a guarded write to the transaction matched nothing:
	// it changed under us and must be read again.
	stale bool
}

// heldBy reports whether job's attempt holds tx: it is the owner and its
// lease token is the one tx records.
func (tx *txDoc) heldBy(job *jobs.Job) bool {
	o, ok1 := tx.owner.StringValueOK()
	l, ok2 := tx.ownerLease.StringValueOK()
	return ok1 && ok2 && o == job.ID && l == job.LeaseToken
}

// asRead matches field with the value v that was read, or its absence.
func asRead(field string, v bson.RawValue) bson.E {
	if v.Type == 0 {
		return bson.E{Key: field, Value: bson.D{{Key: "$exists", Value: false}}}
	}
	return bson.E{Key: field, Value: v}
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
	tx.stateRaw = raw.Lookup("state")
	state, _ := tx.stateRaw.StringValueOK()
	tx.state = TxState(state)
	tx.owner, tx.ownerLease = raw.Lookup("owner"), raw.Lookup("ownerLease")
	tx.reason, _ = str("reason")
	cancel := raw.Lookup("cancelRequestedAt")
	tx.cancelRequested = cancel.Type != 0 && cancel.Type != bson.TypeNull
	tx.applying, _ = raw.Lookup("applying").BooleanOK()
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
	tx.invalid = strings.Join(problems, "; ")
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
	case 0:
		return "missing"
	case bson.TypeNull:
		return "null"
	case bson.TypeDouble:
		return "double " + strconv.FormatFloat(v.Double(), 'g', -1, 64)
	case bson.TypeString:
		return "string " + strconv.Quote(v.StringValue())
	case bson.TypeInt32:
		return "int32 " + strconv.FormatInt(int64(v.Int32()), 10)
	case bson.TypeInt64:
		return "int64 " + strconv.FormatInt(v.Int64(), 10)
	}
	return v.Type.String() + " " + v.String()
}

// held matches transaction tx in state s while attempt a holds it.
func held(tx *txDoc, s TxState, a *attempt) bson.D {
	return bson.D{
		{Key: "_id", Value: tx.id}, {Key: "state", Value: s},
		{Key: "owner", Value: a.job.ID}, {Key: "ownerLease", Value: a.job.LeaseToken},
	}
}

// writeTx applies update to tx, fenced on filter, and reports the step. A
// write that matches nothing is not an error: it marks tx stale, and the
// caller reads the transaction again and acts on what it finds. It reports
// whether the write matched.
func (h *transferHandler) writeTx(ctx context.Context, tx *txDoc, filter bson.D, set bson.D, step string) (bool, error) {
	res, err := h.txs.UpdateOne(ctx, filter, bson.D{
		{Key: "$set", Value: set},
		{Key: "$currentDate", Value: bson.D{{Key: "lastModified", Value: true}}},
	})
	if err != nil {
		return false, fmt.Errorf("transaction %s: %s: %w", tx.id, step, err)
	}
	matched := res.MatchedCount == 1
	if !matched {
		tx.stale = true
	}
	return matched, h.d.step(ctx, step)
}

// moveTx changes the state of tx, held by a, from its state to to, also
// setting reason when given.
func (h *transferHandler) moveTx(ctx context.Context, a *attempt, tx *txDoc, to TxState, step string, set ...bson.E) error {
	set = append(bson.D{{Key: "state", Value: to}}, set...)
	ok, err := h.writeTx(ctx, tx, held(tx, tx.state, a), set, step)
	if ok {
		tx.state = to
		for _, e := range set {
			if e.Key == "reason" {
				tx.reason = e.Value.(string)
			}
		}
	}
	return err
}

// hold records that a now holds tx.
func (tx *txDoc) hold(a *attempt) {
	tx.owner, tx.ownerLease = rawString(a.job.ID), rawString(a.job.LeaseToken)
}

// rawString is s as a BSON value, as a read would return it.
func rawString(s string) bson.RawValue {
	t, b, err := bson.MarshalValue(s)
	if err != nil {
		panic(err) // a string always encodes
	}
	return bson.RawValue{Type: t, Value: b}
}

// begin moves an initial transaction to pending, held by a.
func (h *transferHandler) begin(ctx context.Context, a *attempt, tx *txDoc) error {
	ok, err := h.writeTx(ctx, tx, bson.D{{Key: "_id", Value: tx.id}, {Key: "state", Value: TxInitial}},
		bson.D{{Key: "state", Value: TxPending}, {Key: "owner", Value: a.job.ID}, {Key: "ownerLease", Value: a.job.LeaseToken}},
		stepTxPending)
	if ok {
		tx.state = TxPending
		tx.hold(a)
	}
	return err
}

// takeOver makes a the holder of tx. From an earlier attempt of a's own job
// it takes it only while a still holds the job's lease, so that a stalled
// attempt never takes a transaction back from a newer one. From another job
// it takes it only once that job has finished (succeeded, dead, cancelled)
// or is gone; while that job is alive tx is left to it and ErrTransferOwned
// is returned. The write is fenced on the holder as read.
func (h *transferHandler) takeOver(ctx context.Context, a *attempt, tx *txDoc) error {
	ownerID, isString := tx.owner.StringValueOK()
	switch {
	case isString && ownerID == a.job.ID:
		cur, err := h.d.Queue.Get(ctx, a.job.ID)
		if err != nil {
			return fmt.Errorf("transaction %s: look up this job's lease: %w", tx.id, err)
		}
		if cur.State != jobs.StateRunning || cur.LeaseToken != a.job.LeaseToken {
			return fmt.Errorf("transaction %s: %w; writing nothing", tx.id, ErrStaleAttempt)
		}
	case isString:
		owner, err := h.d.Queue.Get(ctx, ownerID)
		switch {
		case errors.Is(err, queue.ErrNotFound):
		case err != nil:
			return fmt.Errorf("transaction %s: look up its owner: %w", tx.id, err)
		case !owner.State.Finished():
			return fmt.Errorf("transaction %s is %s and held by job %s (%s): %w", tx.id, tx.state, ownerID, owner.State, ErrTransferOwned)
		}
	}
	filter := bson.D{{Key: "_id", Value: tx.id}, {Key: "state", Value: tx.state}, asRead("owner", tx.owner), asRead("ownerLease", tx.ownerLease)}
	previous := describeValue(tx.owner)
	ok, err := h.writeTx(ctx, tx, filter,
		bson.D{{Key: "owner", Value: a.job.ID}, {Key: "ownerLease", Value: a.job.LeaseToken}}, stepTxTakeover)
	if ok {
		tx.hold(a)
		a.fenced = false
		a.log.Info("took over a transaction", zap.String("previous_owner", previous), zap.String("state", string(tx.state)))
	}
	return err
}

// account is an account as read, checked by BSON type.
type account struct {
	id    string
	found bool
	// balance in cents.
	balance int64
	// pending: the transaction is among the account's pendingTransactions.
	pending bool
	// version is the field as read (Type 0 when missing).
	version bson.RawValue
	// invalid says why docket cannot write to the account; empty when it
	// can.
	invalid string
}

// parseAccount reads account id from raw, checking every field docket
// writes: another application may have left any of them of another type.
func parseAccount(id, txID string, raw bson.Raw) account {
	a := account{id: id, found: true, version: raw.Lookup("version")}
	var problems []string
	switch b := raw.Lookup("balance"); b.Type {
	case bson.TypeInt64:
		a.balance = b.Int64()
	case bson.TypeInt32:
		a.balance = int64(b.Int32())
	default:
		problems = append(problems, fmt.Sprintf("balance: %s is not a whole number of cents", describeValue(b)))
	}
	switch p := raw.Lookup("pendingTransactions"); p.Type {
	case 0:
	case bson.TypeArray:
		vals, _ := p.Array().Values()
		for _, v := range vals {
			if s, ok := v.StringValueOK(); ok && s == txID {
				a.pending = true
			}
		}
	default:
		problems = append(problems, fmt.Sprintf("pendingTransactions: %s is not an array", describeValue(p)))
	}
	switch a.version.Type {
	case 0, bson.TypeInt32, bson.TypeInt64:
	default:
		problems = append(problems, fmt.Sprintf("version: %s is not an integer", describeValue(a.version)))
	}
	if len(problems) > 0 {
		a.invalid = fmt.Sprintf("account %q: %s", id, strings.Join(problems, "; "))
	}
	return a
}

// readAccount reads account id; with fence, it first increments the
// account's version, so that any write prepared from an earlier read
// matches nothing afterwards. An account whose version cannot be
// incremented (not a number) is read without the fence: no write of docket
// can match it either.
func (h *transferHandler) readAccount(ctx context.Context, id, txID string, fence bool, step string) (account, error) {
	var raw bson.Raw
	var err error
	if fence {
		raw, err = h.accounts.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "version", Value: int64(1)}}}},
			options.FindOneAndUpdate().SetReturnDocument(options.After)).Raw()
		var se mongo.ServerError
		if errors.As(err, &se) && se.HasErrorCode(errTypeMismatch) {
			fence = false
		} else if err == nil || errors.Is(err, mongo.ErrNoDocuments) {
			if serr := h.d.step(ctx, step); serr != nil {
				return account{}, serr
			}
		}
	}
	if !fence {
		raw, err = h.accounts.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	}
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account{id: id}, nil
	}
	if err != nil {
		return account{}, fmt.Errorf("read account %s: %w", id, err)
	}
	return parseAccount(id, txID, raw), nil
}

// errTypeMismatch is the server's code for an update applied to a field of
// the wrong type.
const errTypeMismatch = 14

// apply debits the source and credits the destination of a pending
// transaction held by a, then marks it applied. A transaction that cannot
// apply, or whose cancellation was requested before it started applying,
// is moved to canceling with the reason. Everything that can make it
// fail is checked before the first account write.
func (h *transferHandler) apply(ctx context.Context, a *attempt, tx *txDoc) error {
	if tx.cancelRequested && !tx.applying {
		return h.cancel(ctx, a, tx, cancelledByRequest)
	}
	if tx.invalid != "" {
		return h.cancel(ctx, a, tx, tx.invalid)
	}
	src, err := h.readAccount(ctx, tx.source, tx.id, !a.fenced, stepFenceSource)
	if err != nil {
		return err
	}
	dst, err := h.readAccount(ctx, tx.destination, tx.id, !a.fenced, stepFenceDest)
	if err != nil {
		return err
	}
	a.fenced = true
	if !dst.pending { // nothing credited yet: the transfer may still be refused
		if reason := refusal(tx, src, dst); reason != "" {
			return h.cancel(ctx, a, tx, reason)
		}
	}
	if !src.pending || !dst.pending {
		// Confirm that a still holds the pending transaction, after reading
		// the accounts: a write prepared from those reads then cannot land
		// once the transaction has moved on (see the top of this file). It
		// also closes the window for a cancel request.
		filter := append(held(tx, TxPending, a), bson.E{Key: "cancelRequestedAt", Value: bson.D{{Key: "$exists", Value: false}}})
		if ok, err := h.writeTx(ctx, tx, filter, bson.D{{Key: "applying", Value: true}}, stepTxApplying); !ok || err != nil {
			return err
		}
		tx.applying = true
	}
	if !src.pending {
		filter := bson.D{
			{Key: "_id", Value: src.id},
			{Key: "pendingTransactions", Value: bson.D{{Key: "$ne", Value: tx.id}}},
			{Key: "balance", Value: bson.D{{Key: "$gte", Value: tx.value}}},
			asRead("version", src.version),
		}
		if ok, err := h.applySide(ctx, tx, filter, -tx.value, stepDebit); !ok || err != nil {
			return err
		}
	}
	if !dst.pending {
		filter := bson.D{
			{Key: "_id", Value: dst.id},
			{Key: "pendingTransactions", Value: bson.D{{Key: "$ne", Value: tx.id}}},
			asRead("version", dst.version),
		}
		if ok, err := h.applySide(ctx, tx, filter, tx.value, stepCredit); !ok || err != nil {
			return err
		}
	}
	return h.moveTx(ctx, a, tx, TxApplied, stepTxApplied)
}

// refusal returns why tx cannot apply to src and dst as read, or "".
func refusal(tx *txDoc, src, dst account) string {
	switch {
	case !src.found:
		return fmt.Sprintf("source account %q not found", tx.source)
	case !dst.found:
		return fmt.Sprintf("destination account %q not found", tx.destination)
	case src.invalid != "":
		return src.invalid
	case dst.invalid != "":
		return dst.invalid
	case !src.pending && src.balance < tx.value:
		return fmt.Sprintf("insufficient funds: source account %q has %d cents, the transfer needs %d", tx.source, src.balance, tx.value)
	}
	return ""
}

// applySide adds delta to the balance of the account filter matches and
// marks tx pending on it, in one write conditioned on what was read. A
// write that matches nothing (the account changed since it was read) marks
// tx stale, so that the attempt reads everything again.
func (h *transferHandler) applySide(ctx context.Context, tx *txDoc, filter bson.D, delta int64, step string) (bool, error) {
	res, err := h.accounts.UpdateOne(ctx, filter, bson.D{
		{Key: "$inc", Value: bson.D{{Key: "balance", Value: delta}, {Key: "version", Value: int64(1)}}},
		{Key: "$push", Value: bson.D{{Key: "pendingTransactions", Value: tx.id}}},
	})
	if err != nil {
		return false, fmt.Errorf("transaction %s: %s: %w", tx.id, step, err)
	}
	if res.MatchedCount == 0 {
		tx.stale = true
	}
	return res.MatchedCount == 1, h.d.step(ctx, step)
}

// cancel moves a pending transaction to canceling, recording why.
func (h *transferHandler) cancel(ctx context.Context, a *attempt, tx *txDoc, reason string) error {
	a.log.Info("rolling back a transfer that cannot apply", zap.String("reason", reason))
	return h.moveTx(ctx, a, tx, TxCanceling, stepTxCanceling, bson.E{Key: "reason", Value: reason})
}

// commit removes an applied transaction from both accounts' pending lists
// and marks it done. Each pull also increments the account's version.
func (h *transferHandler) commit(ctx context.Context, a *attempt, tx *txDoc) error {
	for _, side := range []struct{ account, step string }{
		{tx.source, stepPullSource},
		{tx.destination, stepPullDest},
	} {
		_, err := h.accounts.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: side.account}, {Key: "pendingTransactions", Value: tx.id}},
			bson.D{
				{Key: "$pull", Value: bson.D{{Key: "pendingTransactions", Value: tx.id}}},
				{Key: "$inc", Value: bson.D{{Key: "version", Value: int64(1)}}},
			})
		if err != nil {
			return fmt.Errorf("transaction %s: %s: %w", tx.id, side.step, err)
		}
		if err := h.d.step(ctx, side.step); err != nil {
			return err
		}
	}
	return h.moveTx(ctx, a, tx, TxDone, stepTxDone)
}

// rollback undoes whichever side of a canceling transaction was applied and
// marks it cancelled. Each account is fenced first: a write an attempt
// prepared while the transaction was pending cannot land after it, and the
// fenced read shows every one that landed before.
func (h *transferHandler) rollback(ctx context.Context, a *attempt, tx *txDoc) error {
	// A transaction whose value or accounts are unusable never touched an
	// account: there is nothing to undo.
	if tx.accountsOK && tx.value > 0 {
		for _, side := range []struct {
			account     string
			delta       int64
			close, undo string
		}{
			{tx.source, tx.value, stepCloseSource, stepUndoSource},
			{tx.destination, -tx.value, stepCloseDest, stepUndoDest},
		} {
			acct, err := h.readAccount(ctx, side.account, tx.id, true, side.close)
			if err != nil {
				return err
			}
			if !acct.pending {
				continue
			}
			_, err = h.accounts.UpdateOne(ctx,
				bson.D{{Key: "_id", Value: side.account}, {Key: "pendingTransactions", Value: tx.id}},
				bson.D{
					{Key: "$inc", Value: bson.D{{Key: "balance", Value: side.delta}, {Key: "version", Value: int64(1)}}},
					{Key: "$pull", Value: bson.D{{Key: "pendingTransactions", Value: tx.id}}},
				})
			if err != nil {
				return fmt.Errorf("transaction %s: %s: %w", tx.id, side.undo, err)
			}
			if err := h.d.step(ctx, side.undo); err != nil {
				return err
			}
		}
	}
	return h.moveTx(ctx, a, tx, TxCancelled, stepTxCancelled)
}
