package devdb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
)

// With Config.Interleave the front applies a multi-document update or delete
// the way MongoDB does: one document at a time, each re-checked against the
// statement's filter at its write, with other connections' commands let in
// between documents. Without it a multi-document write runs whole under the
// global lock, which no MongoDB deployment guarantees.
//
// A statement that writes many documents (update with multi: true, delete
// with limit: 0) becomes: a find of the matching _ids, then, per _id, the
// lock let go and taken again, and the single-document form of the statement
// ({_id: id, $and: [filter]}, multi: false or limit: 1) sent to FerretDB.
// The counts are summed over the documents that still matched at their
// write, as MongoDB reports them. Every other statement, and every command
// with none of these, is forwarded as it is.
//
// getMore, which runs outside the lock, is with Interleave now and then held
// back a little, so that writes of other connections land between a
// cursor's batches.

// Pauses drawn from the seed.
const (
	// pauseOneIn: one gap between documents in pauseOneIn sleeps; the others
	// only let go of the lock (a command waiting for it runs then).
	pauseOneIn = 4
	// maxPause bounds a sleep between documents.
	maxPause = 2 * time.Millisecond
	// getMoreDelayOneIn: one getMore in getMoreDelayOneIn is held back,
	// by at most maxGetMoreDelay.
	getMoreDelayOneIn = 3
	maxGetMoreDelay   = 5 * time.Millisecond
	// idBatch is the batch size of the find that reads the matching _ids.
	idBatch = 100_000
)

// interleaver draws the interleaving points of multi-document writes and the
// getMore delays from one seeded source, so that a single connection's
// workload interleaves the same way on every run with the same seed.
type interleaver struct {
	log  *zap.Logger
	seed int64

	mu  sync.Mutex
	rng *rand.Rand
}

// newInterleaver returns nil when interleave is off. A seed of 0 picks one
// from the clock; the seed is logged so that a run can be replayed.
func newInterleaver(interleave bool, seed int64, log *zap.Logger) *interleaver {
	if !interleave {
		return nil
	}
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	log.Info("interleave: multi-document writes apply one document at a time", zap.Int64("seed", seed))

	return &interleaver{log: log.Named("interleave"), seed: seed, rng: rand.New(rand.NewSource(seed))}
}

// draw returns, one time in oneIn, a pause in [50µs, 50µs+max); else 0.
func (il *interleaver) draw(oneIn int, max time.Duration) time.Duration {
	il.mu.Lock()
	defer il.mu.Unlock()

	if il.rng.Intn(oneIn) != 0 {
		return 0
	}

	return 50*time.Microsecond + time.Duration(il.rng.Int63n(int64(max)))
}

// interleave is the front's hook at the start of roundTrip (so after the
// fault injector's decision, when there is one), called with req about to
// be forwarded and slot held (the lock, a reader's place, or nil). For a multi-document write
// it applies it here and reports done, having released the lock; for a
// getMore it may sleep first. Otherwise it does nothing.
func (f *front) interleave(pc *proxyConn, cmd string, req message, replies <-chan message, slot chan struct{}) (message, bool, error) {
	il := f.cfg.il
	if il == nil {
		return nil, false, nil
	}
	if cmd == "getMore" {
		il.delayGetMore(pc)
		return nil, false, nil
	}
	if slot != f.lockCh || (cmd != "update" && cmd != "delete") {
		return nil, false, nil
	}
	w, ok := parseWrite(cmd, req)
	if !ok {
		return nil, false, nil
	}
	defer f.unlock()

	r := &interleaved{f: f, il: il, pc: pc, replies: replies, w: w, conn: pc.client.RemoteAddr().String()}
	doc, err := r.run()
	if err != nil || req.moreToCome() {
		return nil, true, err
	}

	return opMsgWith(0, req.requestID(), doc), true, nil
}

// delayGetMore holds a getMore back, one time in getMoreDelayOneIn.
func (il *interleaver) delayGetMore(pc *proxyConn) {
	d := il.draw(getMoreDelayOneIn, maxGetMoreDelay)
	if d == 0 {
		return
	}
	il.log.Info("interleave: getMore held back",
		zap.String("command", "getMore"),
		zap.String("conn", pc.client.RemoteAddr().String()),
		zap.Duration("pause", d))
	time.Sleep(d)
}

// writeCmd is an update or delete command, its statements gathered from the
// command document and any OP_MSG document sequence.
type writeCmd struct {
	name    string // "update" or "delete"
	coll    bson.RawValue
	key     string // "updates" or "deletes"
	doc     bson.Raw
	stmts   []bson.Raw
	ordered bool
}

