package devdb

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
)

// backendDialTimeout bounds how long the front waits to open the backend
// connection for a new client connection.
const backendDialTimeout = 10 * time.Second

// Buffer sizes of the readers of one client connection and of its backend
// connection. A client connection that has sent nothing, or only a header,
// costs its goroutine and clientBufSize.
const (
	clientBufSize  = 4 << 10
	backendBufSize = 32 << 10
)

// freePerConn is how much of a request's buffer does not count toward the
// in-flight budget: ordinary commands fit in it, so a budget exhausted by
// large messages never refuses a ping. MaxConns × freePerConn bounds it.
const freePerConn = 16 << 10

// unlockedCommands are the commands the front forwards without taking the
// global lock or a reader's place.
//
// hello and isMaster only describe the server, and an awaitable hello (one
// with maxAwaitTimeMS) may block on a server for many seconds.
//
// getMore only reads, from a cursor that a find, aggregate or list command
// opened, and on a tailable awaitData cursor FerretDB waits for new
// documents up to the getMore's maxTimeMS (1 s by default, up to 2³¹ ms),
// holding nothing while it polls. It writes nothing (see readOnly).
var unlockedCommands = map[string]bool{
	"hello":    true,
	"isMaster": true,
	"ismaster": true,
	"getMore":  true,
}

// readCommands are the commands that only read documents or metadata. They
// run beside the global lock, at most maxReaders at once (see readOnly).
var readCommands = map[string]bool{
	"find":            true,
	"count":           true,
	"distinct":        true,
	"listIndexes":     true,
	"listCollections": true,
}

// readOnly reports whether the command cmd, whose document is doc, only
// reads, and so may run outside the global lock: a read command, or an
// aggregate none of whose stages writes ($out, $merge).
//
// The lock is there to make a findAndModify's read-then-write atomic
// against other writes. A command that writes nothing cannot break that,
// and FerretDB (SQLite in WAL mode, a pool of connections) runs reads beside
// a write, each reading the documents as they were before or after it, as
// MongoDB's reads do. Before reads ran outside the lock, one sort of a big
// collection (FerretDB sorts in Go: about a second per 20,000 documents)
// held up every write, a fenced update by _id included.
func readOnly(cmd string, doc []byte) bool {
	if readCommands[cmd] {
		return true
	}
	if cmd != "aggregate" {
		return false
	}
	pipeline, ok := bson.Raw(doc).Lookup("pipeline").ArrayOK()
	if !ok {
		return false
	}
	stages, err := pipeline.Values()
	if err != nil {
		return false
	}
	for _, st := range stages {
		d, ok := st.DocumentOK()
		if !ok {
			return false
		}
		switch firstKey(d) {
		case "", "$out", "$merge":
			return false
		}
	}
	return true
}

// maxReaders is how many read-only commands run at once beside the lock:
// each may hold a whole sorted collection in memory (FerretDB sorts in Go).
// It is more than the CPUs, so that short reads are not held up behind a
// few long sorts, but bounded, so that many clients sorting a big
// collection at once cannot take all memory. A find by _id takes no place
// (byID).
var maxReaders = max(4, 2*runtime.NumCPU())

// byID reports whether the find command doc has a filter on _id: devdb
// reads only the rows such a filter names (idindex.go and the overlay's
// pushdown), whatever the collection holds, so it runs without a reader's
// place.
func byID(cmd string, doc []byte) bool {
	if cmd != "find" {
		return false
	}
	filter, ok := bson.Raw(doc).Lookup("filter").DocumentOK()
	if !ok {
		return false
	}
	v, err := filter.LookupErr("_id")
	if err != nil {
		return false
	}
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		// {_id: {$in: [...]}} or {_id: {$eq: x}} is pushed down; another
		// operator ($gt, $exists, ...) may read every row.
		op := firstKey(v.Document())
		return op == "$in" || op == "$eq"
	case bson.TypeRegex, bson.TypeUndefined:
		return false
	default:
		return true
	}
}

var (
	// errBackendClosed reports that the backend connection ended while the
	// front was waiting for a reply.
	errBackendClosed = errors.New("backend connection closed")

	// errClientGone reports that a client closed its connection while its
	// request waited for the lock: the request is dropped unrun.
	errClientGone = errors.New("client closed the connection while its request waited for the lock")

	// errMaxTimeExpired reports that a request's maxTimeMS passed while it
	// waited for the lock: it is answered with MaxTimeMSExpired, unrun.
	errMaxTimeExpired = errors.New("maxTimeMS passed while the request waited for the lock")

	// errBudget reports that a request would take the in-flight budget past
	// its bound.
	errBudget = errors.New("in-flight message budget exhausted")
)

