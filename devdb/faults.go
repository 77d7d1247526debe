package devdb

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	randv2 "math/rand/v2"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
)

// The faults devdb can inject into its replies, as MongoDB sends them on a
// replica set; Config.Faults names them. See docs/EMBEDDED-SERVER.md.
const (
	// FaultStepdown refuses a write, unapplied, with NotWritablePrimary
	// (10107), as a primary that has stepped down does.
	FaultStepdown = "stepdown"

	// FaultLostReply applies a write, then closes the client's connection
	// before the reply: the write is done and the client does not know it.
	FaultLostReply = "lostreply"

	// FaultWriteConcern applies a write and acknowledges it with a
	// writeConcernError (64, WriteConcernFailed, wtimeout): applied on the
	// primary, not known to be replicated.
	FaultWriteConcern = "writeconcern"

	// FaultTimeLimit refuses a command that carries maxTimeMS, unapplied,
	// with MaxTimeMSExpired (50), as MongoDB does when the time limit passes.
	FaultTimeLimit = "timelimit"

	// FaultCursorKill answers a getMore with CursorNotFound (43), and closes
	// the cursor, as MongoDB does for a cursor that was killed.
	FaultCursorKill = "cursorkill"
	// FaultElemMatchNot refuses, unrun, with NotImplemented (238) a command
	// that selects documents and holds $not or $ne inside an $elemMatch
	// (in its filter or its statements), as FerretDB v1 refuses the filter
	// (devdb's FerretDB answers $not there as MongoDB does): for testing a
	// client that detects the lack and does without. Unlike FerretDB v1,
	// which refuses at the first document the filter tests (a delete's
	// statement with a write error), it refuses the whole command.
	FaultElemMatchNot = "elemmatchnot"
)

// faultNames lists the faults in the order their decisions are drawn for a
// command; a fault's index here also picks its random stream.
var faultNames = []string{FaultStepdown, FaultLostReply, FaultWriteConcern, FaultTimeLimit, FaultCursorKill, FaultElemMatchNot}

// Indexes in faultNames.
const (
	iStepdown = iota
	iLostReply
	iWriteConcern
	iTimeLimit
	iCursorKill
	iElemMatchNot
)

// faultElection names, in the logs, a write refused by an election window.
const faultElection = "election"

// MongoDB's error codes and names that the faults reply with.
const (
	codeNotWritablePrimary = 10107
	codeWriteConcernFailed = 64
	codeCursorNotFound     = 43
	codeNotImplemented     = 238
)

// retryableWriteErrorLabel is the label MongoDB 4.4+ puts on an error that a
// driver may retry, when the command was a retryable write.
const retryableWriteErrorLabel = "RetryableWriteError"

// writeCommands are the commands that write documents: the ones stepdown,
// lostreply, writeconcern and the elections act on. Index and collection
// commands (create, createIndexes, drop, ...) are not among them.
var writeCommands = map[string]bool{
	"insert":        true,
	"update":        true,
	"delete":        true,
	"findAndModify": true,
	"findandmodify": true,
}

// timeLimitCommands are the commands timelimit acts on, when they carry
// maxTimeMS: the writes and the reads of documents.
var timeLimitCommands = map[string]bool{
	"insert": true, "update": true, "delete": true, "findAndModify": true, "findandmodify": true,
	"find": true, "aggregate": true, "count": true, "distinct": true,
}

// Elections describes the periodic elections devdb models: Every is the
// time from one window's start to the next's, For how long each lasts. The
// first window starts Every after the server starts. In a window every write
// is refused with NotWritablePrimary, and reads answer. The zero value means
// no elections.
type Elections struct {
	Every time.Duration
	For   time.Duration
}

// String returns e as EVERY/FOR, as ParseElections reads it.
func (e Elections) String() string {
	if e.Every == 0 {
		return ""
	}
	return e.Every.String() + "/" + e.For.String()
}