// parseWrite returns the write command of req when it is an OP_MSG update or
// delete with at least one statement that writes many documents.
func parseWrite(cmd string, req message) (*writeCmd, bool) {
	doc, seqs, ok := msgParts(req)
	if !ok {
		return nil, false
	}
	w := &writeCmd{name: cmd, key: cmd + "s", doc: doc, ordered: true}
	w.coll = doc.Lookup(cmd)
	if w.coll.Type != bson.TypeString {
		return nil, false
	}
	if _, err := doc.LookupErr("txnNumber"); err == nil {
		return nil, false // a multi-document write may not be retryable: FerretDB answers
	}
	if o, err := doc.LookupErr("ordered"); err == nil {
		b, ok := o.BooleanOK()
		if !ok {
			return nil, false // not a boolean: FerretDB answers
		}
		w.ordered = b
	}
	if arr, ok := doc.Lookup(w.key).ArrayOK(); ok {
		vals, err := arr.Values()
		if err != nil {
			return nil, false
		}
		for _, v := range vals {
			d, ok := v.DocumentOK()
			if !ok {
				return nil, false
			}
			w.stmts = append(w.stmts, d)
		}
	}
	w.stmts = append(w.stmts, seqs[w.key]...)

	for _, st := range w.stmts {
		if w.many(st) {
			return w, true
		}
	}

	return nil, false
}

// many reports whether the statement st writes many documents: an update
// with multi: true whose update is operators or a pipeline (a replacement
// with multi is an error FerretDB reports), a delete with limit 0.
func (w *writeCmd) many(st bson.Raw) bool {
	if w.name == "delete" {
		n, ok := st.Lookup("limit").AsInt64OK()
		return ok && n == 0
	}
	if m, ok := st.Lookup("multi").BooleanOK(); !ok || !m {
		return false
	}
	u := st.Lookup("u")
	switch u.Type {
	case bson.TypeArray:
		return true
	case bson.TypeEmbeddedDocument:
		k := firstKey(u.Document())
		return k != "" && k[0] == '$'
	}

	return false
}

// msgParts returns the command document of an OP_MSG and its document
// sequences by identifier.
func msgParts(m message) (bson.Raw, map[string][]bson.Raw, bool) {
	if m.opCode() != opMsg || len(m) < headerLen+4 {
		return nil, nil, false
	}
	sections := m[headerLen+4:]
	if binary.LittleEndian.Uint32(m[headerLen:])&1 != 0 { // checksumPresent
		if len(sections) < 4 {
			return nil, nil, false
		}
		sections = sections[:len(sections)-4]
	}

	var doc bson.Raw
	seqs := map[string][]bson.Raw{}
	for len(sections) > 5 {
		kind := sections[0]
		size := int(binary.LittleEndian.Uint32(sections[1:5]))
		if size < 5 || size > len(sections)-1 {
			return nil, nil, false
		}
		body := sections[1 : 1+size]
		sections = sections[1+size:]
		switch kind {
		case 0:
			doc = bson.Raw(body)
		case 1:
			id, docs, ok := docSequence(body[4:])
			if !ok {
				return nil, nil, false
			}
			seqs[id] = append(seqs[id], docs...)
		default:
			return nil, nil, false
		}
	}
	if doc == nil || doc.Validate() != nil {
		return nil, nil, false
	}

	return doc, seqs, true
}

// docSequence splits the body of a kind-1 section (after its size): an
// identifier, then documents.
func docSequence(b []byte) (string, []bson.Raw, bool) {
	end := 0
	for end < len(b) && b[end] != 0 {
		end++
	}
	if end == len(b) {
		return "", nil, false
	}
	id := string(b[:end])
	b = b[end+1:]

	var docs []bson.Raw
	for len(b) > 0 {
		if len(b) < 5 {
			return "", nil, false
		}
		n := int(binary.LittleEndian.Uint32(b))
		if n < 5 || n > len(b) || bson.Raw(b[:n]).Validate() != nil {
			return "", nil, false
		}
		docs = append(docs, bson.Raw(b[:n]))
		b = b[n:]
	}

	return id, docs, true
}

// errBackendReply reports a reply from FerretDB the front cannot read.
var errBackendReply = errors.New("unreadable reply from the backend")

// interleaved is one multi-document write being applied.
type interleaved struct {
	f       *front
	il      *interleaver
	pc      *proxyConn
	replies <-chan message
	w       *writeCmd
	conn    string
}

// call sends the command doc to pc's backend, the lock held, and returns
// FerretDB's reply document.
func (r *interleaved) call(doc bson.D) (bson.Raw, error) {
	b, err := bson.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("interleave: marshal: %w", err)
	}
	id := r.f.pingID.Add(-1)
	if hook := r.f.testHookForward.Load(); hook != nil {
		(*hook)(firstKey(b))
	}
	if _, err := r.pc.backend.Write(opMsgWith(id, 0, b)); err != nil {
		return nil, fmt.Errorf("write to backend: %w", err)
	}
	for m := range r.replies {
		if m.responseTo() != id {
			continue
		}
		d := bson.Raw(m.commandDoc())
		if d == nil || d.Validate() != nil {
			return nil, errBackendReply
		}
		return d, nil
	}

	return nil, errBackendClosed
}

