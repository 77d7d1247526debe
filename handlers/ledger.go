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
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// LedgerTransferKind is the job kind that posts a transfer to the ledger.
//
// The ledger is MongoDB's log-reconciliation pattern: a money movement is
// ONE transaction document holding all of its changes, so it is written
// atomically, and balances are derived from the log, with a cached balance
// per account to stay fast:
//
//	ledger         {_id, ts, proc: UNCOMMITTED|COMMITTED, state: VALID|CANCELLED,
//	                changes: [{account, type: withdraw|deposit, value, seqId, cacheBal}],
//	                try, transfer, job, lease, sealed, reason, abandoned}
//	ledgerAccounts {_id, opening, cache: {balance, seqId}}
//	ledgerSeq      {_id: account+seqId, account, seqId, tx, try, kind, type, value, at}
//
// seqId orders an account's changes; no two changes of one account may
// share one. On MongoDB a unique multikey index on the changes would say
// so, but devdb (FerretDB v1) does not enforce a unique index per array
// element, so the uniqueness is carried by ledgerSeq: one small document
// per (account, seqId) whose _id is made from both, which every server
// refuses twice. A posting claims its seqIds there first, one insert per
// account, then writes the transaction; a change counts only when the
// transaction exists, is VALID and names the claim's try. A poster that
// dies between the claims and the transaction leaves claims whose
// transaction is missing ("in flight"): they count pessimistically (a
// withdrawal counts, a deposit does not) in every overdraft check, so
// nothing waits on them; the ledger sweeper writes a CANCELLED tombstone
// for such a transaction once its claim is older than the threshold, which
// a late insert of the stalled poster then hits as a duplicate.
const LedgerTransferKind = "ledger-transfer"

// Collections of the ledger.
const (
	// LedgerCollection holds the transaction documents: the log.
	LedgerCollection = "ledger"
	// LedgerAccountsCollection holds the accounts and their cached balance.
	LedgerAccountsCollection = "ledgerAccounts"
	// LedgerSeqCollection holds one document per (account, seqId) claimed.
	LedgerSeqCollection = "ledgerSeq"
)

// Values of a ledger transaction's proc and state, and of a change's type.
const (
	LedgerUncommitted = "UNCOMMITTED"
	LedgerCommitted   = "COMMITTED"
	LedgerValid       = "VALID"
	LedgerCancelled   = "CANCELLED"
	LedgerWithdraw    = "withdraw"
	LedgerDeposit     = "deposit"
)

// Kinds of a ledgerSeq document.
const (
	seqChange = "change"
	seqCancel = "cancel"
)

// LedgerTransferArgs are the args of a ledger-transfer job. TxID names the
// transaction (defaults to the job's id): a job posts it at most once,
// whatever its attempts do, and so does any other job with the same TxID.
type LedgerTransferArgs struct {
	TxID   string `bson:"txId,omitempty" json:"txId,omitempty"`
	From   string `bson:"from" json:"from"`
	To     string `bson:"to" json:"to"`
	Amount int64  `bson:"amount" json:"amount"`
}

// Kind implements jobs.Args.
func (LedgerTransferArgs) Kind() string { return LedgerTransferKind }

// Validate implements jobs.Validator.
func (a LedgerTransferArgs) Validate() error {
	switch {
	case a.From == "":
		return jobs.InvalidArgs("from", "must not be empty")
	case a.To == "":
		return jobs.InvalidArgs("to", "must not be empty")
	case a.From == a.To:
		return jobs.InvalidArgs("to", "is the same account as from (%q)", a.From)
	case a.Amount <= 0:
		return jobs.InvalidArgs("amount", "%d must be a positive number of cents", a.Amount)
	case strings.Contains(a.TxID, ledgerChainSep):
		return jobs.InvalidArgs("txId", "must not contain %q (docket's retry suffix)", ledgerChainSep)
	}
	return nil
}

// LedgerTx is one transaction document of the ledger.
type LedgerTx struct {
	ID      string         `bson:"_id"`
	TS      time.Time      `bson:"ts"`
	Proc    string         `bson:"proc"`
	State   string         `bson:"state"`
	Changes []LedgerChange `bson:"changes"`
	// Try names the posting try whose seqId claims the changes hold.
	Try string `bson:"try,omitempty"`
	// Transfer is the job's TxID this document posts (it differs from ID
	// only for a re-post after an abandoned one).
	Transfer string `bson:"transfer,omitempty"`
	// Job and Lease record the attempt that wrote it, for the audit.
	Job   string `bson:"job,omitempty"`
	Lease string `bson:"lease,omitempty"`
	// Sealed: a sweeper has started folding it into a cache; it can no
	// longer be cancelled, only compensated.
	Sealed bool `bson:"sealed,omitempty"`
	// Reason says why a CANCELLED transaction was cancelled or refused.
	Reason string `bson:"reason,omitempty"`
	// Abandoned marks the tombstone of a posting whose poster stalled
	// between claiming its seqIds and writing it.
	Abandoned bool `bson:"abandoned,omitempty"`
}

