package devdb

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// backendDialTimeout bounds how long the front waits to open the backend
// connection for a new client connection.
const backendDialTimeout = 10 * time.Second

// unlockedCommands are the commands the front forwards without taking the
// global lock. They only describe the server, never read or write data, and an
// awaitable hello (one with maxAwaitTimeMS) may legitimately block on the
// server for many seconds: holding the lock for it would stall every client.
var unlockedCommands = map[string]bool{
	"hello":    true,
	"isMaster": true,
	"ismaster": true,
}

// errBackendClosed reports that the backend connection ended while the front
// was waiting for a reply.
var errBackendClosed = errors.New("backend connection closed")

// front accepts client connections and forwards each one's messages to a
// backend connection of its own, running one command at a time across all
// connections.
type front struct {
	ln          net.Listener
	backendAddr string
	log         *zap.Logger

	// cmdMu is held from the moment a request is sent to the backend until
	// its reply has been read back, so commands run one at a time.
	cmdMu sync.Mutex

	// pingID numbers the pings the front itself sends; they count down from
	// -1 so they never collide with a driver's (positive) request ids.
	pingID atomic.Int32

	connsMu sync.Mutex
	conns   map[*proxyConn]struct{}
	closing bool

	// opened counts client connections accepted, for tests.
	opened atomic.Int64

	acceptDone chan struct{}
	wg         sync.WaitGroup
	closeOnce  sync.Once
}

// newFront starts serving ln, forwarding to backendAddr.
func newFront(ln net.Listener, backendAddr string, log *zap.Logger) *front {
	f := &front{
		ln:          ln,
		backendAddr: backendAddr,
		log:         log,
		conns:       make(map[*proxyConn]struct{}),
		acceptDone:  make(chan struct{}),
	}

	go f.acceptLoop()

	return f
}

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
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.serve(c)
		}()
	}
}

// proxyConn is one client connection and the backend connection dedicated
// to it.
type proxyConn struct {
	client  net.Conn
	backend net.Conn
	once    sync.Once
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

	backend, err := net.DialTimeout("tcp", f.backendAddr, backendDialTimeout)
	if err != nil {
		log.Error("cannot connect to the backend; closing client connection", zap.Error(err))
		return
	}

	// Install the backend under the lock that close uses, so a concurrent
	// close cannot miss it.
	f.connsMu.Lock()
	pc.backend = backend
	closing := f.closing
	f.connsMu.Unlock()
	if closing {
		_ = backend.Close()
		return
	}

	log.Debug("connection opened")
	defer log.Debug("connection closed")

	// The backend reader turns the backend's byte stream into messages. When
	// the backend goes away it closes the client connection too, so an idle
	// client learns of it at once.
	replies := make(chan message)
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer close(replies)
		defer pc.close()

		br := bufio.NewReaderSize(backend, 64<<10)
		for {
			m, err := readMessage(br, nil)
			if err != nil {
				if !isClosed(err) {
					log.Warn("reading from the backend failed; closing connection", zap.Error(err))
				}
				return
			}

			select {
			case replies <- m:
			case <-stop:
				return
			}
		}
	}()
	defer func() {
		close(stop)
		pc.close()
		<-readerDone
	}()

	cr := bufio.NewReaderSize(client, 64<<10)
	var buf []byte

	for {
		req, err := readMessage(cr, buf)
		if err != nil {
			var lenErr *errFrameLength
			switch {
			case errors.As(err, &lenErr):
				log.Warn("bad message length from client; closing connection",
					zap.Int32("length", lenErr.length),
					zap.Int("max", MaxMessageSize))
			case !isClosed(err):
				log.Warn("reading from the client failed; closing connection", zap.Error(err))
			}
			return
		}

		// Keep a modest buffer for the next request; let a huge one go.
		if cap(req) <= 1<<20 {
			buf = req
		} else {
			buf = nil
		}

		last, err := f.roundTrip(pc, req, replies)
		if err != nil {
			if !isClosed(err) && !errors.Is(err, errBackendClosed) {
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

// roundTrip sends req to the backend and waits for the reply to it, holding
// the global lock unless req is an unlocked command. It returns the final
// reply for the caller to write to the client once the lock is released, or
// nil when the client expects no reply.
//
// The lock is released as soon as the reply has been read from the backend:
// by then the command has finished, so the client's own reading speed never
// holds up other clients.
func (f *front) roundTrip(pc *proxyConn, req message, replies <-chan message) (message, error) {
	if !unlockedCommands[req.commandName()] {
		f.cmdMu.Lock()
		defer f.cmdMu.Unlock()
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