// ParseElections parses EVERY/FOR, two Go durations such as "60s/8s".
func ParseElections(s string) (Elections, error) {
	every, dur, ok := strings.Cut(s, "/")
	if !ok {
		return Elections{}, fmt.Errorf("elections %q: want EVERY/FOR, e.g. 60s/8s", s)
	}
	e, err := time.ParseDuration(every)
	if err != nil {
		return Elections{}, fmt.Errorf("elections %q: EVERY: %w", s, err)
	}
	f, err := time.ParseDuration(dur)
	if err != nil {
		return Elections{}, fmt.Errorf("elections %q: FOR: %w", s, err)
	}
	el := Elections{Every: e, For: f}
	if err := el.validate(); err != nil {
		return Elections{}, fmt.Errorf("elections %q: %w", s, err)
	}
	return el, nil
}

func (e Elections) validate() error {
	if e == (Elections{}) {
		return nil
	}
	if e.Every <= 0 || e.For <= 0 || e.For >= e.Every {
		return fmt.Errorf("every %v, for %v: want 0 < FOR < EVERY", e.Every, e.For)
	}
	return nil
}

// ParseFaults parses NAME=P[,NAME=P...], each P a probability in [0, 1].
func ParseFaults(s string) (map[string]float64, error) {
	faults := make(map[string]float64)
	for _, entry := range strings.Split(s, ",") {
		name, p, ok := strings.Cut(strings.TrimSpace(entry), "=")
		if !ok {
			return nil, fmt.Errorf("faults: entry %q: want NAME=P, e.g. stepdown=0.01", entry)
		}
		prob, err := strconv.ParseFloat(p, 64)
		if err != nil {
			return nil, fmt.Errorf("faults: entry %q: probability: %w", entry, err)
		}
		if _, dup := faults[name]; dup {
			return nil, fmt.Errorf("faults: entry %q: %s given twice", entry, name)
		}
		faults[name] = prob
	}
	if err := validateFaults(faults); err != nil {
		return nil, fmt.Errorf("faults: %w", err)
	}
	return faults, nil
}

// validateFaults checks that every entry names a known fault and a
// probability in [0, 1].
func validateFaults(faults map[string]float64) error {
	names := make([]string, 0, len(faults))
	for name := range faults {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := faults[name]
		if !slices.Contains(faultNames, name) {
			return fmt.Errorf("unknown fault %q; known: %s", name, strings.Join(faultNames, ", "))
		}
		if math.IsNaN(p) || p < 0 || p > 1 {
			return fmt.Errorf("%s=%v: want a probability in [0, 1]", name, p)
		}
	}
	return nil
}

// randomSeed returns a seed for a Config whose Seed is 0.
func randomSeed() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails
	if s := int64(binary.LittleEndian.Uint64(b[:]) >> 1); s != 0 {
		return s
	}
	return 1
}

// injector decides which commands get a fault and builds the replies. Each
// fault has a random stream of its own (PCG, from the seed and the fault's
// index), shared by all connections: the n-th command eligible for a fault,
// in the order the front decides them, takes that stream's n-th number. A
// write is decided once it holds the lock, so writes take their numbers in
// the order they run.
type injector struct {
	log       *zap.Logger
	seed      int64
	probs     []float64 // by index in faultNames
	elections Elections
	start     time.Time

	mu    sync.Mutex
	rngs  []*randv2.Rand
	draws []uint64
}

// newInjector returns nil when no fault can fire and there are no elections.
func newInjector(faults map[string]float64, seed int64, el Elections, log *zap.Logger) *injector {
	in := &injector{log: log, seed: seed, elections: el, start: time.Now()}
	on := el.Every > 0
	for i, name := range faultNames {
		p := faults[name]
		on = on || p > 0
		in.probs = append(in.probs, p)
		in.rngs = append(in.rngs, randv2.New(randv2.NewPCG(uint64(seed), uint64(i))))
		in.draws = append(in.draws, 0)
	}
	if !on {
		return nil
	}
	log.Warn("devdb injects MongoDB's failure replies",
		zap.Int64("seed", seed), zap.Any("faults", faults), zap.String("elections", el.String()))
	return in
}