// aLongTimeAgo is a read deadline that has passed: setting it wakes a
// blocked read.
var aLongTimeAgo = time.Unix(1, 0)

// frontConfig holds the front's bounds, with Config's defaults applied.
type frontConfig struct {
	maxConns       int
	maxInFlight    int64
	messageTimeout time.Duration

	// faults, when not nil, injects MongoDB's failure replies (faults.go).
	faults *injector

	// il, when not nil, applies multi-document writes one document at a
	// time (interleave.go).
	il *interleaver
}

// front accepts client connections and forwards each one's messages to a
// backend connection of its own, running one write at a time across all
// connections, and reads beside it (readOnly).
type front struct {
	ln          net.Listener
	backendAddr string
	log         *zap.Logger
	cfg         frontConfig

	// lockCh is the one-command-at-a-time lock, a channel so that waiting
	// for it can be given up: a request holds it (has sent into it) from the
	// moment it is sent to the backend until its reply has been read back.
	// Read-only commands do not take it; they take a place in readCh, of
	// maxReaders places, the same way.
	lockCh chan struct{}
	readCh chan struct{}

	// pingID numbers the pings the front itself sends; they count down from
	// -1 so they never collide with a driver's (positive) request ids.
	pingID atomic.Int32

	connsMu sync.Mutex
	conns   map[*proxyConn]struct{}
	closing bool

	// active counts client connections being served, against maxConns.
	active atomic.Int64

	// inFlight counts the bytes of request buffers held beyond freePerConn
	// each, against maxInFlight.
	inFlight atomic.Int64

	// refusedMu guards the rate limit of the refusal warnings.
	refusedMu      sync.Mutex
	refusedLogged  time.Time
	refusedSince   int64
	refusedCounter atomic.Int64

	// Counters for tests and logs.
	opened  atomic.Int64 // client connections accepted
	queued  atomic.Int64 // requests waiting for the lock or a reader's place now
	dropped atomic.Int64 // requests dropped: the client left while they waited
	expired atomic.Int64 // requests answered MaxTimeMSExpired while they waited

	// testHookForward, when set, is called with a request's command name
	// just before the request is sent to the backend (after the lock is
	// taken, for a locked command).
	testHookForward atomic.Pointer[func(cmd string)]

	// afterIndexes, when set, is called with the database of each
	// createIndexes that FerretDB answered, before the client gets the
	// reply (the indexer's indexNow).
	afterIndexes atomic.Pointer[func(db string)]

	acceptDone chan struct{}
	wg         sync.WaitGroup
	closeOnce  sync.Once
}

// newFront starts serving ln, forwarding to backendAddr.
func newFront(ln net.Listener, backendAddr string, log *zap.Logger, cfg frontConfig) *front {
	f := &front{
		ln:          ln,
		backendAddr: backendAddr,
		log:         log,
		cfg:         cfg,
		lockCh:      make(chan struct{}, 1),
		readCh:      make(chan struct{}, maxReaders),
		conns:       make(map[*proxyConn]struct{}),
		acceptDone:  make(chan struct{}),
	}

	go f.acceptLoop()

	return f
}

// lock takes the one-command-at-a-time lock.
func (f *front) lock() { f.lockCh <- struct{}{} }

// unlock releases the lock.
func (f *front) unlock() { <-f.lockCh }

// close stops accepting, closes every client and backend connection and
// waits for all of the front's goroutines to return.
func (f *front) close() error {
	var err error

	f.closeOnce.Do(func() {
		if e := f.ln.Close(); e != nil && !errors.Is(e, net.ErrClosed) {
			err = fmt.Errorf("close listener: %w", e)
		}
		<-f.acceptDone

		f.connsMu.Lock()
		f.closing = true
		for pc := range f.conns {
			pc.close()
		}
		f.connsMu.Unlock()

		f.wg.Wait()
	})

	return err
}

