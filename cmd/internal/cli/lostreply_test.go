package cli

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// lostReplyProxy forwards MongoDB wire messages to a server and, for the
// insert command number dropAt (counting from 1), forwards the request,
// lets the server apply it, and then closes the client's connection
// instead of passing the reply on: the reply is lost after the write was
// applied. With downAfter set it then refuses every connection until
// heal, so that nothing can be looked up either.
type lostReplyProxy struct {
	ln        net.Listener
	target    string
	dropAt    int64
	downAfter bool

	inserts atomic.Int64
	down    atomic.Bool
	dropped chan struct{} // closed once the reply was dropped

	mu    sync.Mutex
	conns []net.Conn
}

func newLostReplyProxy(t *testing.T, target string, dropAt int64, downAfter bool) *lostReplyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &lostReplyProxy{ln: ln, target: target, dropAt: dropAt, downAfter: downAfter, dropped: make(chan struct{})}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *lostReplyProxy) uri() string {
	return "mongodb://" + p.ln.Addr().String() + "/?directConnection=true"
}

func (p *lostReplyProxy) heal() { p.down.Store(false) }

func (p *lostReplyProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		var drop sync.Map // request ids whose reply is dropped
		go p.requests(c, s, &drop)
		go p.replies(s, c, &drop)
	}
}

// readMessage reads one wire message: its header and body.
func readMessage(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n < 16 || n > 64<<20 {
		return nil, io.ErrUnexpectedEOF
	}
	msg := make([]byte, n)
	copy(msg, hdr[:])
	_, err := io.ReadFull(r, msg[4:])
	return msg, err
}

// commandName is the first key of an OP_MSG's body, or "".
func commandName(msg []byte) string {
	if len(msg) < 21 || binary.LittleEndian.Uint32(msg[12:]) != 2013 || msg[20] != 0 {
		return ""
	}
	elems, err := bson.Raw(msg[21:]).Elements()
	if err != nil || len(elems) == 0 {
		// the body is followed by other sections: read just the first document
		n := binary.LittleEndian.Uint32(msg[21:])
		if int(n) > len(msg)-21 {
			return ""
		}
		elems, err = bson.Raw(msg[21 : 21+n]).Elements()
		if err != nil || len(elems) == 0 {
			return ""
		}
	}
	return elems[0].Key()
}

func (p *lostReplyProxy) requests(from, to net.Conn, drop *sync.Map) {
	defer to.Close()
	for {
		msg, err := readMessage(from)
		if err != nil {
			return
		}
		if commandName(msg) == "insert" && p.inserts.Add(1) == p.dropAt {
			drop.Store(binary.LittleEndian.Uint32(msg[4:]), true)
		}
		if _, err := to.Write(msg); err != nil {
			return
		}
	}
}

func (p *lostReplyProxy) replies(from, to net.Conn, drop *sync.Map) {
	defer to.Close()
	for {
		msg, err := readMessage(from)
		if err != nil {
			return
		}
		if _, ok := drop.Load(binary.LittleEndian.Uint32(msg[8:])); ok {
			// The server applied the insert: its reply is lost.
			if p.downAfter {
				p.down.Store(true)
				p.mu.Lock()
				for _, c := range p.conns {
					_ = c.Close()
				}
				p.mu.Unlock()
			}
			_ = from.Close()
			close(p.dropped)
			return
		}
		if _, err := to.Write(msg); err != nil {
			return
		}
	}
}