// draw takes the next number of fault i's stream and reports its count and
// whether the fault fires. A fault whose probability is 0 takes no number.
func (in *injector) draw(i int) (n uint64, hit bool) {
	if in.probs[i] == 0 {
		return 0, false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.draws[i]++
	return in.draws[i], in.rngs[i].Float64() < in.probs[i]
}

// inElection reports whether t falls in an election window, and which.
func (in *injector) inElection(t time.Time) (window int64, ok bool) {
	if in.elections.Every == 0 {
		return 0, false
	}
	d := t.Sub(in.start)
	k := int64(d / in.elections.Every)
	if k < 1 {
		return 0, false
	}
	return k, d-time.Duration(k)*in.elections.Every < in.elections.For
}

// fault is one decided fault: its name and its draw's count (0 for an
// election, with the window's number in window).
type fault struct {
	name   string
	draw   uint64
	window int64
}

// plan is what the injector decided for one command: refuse it unrun
// (before), and what to do with its reply once run (after).
type plan struct {
	before *fault
	after  *fault
}

// decide draws, for each fault the command req is eligible for, whether it
// fires, and returns the first that does before the command runs and the
// first after. Every eligible fault takes its number whatever the others
// decide, so each stream depends only on the commands eligible for it.
func (in *injector) decide(cmd string, req message) plan {
	var p plan
	if req.opCode() != opMsg {
		return p // only handshakes use OP_QUERY
	}
	write := writeCommands[cmd]
	acked := !req.moreToCome()

	pick := func(slot **fault, i int, eligible bool) {
		if !eligible {
			return
		}
		if n, hit := in.draw(i); hit && *slot == nil {
			*slot = &fault{name: faultNames[i], draw: n}
		}
	}
	if w, ok := in.inElection(time.Now()); ok && write {
		p.before = &fault{name: faultElection, window: w}
	}
	pick(&p.before, iStepdown, write)
	pick(&p.before, iTimeLimit, acked && timeLimitCommands[cmd] && req.maxTime() > 0)
	pick(&p.before, iCursorKill, acked && cmd == "getMore")
	// The commands that select documents with a filter: an insert has none.
	pick(&p.before, iElemMatchNot, acked && in.probs[iElemMatchNot] > 0 && timeLimitCommands[cmd] && cmd != "insert" && requestHasElemMatchNot(req))
	pick(&p.after, iLostReply, acked && write)
	pick(&p.after, iWriteConcern, acked && write && waitsForReplication(req.commandDoc()))

	return p
}

// requestHasElemMatchNot reports whether the command req, or a document of
// its sequences (an update's or a delete's statements), has $not or $ne
// inside an $elemMatch (FaultElemMatchNot).
func requestHasElemMatchNot(req message) bool {
	doc, seqs, ok := msgParts(req)
	if !ok {
		return false
	}
	if hasElemMatchNot(doc) {
		return true
	}
	for _, docs := range seqs {
		for _, d := range docs {
			if hasElemMatchNot(d) {
				return true
			}
		}
	}
	return false
}

// hasElemMatchNot reports whether the document d holds, at any depth, an
// $elemMatch whose expression has $not or $ne among its keys
// (FaultElemMatchNot).
func hasElemMatchNot(d bson.Raw) bool {
	elems, err := d.Elements()
	if err != nil {
		return false
	}
	for _, e := range elems {
		v := e.Value()
		if v.Type != bson.TypeEmbeddedDocument && v.Type != bson.TypeArray {
			continue
		}
		sub := bson.Raw(v.Value) // an array is a document keyed "0", "1", ...
		if e.Key() == "$elemMatch" && (sub.Lookup("$not").Type != 0 || sub.Lookup("$ne").Type != 0) {
			return true
		}
		if hasElemMatchNot(sub) {
			return true
		}
	}
	return false
}

// waitsForReplication reports whether the write command doc asks for more
// than the primary's acknowledgement: a writeConcern with w other than 0 or
// 1, or none (MongoDB 5.0+'s default write concern is majority). Only such a
// write can time out waiting for replication.
func waitsForReplication(doc []byte) bool {
	wc, ok := bson.Raw(doc).Lookup("writeConcern").DocumentOK()
	if !ok {
		return true
	}
	w, err := wc.LookupErr("w")
	if err != nil {
		return true
	}
	n, isNum := number(w)
	return !isNum || n > 1
}

// number returns v as a float64 when it is a number.
func number(v bson.RawValue) (float64, bool) {
	switch v.Type {
	case bson.TypeInt32:
		return float64(v.Int32()), true
	case bson.TypeInt64:
		return float64(v.Int64()), true
	case bson.TypeDouble:
		return v.Double(), true
	default:
		return 0, false
	}
}

// errFaultClosed is returned to serve to close a client's connection on
// purpose (lostreply, or a refused fire-and-forget write). It wraps
// net.ErrClosed so that serve closes the connection without a warning: the
// injection was logged already.
var errFaultClosed = fmt.Errorf("devdb closed the connection to inject a fault: %w", net.ErrClosed)

// faultyRoundTrip is roundTrip with the faults that f.cfg.faults decides
// for req injected: a refusal sent instead of running req, or its reply
// replaced once it has run. It releases slot as roundTrip does.
func (f *front) faultyRoundTrip(pc *proxyConn, cmd string, req message, replies <-chan message, slot chan struct{}) (message, error) {
	in := f.cfg.faults
	p := in.decide(cmd, req)

	if p.before != nil {
		if slot != nil {
			<-slot
		}
		in.logFault(p.before, pc, cmd, req)
		if p.before.name == FaultCursorKill {
			if err := f.killCursor(pc, req, replies); err != nil {
				return nil, err
			}
		}
		return p.before.refusal(req)
	}

	reply, err := f.roundTrip(pc, cmd, req, replies, slot)
	if err != nil || reply == nil || p.after == nil {
		return reply, err
	}

	if p.after.name == FaultLostReply {
		in.logFault(p.after, pc, cmd, req)
		return nil, errFaultClosed
	}
	withWCE, ok := withWriteConcernError(reply, req)
	if ok {
		in.logFault(p.after, pc, cmd, req)
	}
	return withWCE, nil
}

// logFault logs an injected fault with what a replay needs: the command,
// its namespace, the connection, and the fault's draw (or election window).
func (in *injector) logFault(ft *fault, pc *proxyConn, cmd string, req message) {
	doc := bson.Raw(req.commandDoc())
	coll, _ := doc.Lookup(cmd).StringValueOK()
	if cmd == "getMore" {
		coll, _ = doc.Lookup("collection").StringValueOK()
	}
	db, _ := doc.Lookup("$db").StringValueOK()

	fields := []zap.Field{
		zap.String("fault", ft.name),
		zap.String("command", cmd),
		zap.String("db", db),
		zap.String("collection", coll),
		zap.String("conn", pc.client.RemoteAddr().String()),
		zap.Int32("request_id", req.requestID()),
		zap.Int64("seed", in.seed),
	}
	if ft.name == faultElection {
		fields = append(fields, zap.Int64("window", ft.window))
	} else {
		fields = append(fields, zap.Uint64("draw", ft.draw))
	}
	in.log.Warn("devdb injected a fault", fields...)
}

// refusal returns the reply that refuses req, unrun, for the fault ft; or,
// for a write that expects no reply (moreToCome), errFaultClosed: MongoDB
// closes the connection of a fire-and-forget write it refuses as not
// primary, so that the client selects a server again.
func (ft *fault) refusal(req message) (message, error) {
	var code int32
	var name, errmsg string
	switch ft.name {
	case FaultStepdown, faultElection:
		if req.moreToCome() {
			return nil, errFaultClosed
		}
		code, name, errmsg = codeNotWritablePrimary, "NotWritablePrimary", "not primary"
	case FaultTimeLimit:
		code, name, errmsg = codeMaxTimeMSExpired, "MaxTimeMSExpired", "operation exceeded time limit"
	case FaultCursorKill:
		id, _ := bson.Raw(req.commandDoc()).Lookup("getMore").Int64OK()
		code, name, errmsg = codeCursorNotFound, "CursorNotFound", fmt.Sprintf("cursor id %d not found", id)
	case FaultElemMatchNot:
		code, name, errmsg = codeNotImplemented, "NotImplemented", "$elemMatch: support for $not not implemented yet"
	default:
		return nil, fmt.Errorf("devdb: no refusal for fault %q", ft.name)
	}

	doc := bson.D{
		{Key: "ok", Value: 0.0},
		{Key: "errmsg", Value: errmsg},
		{Key: "code", Value: code},
		{Key: "codeName", Value: name},
	}
	if code == codeNotWritablePrimary && retryableWrite(req.commandDoc()) {
		doc = append(doc, bson.E{Key: "errorLabels", Value: bson.A{retryableWriteErrorLabel}})
	}
	return opMsgOf(0, req.requestID(), doc), nil
}

// retryableWrite reports whether the command doc is a retryable write as
// MongoDB 4.4+ tells one, to label its retryable errors: it carries a
// txnNumber and is not part of a transaction (no autocommit field). Drivers
// send a txnNumber only to a replica set or a sharded cluster, so a driver
// talking to devdb, a standalone, never does.
func retryableWrite(doc []byte) bool {
	d := bson.Raw(doc)
	if _, err := d.LookupErr("txnNumber"); err != nil {
		return false
	}
	_, err := d.LookupErr("autocommit")
	return err != nil
}

// withWriteConcernError returns reply, a write's successful reply, with a
// writeConcernError added as MongoDB sends it when wtimeout passes; it
// reports false, and returns reply as it is, when the write failed.
func withWriteConcernError(reply, req message) (message, bool) {
	raw := reply.commandDoc()
	if raw == nil {
		return reply, false
	}
	if ok, isNum := number(bson.Raw(raw).Lookup("ok")); !isNum || ok != 1 {
		return reply, false
	}
	var doc bson.D
	if err := bson.Unmarshal(raw, &doc); err != nil {
		return reply, false
	}

	errInfo := bson.D{{Key: "wtimeout", Value: true}}
	if wc, ok := bson.Raw(req.commandDoc()).Lookup("writeConcern").DocumentOK(); ok {
		errInfo = append(errInfo, bson.E{Key: "writeConcern", Value: wc})
	}
	doc = append(doc, bson.E{Key: "writeConcernError", Value: bson.D{
		{Key: "code", Value: int32(codeWriteConcernFailed)},
		{Key: "codeName", Value: "WriteConcernFailed"},
		{Key: "errmsg", Value: "waiting for replication timed out"},
		{Key: "errInfo", Value: errInfo},
	}})

	return opMsgOf(0, reply.responseTo(), doc), true
}

// killCursor kills, on pc's backend connection, the cursor that the getMore
// req names, so that it is gone for good as a killed cursor is on MongoDB.
func (f *front) killCursor(pc *proxyConn, req message, replies <-chan message) error {
	doc := bson.Raw(req.commandDoc())
	id, ok := doc.Lookup("getMore").Int64OK()
	if !ok {
		return nil
	}
	coll, _ := doc.Lookup("collection").StringValueOK()
	db, _ := doc.Lookup("$db").StringValueOK()

	kill := opMsgOf(f.pingID.Add(-1), 0, bson.D{
		{Key: "killCursors", Value: coll},
		{Key: "cursors", Value: bson.A{id}},
		{Key: "$db", Value: db},
	})
	_, err := f.roundTrip(pc, "killCursors", kill, replies, nil)
	return err
}

// opMsgOf builds an OP_MSG with one section, the document doc.
func opMsgOf(requestID, responseTo int32, doc bson.D) message {
	raw, err := bson.Marshal(doc)
	if err != nil {
		panic(err) // the documents built here always marshal
	}

	return opMsgWith(requestID, responseTo, raw)
}