func (f *front) acceptLoop() {
	defer close(f.acceptDone)

	var delay time.Duration

	for {
		c, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}

			// Out of file descriptors and the like: back off as net/http
			// does, rather than spin.
			if delay == 0 {
				delay = 5 * time.Millisecond
			} else {
				delay = min(2*delay, time.Second)
			}
			f.log.Warn("accept failed", zap.Error(err), zap.Duration("retry_in", delay))
			time.Sleep(delay)

			continue
		}
		delay = 0

		f.opened.Add(1)

		if f.active.Load() >= int64(f.cfg.maxConns) {
			f.refuse(c)
			continue
		}
		f.active.Add(1)

		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.active.Add(-1)
			f.serve(c)
		}()
	}
}

// refuse closes a connection accepted past maxConns at once, reading
// nothing from it, and logs it, at most once a second.
func (f *front) refuse(c net.Conn) {
	_ = c.Close()
	f.refusedCounter.Add(1)

	f.refusedMu.Lock()
	defer f.refusedMu.Unlock()

	f.refusedSince++
	if time.Since(f.refusedLogged) < time.Second {
		return
	}
	f.log.Warn("too many connections; closing new ones",
		zap.Int("max_conns", f.cfg.maxConns),
		zap.Int64("refused", f.refusedSince))
	f.refusedLogged = time.Now()
	f.refusedSince = 0
}

// proxyConn is one client connection and the backend connection dedicated
// to it.
type proxyConn struct {
	client  net.Conn
	backend net.Conn
	once    sync.Once

	// held is how many bytes of the in-flight budget this connection holds.
	held int64
}

// close closes both connections; it is safe to call more than once and from
// any goroutine.
func (pc *proxyConn) close() {
	pc.once.Do(func() {
		_ = pc.client.Close()
		if pc.backend != nil {
			_ = pc.backend.Close()
		}
	})
}

// grow reserves what a request buffer of newCap bytes needs from the
// in-flight budget, beyond freePerConn.
func (f *front) grow(pc *proxyConn, newCap int) error {
	need := int64(newCap-freePerConn) - pc.held
	if need <= 0 {
		return nil
	}

	for {
		cur := f.inFlight.Load()
		if cur+need > f.cfg.maxInFlight {
			return fmt.Errorf("%w: %d bytes held, %d more wanted, at most %d", errBudget, cur, need, f.cfg.maxInFlight)
		}
		if f.inFlight.CompareAndSwap(cur, cur+need) {
			pc.held += need
			return nil
		}
	}
}

// release gives back what pc holds of the in-flight budget.
func (f *front) release(pc *proxyConn) {
	if pc.held != 0 {
		f.inFlight.Add(-pc.held)
		pc.held = 0
	}
}

// track registers pc so that close can reach it; it reports false when the
// front is already closing.
func (f *front) track(pc *proxyConn) bool {
	f.connsMu.Lock()
	defer f.connsMu.Unlock()

	if f.closing {
		return false
	}
	f.conns[pc] = struct{}{}

	return true
}

func (f *front) untrack(pc *proxyConn) {
	f.connsMu.Lock()
	defer f.connsMu.Unlock()

	delete(f.conns, pc)
}

// serve forwards the messages of one client connection until either side
// closes.
func (f *front) serve(client net.Conn) {
	log := f.log.With(zap.String("client", client.RemoteAddr().String()))

	pc := &proxyConn{client: client}
	if !f.track(pc) {
		pc.close()
		return
	}
	defer f.untrack(pc)
	defer pc.close()
	defer f.release(pc)

	cr := bufio.NewReaderSize(client, clientBufSize)
	var (
		buf     []byte
		replies <-chan message // nil until the backend connection is open
	)

	for {
		req, err := f.readRequest(pc, cr, buf)
		if err != nil {
			var lenErr *errFrameLength
			var netErr net.Error
			switch {
			case errors.As(err, &lenErr):
				log.Warn("bad message length from client; closing connection",
					zap.Int32("length", lenErr.length),
					zap.Int("max", MaxMessageSize))
			case errors.Is(err, errBudget):
				log.Warn("message too large for what is left of the in-flight budget; closing connection",
					zap.Error(err))
			case errors.As(err, &netErr) && netErr.Timeout():
				log.Warn("message not received in full in time; closing connection",
					zap.Duration("message_timeout", f.cfg.messageTimeout))
			case !isClosed(err):
				log.Warn("reading from the client failed; closing connection", zap.Error(err))
			}
			return
		}

		// The backend connection is opened on the first whole request, so
		// a connection that never sends one costs FerretDB nothing.
		if replies == nil {
			r, stop, err := f.openBackend(pc, log)
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					log.Error("cannot connect to the backend; closing client connection", zap.Error(err))
				}
				return
			}
			defer stop()
			replies = r
		}

		last, err := f.handle(pc, cr, req, replies)

		// Keep a buffer the budget does not count for the next request; let
		// a larger one go.
		if cap(req) <= freePerConn {
			buf = req
		} else {
			buf = nil
		}
		f.release(pc)

		if err != nil {
			switch {
			case errors.Is(err, errClientGone):
				log.Debug("client left while its request waited for the lock; request dropped",
					zap.String("command", req.commandName()))
			case !isClosed(err) && !errors.Is(err, errBackendClosed):
				log.Warn("forwarding failed; closing connection", zap.Error(err))
			}
			return
		}

		if last != nil {
			if _, err := client.Write(last); err != nil {
				if !isClosed(err) {
					log.Warn("writing to the client failed; closing connection", zap.Error(err))
				}
				return
			}
		}
	}
}