// gap lets go of the lock between two documents (a command waiting for it
// runs then), sleeps now and then, and takes the lock again.
func (r *interleaved) gap(stmt, doc int) {
	r.f.unlock()
	if d := r.il.draw(pauseOneIn, maxPause); d > 0 {
		r.il.log.Info("interleave: pause between documents",
			zap.String("command", r.w.name), zap.String("conn", r.conn),
			zap.Int("stmt", stmt), zap.Int("doc", doc), zap.Duration("pause", d))
		time.Sleep(d)
	} else {
		runtime.Gosched()
	}
	r.f.lock()
}

// stmtResult is what one statement did, as MongoDB reports it.
type stmtResult struct {
	n, nModified int64
	upserted     []bson.RawValue // _ids
	writeErr     bson.Raw        // the statement's write error, index not yet set
	fail         bson.Raw        // FerretDB's reply when the command failed whole (ok: 0)
}

// run applies the statements in order and returns the command's reply:
// n, nModified (update), upserted and writeErrors, with the statements'
// indexes, and ok. A command that fails whole gets FerretDB's reply.
func (r *interleaved) run() (bson.Raw, error) {
	var (
		n, nModified int64
		upserted     bson.A
		writeErrors  bson.A
	)
	for i, st := range r.w.stmts {
		if i > 0 {
			r.gap(i, -1)
		}
		res, err := r.statement(i, st)
		if err != nil {
			return nil, err
		}
		if res.fail != nil {
			return res.fail, nil
		}
		if res.writeErr != nil {
			writeErrors = append(writeErrors, withIndex(res.writeErr, i))
			if r.w.ordered {
				break
			}
			continue
		}
		n += res.n
		nModified += res.nModified
		for _, id := range res.upserted {
			upserted = append(upserted, bson.D{{Key: "index", Value: int32(i)}, {Key: "_id", Value: id}})
		}
	}

	reply := bson.D{{Key: "n", Value: int32(n)}}
	if r.w.name == "update" {
		reply = append(reply, bson.E{Key: "nModified", Value: int32(nModified)})
	}
	if len(upserted) > 0 {
		reply = append(reply, bson.E{Key: "upserted", Value: upserted})
	}
	if len(writeErrors) > 0 {
		reply = append(reply, bson.E{Key: "writeErrors", Value: writeErrors})
	}
	reply = append(reply, bson.E{Key: "ok", Value: 1.0})

	return bson.Marshal(reply)
}

// withIndex returns the write error we with its index set to i.
func withIndex(we bson.Raw, i int) bson.D {
	d := bson.D{{Key: "index", Value: int32(i)}}
	elems, _ := we.Elements()
	for _, e := range elems {
		if e.Key() != "index" {
			d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
		}
	}

	return d
}

// statement applies statement i: one document at a time when it writes
// many, else as it is. An upsert that matched nothing at any write is then
// forwarded as it is, so that FerretDB inserts (MongoDB upserts when the
// update matched no document).
func (r *interleaved) statement(i int, st bson.Raw) (stmtResult, error) {
	if !r.w.many(st) {
		return r.single(st)
	}
	ids, fail, err := r.matchingIDs(st)
	if err != nil {
		return stmtResult{}, err
	}
	if fail != nil {
		return r.single(st) // a filter FerretDB refuses: let it answer as it does
	}

	var res stmtResult
	for j, id := range ids {
		r.gap(i, j)
		one, err := r.one(st, id)
		if err != nil {
			return stmtResult{}, err
		}
		if one.fail != nil || one.writeErr != nil {
			// MongoDB stops a multi-document write at its first failing
			// document and reports none of the statement's documents.
			return stmtResult{fail: one.fail, writeErr: one.writeErr}, nil
		}
		res.n += one.n
		res.nModified += one.nModified
	}
	r.il.log.Info("interleave: statement applied one document at a time",
		zap.String("command", r.w.name), zap.String("conn", r.conn), zap.Int("stmt", i),
		zap.Int("ids", len(ids)), zap.Int64("n", res.n), zap.Int64("n_modified", res.nModified))

	if up, _ := st.Lookup("upsert").BooleanOK(); up && res.n == 0 {
		return r.single(st)
	}

	return res, nil
}

// single forwards statement st alone in a command of its own.
func (r *interleaved) single(st bson.Raw) (stmtResult, error) {
	d, err := r.call(r.command(st))
	if err != nil {
		return stmtResult{}, err
	}

	return parseResult(d), nil
}