// LedgerChange is one change of a transaction.
type LedgerChange struct {
	Account string `bson:"account"`
	Type    string `bson:"type"`
	Value   int64  `bson:"value"`
	SeqID   int64  `bson:"seqId"`
	// CacheBal is the account's balance after this change, set when the
	// sweeper folds it into the account's cache.
	CacheBal *int64 `bson:"cacheBal,omitempty"`
}

func (c LedgerChange) delta() int64 {
	if c.Type == LedgerWithdraw {
		return -c.Value
	}
	return c.Value
}

// ledgerSlot is one ledgerSeq document: seqId seqID of account claimed.
type ledgerSlot struct {
	ID      string    `bson:"_id"`
	Account string    `bson:"account"`
	SeqID   int64     `bson:"seqId"`
	Tx      string    `bson:"tx"`
	Try     string    `bson:"try"`
	Kind    string    `bson:"kind"`
	Type    string    `bson:"type"`
	Value   int64     `bson:"value"`
	At      time.Time `bson:"at"`
}

func (s ledgerSlot) delta() int64 {
	return LedgerChange{Type: s.Type, Value: s.Value}.delta()
}

// ledgerSlotID is the _id of the claim of seqId seq of account: the
// account quoted, so that no two pairs share one.
func ledgerSlotID(account string, seq int64) string {
	return strconv.Quote(account) + "#" + strconv.FormatInt(seq, 10)
}

// ledgerChainSep separates a transfer's id from the number of its re-post
// after an abandoned posting.
const ledgerChainSep = "~repost-"

// ledgerChainID is the id of the i-th posting of transfer (1: the
// transfer's own id).
func ledgerChainID(transfer string, i int) string {
	if i == 1 {
		return transfer
	}
	return transfer + ledgerChainSep + strconv.Itoa(i)
}

// Errors of the ledger.
var (
	// ErrLedgerAccount: an account of the ledger is missing, or a field of
	// it is not what docket writes.
	ErrLedgerAccount = errors.New("unusable ledger account")
	// ErrLedgerNotCancellable: the transaction is sealed or a later change
	// depends on it; it was compensated instead.
	ErrLedgerNotCancellable = errors.New("ledger transaction cannot be cancelled")
)

type ledgerColls struct {
	txs, accounts, seq *mongo.Collection
}

// ledgerCollections returns the ledger's collections, written with
// majority and read from the primary: every read decides a write.
func ledgerCollections(db *mongo.Database) ledgerColls {
	o := options.Collection().SetWriteConcern(writeconcern.Majority()).SetReadPreference(readpref.Primary())
	return ledgerColls{
		txs:      db.Collection(LedgerCollection, o),
		accounts: db.Collection(LedgerAccountsCollection, o),
		seq:      db.Collection(LedgerSeqCollection, o),
	}
}

// setupLedger creates the indexes the ledger reads with. The uniqueness of
// seqIds needs none: it is the _id of ledgerSeq.
func setupLedger(ctx context.Context, db *mongo.Database) error {
	c := ledgerCollections(db)
	if err := queue.EnsureIndexes(ctx, c.seq, []mongo.IndexModel{{
		Keys:    bson.D{{Key: "account", Value: 1}, {Key: "seqId", Value: 1}},
		Options: options.Index().SetName("account_seqId"),
	}}); err != nil {
		return fmt.Errorf("handlers: create index on %s: %w", LedgerSeqCollection, err)
	}
	if err := queue.EnsureIndexes(ctx, c.txs, []mongo.IndexModel{{
		Keys:    bson.D{{Key: "proc", Value: 1}},
		Options: options.Index().SetName("proc"),
	}}); err != nil {
		return fmt.Errorf("handlers: create index on %s: %w", LedgerCollection, err)
	}
	return nil
}