// readRequest waits, as long as need be, for a client's next message to
// begin, then reads it whole within the message timeout.
func (f *front) readRequest(pc *proxyConn, cr *bufio.Reader, buf []byte) (message, error) {
	if _, err := cr.Peek(1); err != nil {
		return nil, err
	}

	if f.cfg.messageTimeout > 0 {
		if err := pc.client.SetReadDeadline(time.Now().Add(f.cfg.messageTimeout)); err != nil {
			return nil, err
		}
		defer func() { _ = pc.client.SetReadDeadline(time.Time{}) }()
	}

	return readMessage(cr, buf, func(newCap int) error { return f.grow(pc, newCap) })
}

// openBackend dials pc's backend connection and starts the goroutine that
// turns its byte stream into messages. When the backend goes away that
// goroutine closes the client connection too, so an idle client learns of
// it at once. stop ends it.
func (f *front) openBackend(pc *proxyConn, log *zap.Logger) (replies <-chan message, stop func(), err error) {
	backend, err := net.DialTimeout("tcp", f.backendAddr, backendDialTimeout)
	if err != nil {
		return nil, nil, err
	}

	// Install the backend under the lock that close uses, so a concurrent
	// close cannot miss it.
	f.connsMu.Lock()
	pc.backend = backend
	closing := f.closing
	f.connsMu.Unlock()
	if closing {
		_ = backend.Close()
		return nil, nil, net.ErrClosed
	}

	out := make(chan message)
	stopCh := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer close(out)
		defer pc.close()

		br := bufio.NewReaderSize(backend, backendBufSize)
		for {
			m, err := readMessage(br, nil, nil)
			if err != nil {
				if !isClosed(err) {
					log.Warn("reading from the backend failed; closing connection", zap.Error(err))
				}
				return
			}

			select {
			case out <- m:
			case <-stopCh:
				return
			}
		}
	}()

	stop = func() {
		close(stopCh)
		pc.close()
		<-readerDone
	}

	return out, stop, nil
}

// handle runs one request: it takes the lock, or a reader's place for a
// read-only command, unless req is an unlocked command, then forwards req
// and waits for its reply. It returns the final reply for the caller to
// write to the client once the lock is released, or nil when the client
// expects no reply.
//
// A request that waits for the lock is dropped unrun if its client closes
// the connection meanwhile (errClientGone), and answered MaxTimeMSExpired
// unrun if its maxTimeMS passes meanwhile.
func (f *front) handle(pc *proxyConn, cr *bufio.Reader, req message, replies <-chan message) (message, error) {
	received := time.Now()
	cmd := req.commandName()
	var slot chan struct{}
	switch {
	case unlockedCommands[cmd], byID(cmd, req.commandDoc()):
	case readOnly(cmd, req.commandDoc()):
		slot = f.readCh
	default:
		slot = f.lockCh
	}

	if slot != nil {
		finish, err := f.acquire(slot, pc, cr, received, req.maxTime())
		if errors.Is(err, errMaxTimeExpired) {
			if req.moreToCome() {
				return nil, nil
			}
			return maxTimeExpiredReply(req.requestID()), nil
		}
		if err != nil {
			return nil, err
		}
		defer finish()
	}

	var reply message
	var err error
	if f.cfg.faults != nil {
		reply, err = f.faultyRoundTrip(pc, cmd, req, replies, slot)
	} else {
		reply, err = f.roundTrip(pc, cmd, req, replies, slot)
	}
	if hook := f.afterIndexes.Load(); hook != nil && err == nil && cmd == "createIndexes" {
		if db, ok := bson.Raw(req.commandDoc()).Lookup("$db").StringValueOK(); ok {
			(*hook)(db)
		}
	}
	return reply, err
}