// one applies statement st to the document id alone, if it still matches.
func (r *interleaved) one(st bson.Raw, id bson.RawValue) (stmtResult, error) {
	q, _ := st.Lookup("q").DocumentOK()
	filter := bson.D{{Key: "_id", Value: id}}
	if len(q) > 5 { // not {}
		filter = append(filter, bson.E{Key: "$and", Value: bson.A{q}})
	}

	one := bson.D{}
	elems, _ := st.Elements()
	for _, e := range elems {
		switch e.Key() {
		case "q", "multi", "upsert", "limit":
		default:
			one = append(one, bson.E{Key: e.Key(), Value: e.Value()})
		}
	}
	one = append(one, bson.E{Key: "q", Value: filter})
	if r.w.name == "update" {
		one = append(one, bson.E{Key: "multi", Value: false}, bson.E{Key: "upsert", Value: false})
	} else {
		one = append(one, bson.E{Key: "limit", Value: int32(1)})
	}

	return r.single(mustMarshal(one))
}

// command returns the command of r's kind with the one statement st, and
// the original command's other fields but its write concern (FerretDB has
// no replication) and ordered.
func (r *interleaved) command(st bson.Raw) bson.D {
	cmd := bson.D{
		{Key: r.w.name, Value: r.w.coll},
		{Key: r.w.key, Value: bson.A{st}},
		{Key: "ordered", Value: true},
	}
	elems, _ := r.w.doc.Elements()
	for _, e := range elems {
		switch e.Key() {
		case r.w.name, r.w.key, "ordered", "writeConcern", "$clusterTime":
		default:
			cmd = append(cmd, bson.E{Key: e.Key(), Value: e.Value()})
		}
	}

	return cmd
}

// matchingIDs reads the _ids of the documents statement st's filter matches
// now, in natural order. fail is FerretDB's reply when the find failed.
func (r *interleaved) matchingIDs(st bson.Raw) (ids []bson.RawValue, fail bson.Raw, err error) {
	find := bson.D{
		{Key: "find", Value: r.w.coll},
		{Key: "filter", Value: st.Lookup("q")},
		{Key: "projection", Value: bson.D{{Key: "_id", Value: 1}}},
		{Key: "batchSize", Value: int32(idBatch)},
	}
	for _, k := range []string{"collation", "hint"} {
		if v, err := st.LookupErr(k); err == nil {
			find = append(find, bson.E{Key: k, Value: v})
		}
	}
	for _, k := range []string{"let", "$db"} {
		if v, err := r.w.doc.LookupErr(k); err == nil {
			find = append(find, bson.E{Key: k, Value: v})
		}
	}

	d, err := r.call(find)
	for batch := "firstBatch"; err == nil; batch = "nextBatch" {
		if !truthy(d.Lookup("ok")) {
			return nil, d, nil
		}
		docs, _ := d.Lookup("cursor", batch).ArrayOK()
		vals, _ := docs.Values()
		for _, v := range vals {
			if doc, ok := v.DocumentOK(); ok {
				ids = append(ids, doc.Lookup("_id"))
			}
		}
		cursor, _ := d.Lookup("cursor", "id").AsInt64OK()
		if cursor == 0 {
			return ids, nil, nil
		}
		d, err = r.call(bson.D{
			{Key: "getMore", Value: cursor},
			{Key: "collection", Value: r.w.coll},
			{Key: "batchSize", Value: int32(idBatch)},
			{Key: "$db", Value: r.w.doc.Lookup("$db")},
		})
	}

	return nil, nil, err
}

// parseResult reads FerretDB's reply to a one-statement update or delete.
func parseResult(d bson.Raw) stmtResult {
	if !truthy(d.Lookup("ok")) {
		return stmtResult{fail: d}
	}
	var res stmtResult
	if we, ok := d.Lookup("writeErrors").ArrayOK(); ok {
		if v, err := we.IndexErr(0); err == nil {
			if doc, ok := v.DocumentOK(); ok {
				return stmtResult{writeErr: doc}
			}
		}
	}
	res.n, _ = d.Lookup("n").AsInt64OK()
	res.nModified, _ = d.Lookup("nModified").AsInt64OK()
	if up, ok := d.Lookup("upserted").ArrayOK(); ok {
		vals, _ := up.Values()
		for _, v := range vals {
			if doc, ok := v.DocumentOK(); ok {
				res.upserted = append(res.upserted, doc.Lookup("_id"))
			}
		}
	}

	return res
}

// truthy reports whether v, a reply's ok, is 1 or true.
func truthy(v bson.RawValue) bool {
	if b, ok := v.BooleanOK(); ok {
		return b
	}
	n, ok := number(v)
	return ok && n != 0
}

// mustMarshal marshals a document built of values that always marshal.
func mustMarshal(d bson.D) bson.Raw {
	b, err := bson.Marshal(d)
	if err != nil {
		panic(err)
	}

	return b
}
