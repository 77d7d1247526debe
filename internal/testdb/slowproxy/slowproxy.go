// Package slowproxy is a TCP proxy for tests that makes a MongoDB-protocol
// server slow: it holds every reply for a delay before passing it on, and,
// when serial, lets one command through at a time, in the order they came,
// so that a command waits behind every command sent before it, as on a
// server busy with scans (devdb's front runs one command at a time too).
//
// It reads the wire protocol only to frame messages (a message's first four
// bytes are its length, little-endian) and to find the OP_MSG moreToCome
// flag (a request with it gets no reply, so its turn ends once it is passed
// on). Every byte is passed on unchanged.
//
//	p := slowproxy.Start(t, "127.0.0.1:27017", slowproxy.Config{Serial: true})
//	p.SetDelay(2 * time.Second)
//	client, _ := mongo.Connect(options.Client().ApplyURI("mongodb://" + p.Addr()))
package slowproxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// maxMessage bounds the length a message may claim (MongoDB's own limit is
// 48 MB): a larger one is a broken stream, and the connection is closed.
const maxMessage = 64 << 20

const (
	opMsg      = 2013
	moreToCome = 1 << 1
)

// Config configures a Proxy.
type Config struct {
	// Delay is how long every reply is held before it is passed on.
	// Defaults to none; SetDelay changes it while the proxy runs.
	Delay time.Duration
	// Serial lets one command through at a time, first come first
	// served: a command is passed on only once the reply to the one
	// before it (delay included) has been passed back.
	Serial bool
}

// Proxy passes connections on to a server, slowly.
type Proxy struct {
	target string
	serial bool
	ln     net.Listener
	turn   fifo

	mu    sync.Mutex
	delay time.Duration
	conns map[net.Conn]struct{}
	done  bool
	wg    sync.WaitGroup
}

// New listens on a free local port and passes every connection made to it
// on to target (host:port). Close it when done.
func New(target string, cfg Config) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("slowproxy: listen: %w", err)
	}
	p := &Proxy{target: target, serial: cfg.Serial, ln: ln, delay: cfg.Delay, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Start is New for a test: it fails the test if the proxy cannot listen,
// and closes the proxy when the test ends.
func Start(t testing.TB, target string, cfg Config) *Proxy {
	t.Helper()
	p, err := New(target, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay sets how long each reply from now on is held.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *Proxy) currentDelay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return
	}
	p.done = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track records c as open, or closes it and reports false when the proxy
// is closing.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(client) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(client)
			server, err := net.Dial("tcp", p.target)
			if err != nil {
				return
			}
			if !p.track(server) {
				return
			}
			defer p.untrack(server)
			p.relay(client, server)
		}()
	}
}

// reply is one message from the server, with the time it came.
type reply struct {
	msg  []byte
	came time.Time
}

// relay passes requests from client to server and replies back, each
// reply held for the delay, until either side closes.
func (p *Proxy) relay(client, server net.Conn) {
	// Closing both ends stops the other direction too.
	stop := func() { _ = client.Close(); _ = server.Close() }
	// turns holds a value while this connection holds the serial turn;
	// the side that passes the last reply of a command gives it back.
	turns := make(chan struct{}, 1)
	replies := make(chan reply, 16)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // requests
		defer wg.Done()
		defer stop()
		for {
			msg, err := readMessage(client)
			if err != nil {
				return
			}
			switch {
			case !p.serial:
				_, err = server.Write(msg)
			case hasMoreToCome(msg):
				// No reply: the turn ends once the request is passed on.
				p.turn.lock()
				_, err = server.Write(msg)
				p.turn.unlock()
			default:
				// The reply side gives the turn back after the reply (or
				// the cleanup below, when none comes).
				p.turn.lock()
				turns <- struct{}{}
				_, err = server.Write(msg)
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { // replies as they come
		defer wg.Done()
		defer close(replies)
		defer stop()
		for {
			msg, err := readMessage(server)
			if err != nil {
				return
			}
			replies <- reply{msg: msg, came: time.Now()}
		}
	}()
	go func() { // replies, each after its delay
		defer wg.Done()
		defer stop()
		broken := false
		for r := range replies {
			if broken {
				continue // drain, so the reader ends
			}
			time.Sleep(time.Until(r.came.Add(p.currentDelay())))
			_, err := client.Write(r.msg)
			if p.serial {
				// The command's reply: its turn ends. (Replies streamed
				// after it, with moreToCome, hold no turn: they answer no
				// request of their own.)
				select {
				case <-turns:
					p.turn.unlock()
				default:
				}
			}
			if err != nil {
				broken = true
				stop()
			}
		}
	}()
	wg.Wait()
	// A command whose reply never came (the connection broke) gives its
	// turn back.
	select {
	case <-turns:
		p.turn.unlock()
	default:
	}
}

// readMessage reads one wire-protocol message.
func readMessage(r io.Reader) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(head[:])
	if n < 16 || n > maxMessage {
		return nil, errors.New("slowproxy: a message of impossible length")
	}
	msg := make([]byte, n)
	copy(msg, head[:])
	if _, err := io.ReadFull(r, msg[4:]); err != nil {
		return nil, err
	}
	return msg, nil
}

// hasMoreToCome reports whether msg is an OP_MSG with the moreToCome flag:
// a request that wants no reply, or a reply that more replies follow.
func hasMoreToCome(msg []byte) bool {
	if len(msg) < 20 || binary.LittleEndian.Uint32(msg[12:16]) != opMsg {
		return false
	}
	return binary.LittleEndian.Uint32(msg[16:20])&moreToCome != 0
}

// fifo is a lock granted in the order it was asked for.
type fifo struct {
	mu      sync.Mutex
	busy    bool
	waiting []chan struct{}
}

func (f *fifo) lock() {
	f.mu.Lock()
	if !f.busy {
		f.busy = true
		f.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	f.waiting = append(f.waiting, ch)
	f.mu.Unlock()
	<-ch
}

func (f *fifo) unlock() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.waiting) == 0 {
		f.busy = false
		return
	}
	next := f.waiting[0]
	f.waiting = f.waiting[1:]
	close(next) // the turn passes on; busy stays true
}