// acquire takes a place in slot (the lock or a reader's place) for a
// request of pc received at the given time. If there is none free it waits, watching the client connection: it gives up
// with errClientGone if the client closes it, and with errMaxTimeExpired if
// maxTime (when not 0) passes. Once it has the lock it returns at once; the
// caller calls finish after the round trip, before it reads from cr again, so
// that ending the watcher costs the lock's holder nothing.
func (f *front) acquire(slot chan struct{}, pc *proxyConn, cr *bufio.Reader, received time.Time, maxTime time.Duration) (finish func(), err error) {
	select {
	case slot <- struct{}{}:
		return func() {}, nil
	default:
	}

	f.queued.Add(1)
	defer f.queued.Add(-1)

	var expiry <-chan time.Time
	if maxTime > 0 {
		t := time.NewTimer(time.Until(received.Add(maxTime)))
		defer t.Stop()
		expiry = t.C
	}

	// The watcher waits for the client's next bytes: an error (end of
	// stream, reset, closed) means the client has gone. Data (a pipelined
	// request) means it is still there; it stays buffered in cr.
	watch := make(chan error, 1)
	go func() {
		_, err := cr.Peek(1)
		watch <- err
	}()

	// wake makes the watcher's read return; wait waits for it, restores the
	// deadline and reports whether the watcher saw the client go.
	wake := func() { _ = pc.client.SetReadDeadline(aLongTimeAgo) }
	wait := func() bool {
		err := <-watch
		_ = pc.client.SetReadDeadline(time.Time{})

		var netErr net.Error
		return err != nil && !(errors.As(err, &netErr) && netErr.Timeout())
	}

	for {
		select {
		case slot <- struct{}{}:
			wake()
			return func() { wait() }, nil

		case err := <-watch:
			if err != nil {
				f.dropped.Add(1)
				return nil, errClientGone
			}
			// Data is waiting; nothing more to watch.
			watch = nil
			wake = func() {}
			wait = func() bool { return false }

		case <-expiry:
			wake()
			if wait() {
				f.dropped.Add(1)
				return nil, errClientGone
			}
			f.expired.Add(1)
			return nil, errMaxTimeExpired
		}
	}
}

// roundTrip sends req to the backend and waits for the reply to it. When
// slot is not nil, the caller holds a place in it (the lock or a reader's
// place) and roundTrip releases it.
//
// The place is released as soon as the reply has been read from the backend:
// by then the command has finished, so the client's own reading speed never
// holds up other clients.
func (f *front) roundTrip(pc *proxyConn, cmd string, req message, replies <-chan message, slot chan struct{}) (message, error) {
	if r, done, err := f.interleave(pc, cmd, req, replies, slot); done {
		return r, err
	}
	if slot != nil {
		defer func() { <-slot }()
	}

	if hook := f.testHookForward.Load(); hook != nil {
		(*hook)(cmd)
	}

	if _, err := pc.backend.Write(req); err != nil {
		return nil, fmt.Errorf("write to backend: %w", err)
	}

	if req.moreToCome() {
		// The client expects no reply. FerretDB v1 ignores moreToCome and
		// replies anyway, and the command may still be running when the
		// request has been written. A ping on the same connection, which
		// the backend answers only after that command, settles both: the
		// command has finished once the ping's reply arrives, and any reply
		// before it is dropped.
		id := f.pingID.Add(-1)
		if _, err := pc.backend.Write(pingMessage(id)); err != nil {
			return nil, fmt.Errorf("write to backend: %w", err)
		}

		for r := range replies {
			if r.responseTo() == id {
				return nil, nil
			}
		}

		return nil, errBackendClosed
	}

	want := req.requestID()
	for r := range replies {
		if r.responseTo() != want {
			f.log.Debug("dropping unexpected reply from the backend",
				zap.Int32("response_to", r.responseTo()), zap.Int32("want", want))
			continue
		}

		if !r.moreToCome() {
			return r, nil
		}

		// An exhaust reply: more replies follow without a request, each
		// answering the one before. Pass this one on now.
		if _, err := pc.client.Write(r); err != nil {
			return nil, fmt.Errorf("write to client: %w", err)
		}
		want = r.requestID()
	}

	return nil, errBackendClosed
}

// isClosed reports whether err just says that a connection ended.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE)
}
