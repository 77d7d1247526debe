package worker_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// lossyDialer dials the test server for real and loses the reply of the
// first command that drop matches: the command reaches the server, which
// applies it and replies; the connection reads that reply whole, throws it
// away and breaks, as a network that fails at that moment does. Nothing
// about the database is simulated.
type lossyDialer struct {
	d    net.Dialer
	drop func(cmd string, msg []byte) bool
	// hold, when set, makes the lost reply a late one: the connection holds
	// it until the driver's read deadline passes, then times out.
	hold    bool
	dropped atomic.Int32
	once    sync.Once
}

func (l *lossyDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := l.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &lossyConn{Conn: c, l: l}, nil
}

// lossyConn is one connection of a lossyDialer. The driver uses a
// connection from one goroutine at a time: a request, then its reply.
type lossyConn struct {
	net.Conn
	l        *lossyDialer
	out      []byte // the part of the next request written so far
	loseNext bool
	deadline time.Time // the driver's read deadline
}

func (c *lossyConn) SetDeadline(t time.Time) error {
	c.deadline = t
	return c.Conn.SetDeadline(t)
}

func (c *lossyConn) SetReadDeadline(t time.Time) error {
	c.deadline = t
	return c.Conn.SetReadDeadline(t)
}

var errReplyLost = errors.New("lossy: the reply was lost")

func (c *lossyConn) Write(p []byte) (int, error) {
	c.out = append(c.out, p...)
	for len(c.out) >= 4 {
		n := int(binary.LittleEndian.Uint32(c.out))
		if len(c.out) < n {
			break
		}
		if cmd := opMsgCommand(c.out[:n]); cmd != "" && c.l.drop(cmd, c.out[:n]) {
			c.l.once.Do(func() { c.loseNext = true })
		}
		c.out = c.out[n:]
	}
	return c.Conn.Write(p)
}

func (c *lossyConn) Read(p []byte) (int, error) {
	if !c.loseNext {
		return c.Conn.Read(p)
	}
	// Wait for the whole reply: the server has applied the command.
	var hdr [4]byte
	if _, err := io.ReadFull(c.Conn, hdr[:]); err != nil {
		return 0, err
	}
	if _, err := io.CopyN(io.Discard, c.Conn, int64(binary.LittleEndian.Uint32(hdr[:]))-4); err != nil {
		return 0, err
	}
	c.l.dropped.Add(1)
	_ = c.Conn.Close()
	if c.l.hold && !c.deadline.IsZero() {
		time.Sleep(time.Until(c.deadline)) // the reply is late: past the deadline
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	}
	return 0, errReplyLost
}

// opMsgCommand is the command name (the first key of the body) of msg, an
// OP_MSG, or "" for any other message.
func opMsgCommand(msg []byte) string {
	const opMsg = 2013
	if len(msg) < 21 || binary.LittleEndian.Uint32(msg[12:]) != opMsg || msg[20] != 0 {
		return ""
	}
	body := bson.Raw(msg[21:])
	if len(body) < 4 {
		return ""
	}
	body = body[:binary.LittleEndian.Uint32(body)]
	e, err := body.IndexErr(0)
	if err != nil {
		return ""
	}
	return e.Key()
}

// has reports whether msg holds the BSON string element key: value.
func has(msg []byte, key, value string) bool {
	var b []byte
	b = append(b, 0x02)
	b = append(b, key...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(value)+1))
	b = append(b, value...)
	b = append(b, 0)
	return bytes.Contains(msg, b)
}

// isClaim matches a single claim's findAndModify (a heartbeat's fence is on
// state running).
func isClaim(cmd string, msg []byte) bool {
	return cmd == "findAndModify" && has(msg, "state", "available")
}

// isBatchStamp matches a batch claim's stamp.
func isBatchStamp(cmd string, msg []byte) bool {
	return cmd == "update" && has(msg, "state", "available") && has(msg, "state", "running")
}

// isCompletion matches the write that marks a job succeeded.
func isCompletion(cmd string, msg []byte) bool {
	return cmd == "update" && has(msg, "state", "succeeded")
}

// lossyQueue returns a queue client on b's database through a connection
// that loses the reply of the first command drop matches, and the dialer
// (its dropped counts the replies lost).
func (b *bundle) lossyQueue(t *testing.T, drop func(cmd string, msg []byte) bool) (*queue.Client, *lossyDialer) {
	t.Helper()
	return b.lossyQueueWith(t, &lossyDialer{drop: drop})
}

// lossyQueueWith is lossyQueue with the dialer d.
func (b *bundle) lossyQueueWith(t *testing.T, d *lossyDialer) (*queue.Client, *lossyDialer) {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetDialer(d).SetAppName("docket-lossy"))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Disconnect(ctx)
	})
	q, err := queue.New(client.Database(store.Of(b.q).Collection().Database().Name()),
		queue.Config{RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	require.NoError(t, err)
	return q, d
}