// OpenLedgerAccount creates account id with an opening balance in cents.
func OpenLedgerAccount(ctx context.Context, db *mongo.Database, id string, opening int64) error {
	if id == "" || opening < 0 {
		return fmt.Errorf("handlers: open ledger account %q: the id must not be empty and the opening balance (%d) not negative", id, opening)
	}
	_, err := ledgerCollections(db).accounts.InsertOne(ctx, bson.D{
		{Key: "_id", Value: id}, {Key: "opening", Value: opening},
		{Key: "cache", Value: bson.D{{Key: "balance", Value: opening}, {Key: "seqId", Value: int64(0)}}},
	})
	if err != nil {
		return fmt.Errorf("handlers: open ledger account %q: %w", id, err)
	}
	return nil
}

// ledgerAccount is an account as read, checked field by field.
type ledgerAccount struct {
	id      string
	opening int64
	// balance and seq are the cache.
	balance, seq int64
}

// readLedgerAccount reads account id; a missing account, or one whose
// fields are not docket's, is an error wrapping ErrLedgerAccount that names
// the account and the field.
func readLedgerAccount(ctx context.Context, c ledgerColls, id string) (ledgerAccount, error) {
	raw, err := c.accounts.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return ledgerAccount{}, fmt.Errorf("%w: account %q: not found in %s", ErrLedgerAccount, id, LedgerAccountsCollection)
	}
	if err != nil {
		return ledgerAccount{}, fmt.Errorf("read ledger account %q: %w", id, err)
	}
	return parseLedgerAccount(id, raw)
}

// readLedgerAccounts reads every account's cache, by id, in one read. An
// account whose cache does not parse goes to bad instead; one whose _id is
// not a string is not a ledger account and is skipped.
func readLedgerAccounts(ctx context.Context, c ledgerColls, bad func(id string, err error)) (map[string]ledgerAccount, error) {
	cur, err := c.accounts.Find(ctx, bson.D{})
	if err != nil {
		return nil, err
	}
	defer closeCursor(ctx, cur)
	accts := map[string]ledgerAccount{}
	for cur.Next(ctx) {
		id, ok := cur.Current.Lookup("_id").StringValueOK()
		if !ok {
			continue
		}
		a, err := parseLedgerAccount(id, cur.Current)
		if err != nil {
			bad(id, err)
			continue
		}
		accts[id] = a
	}
	return accts, cur.Err()
}

func parseLedgerAccount(id string, raw bson.Raw) (ledgerAccount, error) {
	a := ledgerAccount{id: id}
	bad := func(field string, v bson.RawValue, want string) error {
		return fmt.Errorf("%w: account %q: %s: %s; want %s", ErrLedgerAccount, id, field, describeValue(v), want)
	}
	asInt := func(v bson.RawValue) (int64, bool) {
		switch v.Type {
		case bson.TypeInt64:
			return v.Int64(), true
		case bson.TypeInt32:
			return int64(v.Int32()), true
		}
		return 0, false
	}
	if o := raw.Lookup("opening"); o.Type != 0 {
		n, ok := asInt(o)
		if !ok || n < 0 {
			return a, bad("opening", o, "a non-negative whole number of cents")
		}
		a.opening = n
	}
	cache := raw.Lookup("cache")
	doc, ok := cache.DocumentOK()
	if !ok {
		return a, bad("cache", cache, "a document {balance, seqId}")
	}
	b := doc.Lookup("balance")
	if a.balance, ok = asInt(b); !ok {
		return a, bad("cache.balance", b, "a whole number of cents")
	}
	s := doc.Lookup("seqId")
	if a.seq, ok = asInt(s); !ok || a.seq < 0 {
		return a, bad("cache.seqId", s, "a non-negative integer")
	}
	return a, nil
}

// ledgerView is one account's book as read: its cache, then every claim
// after the cache's seqId, with their transactions.
type ledgerView struct {
	acct  ledgerAccount
	slots []ledgerSlot
	txs   map[string]*LedgerTx
	// cancels are the transactions with a cancel marker among slots.
	cancels map[string]bool
	// max is the highest seqId claimed (the cache's when none is).
	max int64
}

// readLedgerView reads account id's book. The cache is read first: a claim
// the sweeper folds meanwhile is then counted once, as a claim.
func readLedgerView(ctx context.Context, c ledgerColls, id string) (*ledgerView, error) {
	acct, err := readLedgerAccount(ctx, c, id)
	if err != nil {
		return nil, err
	}
	v := &ledgerView{acct: acct, txs: map[string]*LedgerTx{}, cancels: map[string]bool{}, max: acct.seq}
	cur, err := c.seq.Find(ctx, bson.D{{Key: "account", Value: id}, {Key: "seqId", Value: bson.D{{Key: "$gt", Value: acct.seq}}}})
	if err != nil {
		return nil, fmt.Errorf("read the seqIds of ledger account %q: %w", id, err)
	}
	defer closeCursor(ctx, cur)
	var ids bson.A
	for cur.Next(ctx) {
		var s ledgerSlot
		if err := bson.Unmarshal(cur.Current, &s); err != nil || s.ID != ledgerSlotID(id, s.SeqID) {
			// Not docket's: it counts nothing, but its seqId is taken.
			if n, ok := cur.Current.Lookup("seqId").AsInt64OK(); ok && n > v.max {
				v.max = n
			}
			continue
		}
		v.slots = append(v.slots, s)
		v.max = max(v.max, s.SeqID)
		if s.Kind == seqCancel {
			v.cancels[s.Tx] = true
		}
		ids = append(ids, s.Tx)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read the seqIds of ledger account %q: %w", id, err)
	}
	slices.SortFunc(v.slots, func(a, b ledgerSlot) int { return cmp.Compare(a.SeqID, b.SeqID) })
	if len(ids) > 0 {
		if err := readLedgerTxs(ctx, c, ids, v.txs); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// readLedgerTxs reads the transactions ids into into; a document that does
// not decode is left out (it counts nothing).
func readLedgerTxs(ctx context.Context, c ledgerColls, ids bson.A, into map[string]*LedgerTx) error {
	cur, err := c.txs.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return fmt.Errorf("read ledger transactions: %w", err)
	}
	defer closeCursor(ctx, cur)
	for cur.Next(ctx) {
		var tx LedgerTx
		if err := bson.Unmarshal(cur.Current, &tx); err != nil {
			id, _ := cur.Current.Lookup("_id").StringValueOK()
			into[id] = &LedgerTx{ID: id, State: "undecodable"}
			continue
		}
		into[tx.ID] = &tx
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("read ledger transactions: %w", err)
	}
	return nil
}

// slotStatus is what one claim counts for.
type slotStatus int

const (
	slotVoid     slotStatus = iota // counts nothing, ever
	slotCounted                    // its change counts
	slotInFlight                   // its transaction is not written yet
)

// ledgerOwns reports whether tx holds the change that claim s made: the
// claim decides, so a transaction written by another app without claims
// counts nothing.
func ledgerOwns(tx *LedgerTx, s ledgerSlot) (LedgerChange, int, bool) {
	if tx == nil || tx.Try == "" || tx.Try != s.Try {
		return LedgerChange{}, -1, false
	}
	for i, c := range tx.Changes {
		if c.Account == s.Account && c.SeqID == s.SeqID && c.Value > 0 && (c.Type == LedgerWithdraw || c.Type == LedgerDeposit) {
			return c, i, true
		}
	}
	return LedgerChange{}, -1, false
}

func (v *ledgerView) status(s ledgerSlot) slotStatus {
	if s.Kind != seqChange {
		return slotVoid
	}
	tx, ok := v.txs[s.Tx]
	if !ok {
		return slotInFlight
	}
	if _, _, owns := ledgerOwns(tx, s); owns && tx.State == LedgerValid {
		return slotCounted
	}
	return slotVoid
}

// balance is the cache plus every counted change after it.
func (v *ledgerView) balance() int64 {
	b := v.acct.balance
	for _, s := range v.slots {
		if v.status(s) == slotCounted {
			b += s.delta()
		}
	}
	return b
}

// available is the least the balance can turn out to be once every claim
// in flight and every cancel started has settled: a withdrawal in flight
// counts, a deposit in flight does not, and neither does a deposit whose
// transaction a cancel has started on and no sweeper has sealed. Claims of
// own (this poster's transaction, whose earlier tries can never count
// beside the one that lands) are left out.
func (v *ledgerView) available(own string) int64 {
	b := v.acct.balance
	for _, s := range v.slots {
		d := s.delta()
		switch v.status(s) {
		case slotCounted:
			if d > 0 && v.cancels[s.Tx] && !v.txs[s.Tx].Sealed {
				continue
			}
			b += d
		case slotInFlight:
			if s.Tx != own {
				b += min(d, 0)
			}
		}
	}
	return b
}

// LedgerBalance returns account's balance: its cache plus the VALID
// changes after the cache's seqId. Postings still in flight do not count.
func LedgerBalance(ctx context.Context, db *mongo.Database, account string) (int64, error) {
	v, err := readLedgerView(ctx, ledgerCollections(db), account)
	if err != nil {
		return 0, fmt.Errorf("handlers: ledger balance: %w", err)
	}
	return v.balance(), nil
}
