package devdb

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap/zaptest"
)

// headerOnly is the 16-byte header of an OP_MSG announcing the largest
// message devdb accepts, and nothing after it.
func headerOnly(requestID int32) []byte {
	var hdr [headerLen]byte
	binary.LittleEndian.PutUint32(hdr[0:], MaxMessageSize)
	binary.LittleEndian.PutUint32(hdr[4:], uint32(requestID))
	binary.LittleEndian.PutUint32(hdr[12:], opMsg)

	return hdr[:]
}

// TestMaxConnsRefusesWithCleanClose: past MaxConns a connection is closed at
// once, without a reply, and the ones already served go on being served.
func TestMaxConnsRefusesWithCleanClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	s, err := Start(ctx, Config{Addr: "127.0.0.1:0", Dir: t.TempDir(), Logger: zaptest.NewLogger(t), MaxConns: 3})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })

	ping := func(id int32) message {
		return buildOpMsg(t, id, 0, bson.D{{Key: "ping", Value: 1}, {Key: "$db", Value: "admin"}})
	}

	var held []net.Conn
	for i := range 3 {
		c, err := net.Dial("tcp", s.Addr())
		require.NoError(t, err)
		defer c.Close()
		roundTripRaw(t, c, bufio.NewReader(c), ping(int32(i+1)))
		held = append(held, c)
	}

	extra, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer extra.Close()
	require.NoError(t, extra.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = extra.Read(make([]byte, 1))
	require.True(t, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET),
		"the fourth connection is closed, got %v", err)

	for i, c := range held {
		roundTripRaw(t, c, bufio.NewReader(c), ping(int32(10+i)))
	}

	// A place frees up when a connection closes.
	require.NoError(t, held[0].Close())
	require.Eventually(t, func() bool { return s.front.active.Load() == 2 }, 10*time.Second, 5*time.Millisecond)
	c, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer c.Close()
	roundTripRaw(t, c, bufio.NewReader(c), ping(20))
}

// TestInFlightBudget: a request whose buffer would take the in-flight bytes
// past MaxInFlightBytes closes its connection; small requests of others are
// still served, and a connection's bytes return to the budget when it goes.
func TestInFlightBudget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	s, err := Start(ctx, Config{
		Addr: "127.0.0.1:0", Dir: t.TempDir(), Logger: zaptest.NewLogger(t),
		MaxInFlightBytes: MaxMessageSize,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })

	// sendPart sends the header of a largest message and n bytes of its
	// body, never the rest.
	sendPart := func(n int) (net.Conn, error) {
		c, err := net.Dial("tcp", s.Addr())
		require.NoError(t, err)
		_, err = c.Write(headerOnly(1))
		require.NoError(t, err)
		_, err = c.Write(make([]byte, n))
		return c, err
	}

	a, err := sendPart(30 << 20)
	require.NoError(t, err)
	defer a.Close()
	// Once the buffer holds all that was sent it grows no more.
	require.Eventually(t, func() bool { return s.front.inFlight.Load() >= headerLen+30<<20-freePerConn },
		30*time.Second, 5*time.Millisecond, "the first connection's 30 MiB are held")
	held := s.front.inFlight.Load()
	require.LessOrEqual(t, held, int64(MaxMessageSize), "the buffer never outgrows the message")

	// The second is closed, while it writes (a reset) or after.
	b, err := sendPart(30 << 20)
	defer b.Close()
	if err == nil {
		require.NoError(t, b.SetReadDeadline(time.Now().Add(30*time.Second)))
		_, err = io.Copy(io.Discard, b)
	}
	require.True(t, err == nil || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE),
		"the second connection is closed, got %v", err)
	require.Equal(t, held, s.front.inFlight.Load(), "the refused connection holds nothing")

	// Others are served.
	require.NoError(t, connect(t, s.URI()).Ping(context.Background(), nil))

	require.NoError(t, a.Close())
	require.Eventually(t, func() bool { return s.front.inFlight.Load() == 0 },
		10*time.Second, 5*time.Millisecond, "the first connection's bytes return to the budget")
}

// TestMessageTimeout: a client that starts a message and does not finish it
// within MessageTimeout is closed; an idle client is not.
func TestMessageTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	s, err := Start(ctx, Config{
		Addr: "127.0.0.1:0", Dir: t.TempDir(), Logger: zaptest.NewLogger(t),
		MessageTimeout: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })

	idle, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer idle.Close()

	slow, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer slow.Close()
	_, err = slow.Write(headerOnly(1))
	require.NoError(t, err)

	require.NoError(t, slow.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = slow.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the slow sender is closed")

	// The idle connection outlived the slow one's timeout and still works.
	roundTripRaw(t, idle, bufio.NewReader(idle),
		buildOpMsg(t, 2, 0, bson.D{{Key: "ping", Value: 1}, {Key: "$db", Value: "admin"}}))
}

// TestPartialHeaderDoesNotTakeTheLock: a client that has sent part of a
// header holds nothing; others are served.
func TestPartialHeaderDoesNotTakeTheLock(t *testing.T) {
	s := startServer(t)

	partial, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer partial.Close()
	_, err = partial.Write([]byte{0x40, 0, 0})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, connect(t, s.URI()).Ping(ctx, nil))
}

// TestTailerDoesNotFreezeOthers is issue 15's second case: a getMore on a
// tailable awaitData cursor waits for new documents up to its maxTimeMS (here
// 60 s). It used to hold the one-command-at-a-time lock all that time, so
// another client's ping waited for it. Now getMore runs outside the lock;
// pings, inserts and finds of another client are answered at once, and the
// tailer still receives the document inserted meanwhile.
func TestTailerDoesNotFreezeOthers(t *testing.T) {
	t.Parallel()

	const maxLatency = 2 * time.Second

	s := startServer(t)
	ctx := context.Background()

	other := connect(t, s.URI())
	db := other.Database("tail")
	require.NoError(t, db.CreateCollection(ctx, "capped",
		options.CreateCollection().SetCapped(true).SetSizeInBytes(1<<20)))
	_, err := db.Collection("capped").InsertOne(ctx, bson.D{{Key: "n", Value: 0}})
	require.NoError(t, err)

	// The getMore is in the server when the hook sees it forwarded.
	getMoreForwarded := make(chan struct{}, 1)
	hook := func(cmd string) {
		if cmd == "getMore" {
			select {
			case getMoreForwarded <- struct{}{}:
			default:
			}
		}
	}
	s.front.testHookForward.Store(&hook)

	// FerretDB closes a tailable cursor whose first batch is not full, so
	// batches of one document.
	tailer := connect(t, s.URI())
	cur, err := tailer.Database("tail").Collection("capped").Find(ctx, bson.D{},
		options.Find().SetCursorType(options.TailableAwait).SetMaxAwaitTime(time.Minute).SetBatchSize(1))
	require.NoError(t, err)
	require.True(t, cur.Next(ctx), "the first document")

	type next struct {
		doc bson.Raw
		err error
	}
	got := make(chan next, 1)
	tailCtx, stopTail := context.WithCancel(ctx)
	tailDone := make(chan struct{})
	go func() {
		defer close(tailDone)
		// Waits in a getMore for a document to come.
		if cur.Next(tailCtx) {
			got <- next{doc: cur.Current}
			return
		}
		got <- next{err: fmt.Errorf("cursor ended: %w", cur.Err())}
	}()
	defer func() {
		stopTail()
		<-tailDone
		_ = cur.Close(ctx)
	}()

	select {
	case <-getMoreForwarded:
	case <-time.After(30 * time.Second):
		t.Fatal("the tailer's getMore never reached the server")
	}

	for i := 1; i <= 3; i++ {
		opCtx, cancel := context.WithTimeout(ctx, maxLatency)
		start := time.Now()
		require.NoError(t, other.Ping(opCtx, nil), "ping %d while the tailer waits", i)
		_, err := db.Collection("other").InsertOne(opCtx, bson.D{{Key: "_id", Value: i}})
		require.NoError(t, err, "insert %d", i)
		require.NoError(t, db.Collection("other").FindOne(opCtx, bson.D{{Key: "_id", Value: i}}).Err(), "find %d", i)
		cancel()
		t.Logf("ping, insert and find %d while the tailer waits: %v", i, time.Since(start))
	}

	// The tailer receives what is inserted while it waits.
	opCtx, cancel := context.WithTimeout(ctx, maxLatency)
	_, err = db.Collection("capped").InsertOne(opCtx, bson.D{{Key: "n", Value: 1}})
	cancel()
	require.NoError(t, err)

	select {
	case n := <-got:
		require.NoError(t, n.err)
		require.EqualValues(t, 1, n.doc.Lookup("n").Int32())
	case <-time.After(30 * time.Second):
		t.Fatal("the tailer did not receive the new document")
	}
}

// rawInsert builds an insert of {_id: id} into db.c, with maxTimeMS when it
// is not 0.
func rawInsert(t *testing.T, requestID int32, db, id string, maxTimeMS int64) message {
	cmd := bson.D{
		{Key: "insert", Value: "c"},
		{Key: "documents", Value: bson.A{bson.D{{Key: "_id", Value: id}}}},
	}
	if maxTimeMS != 0 {
		cmd = append(cmd, bson.E{Key: "maxTimeMS", Value: maxTimeMS})
	}
	cmd = append(cmd, bson.E{Key: "$db", Value: db})

	return buildOpMsg(t, requestID, 0, cmd)
}

// holdLock takes the front's lock for the test, released when it ends unless
// the returned function released it before.
func holdLock(t *testing.T, s *Server) (release func()) {
	t.Helper()

	s.front.lock()
	var once sync.Once
	release = func() { once.Do(s.front.unlock) }
	t.Cleanup(release)

	return release
}

// countIDs counts the documents of db.c with the given _id.
func countIDs(t *testing.T, s *Server, db, id string) int64 {
	t.Helper()

	n, err := connect(t, s.URI()).Database(db).Collection("c").
		CountDocuments(context.Background(), bson.D{{Key: "_id", Value: id}})
	require.NoError(t, err)

	return n
}

// TestQueuedRequestOfGoneClientIsDropped is issue 15's third case: a request
// waiting for the lock whose client closes the connection is dropped, never
// run.
func TestQueuedRequestOfGoneClientIsDropped(t *testing.T) {
	s := startServer(t)
	release := holdLock(t, s)

	conn, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write(rawInsert(t, 1, "gone", "ghost", 0))
	require.NoError(t, err)

	require.Eventually(t, func() bool { return s.front.queued.Load() == 1 },
		10*time.Second, time.Millisecond, "the insert waits for the lock")

	// The client gives up.
	require.NoError(t, conn.Close())
	dropped := assert.Eventually(t, func() bool { return s.front.dropped.Load() == 1 },
		10*time.Second, time.Millisecond, "the front drops the request of the client that left")

	// Whether or not it was dropped, release the lock and look: a request
	// still queued takes the lock before the count does.
	release()
	require.Zero(t, countIDs(t, s, "gone", "ghost"), "the insert of the client that left never ran")
	require.True(t, dropped)
	require.Zero(t, s.front.queued.Load())
}

// TestQueuedRequestPastMaxTimeMS: a request whose maxTimeMS passes while it
// waits for the lock is answered MaxTimeMSExpired (code 50) at once, while
// the lock is still held, and never runs. The connection goes on serving.
func TestQueuedRequestPastMaxTimeMS(t *testing.T) {
	s := startServer(t)
	release := holdLock(t, s)

	conn, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer conn.Close()
	r := bufio.NewReader(conn)

	start := time.Now()
	reply := roundTripRaw(t, conn, r, rawInsert(t, 1, "late", "late", 200))
	waited := time.Since(start)

	doc := reply[headerLen+5:]
	var res struct {
		OK       float64 `bson:"ok"`
		Code     int32   `bson:"code"`
		CodeName string  `bson:"codeName"`
	}
	require.NoError(t, bson.Unmarshal(doc, &res))
	require.Zero(t, res.OK)
	require.Equal(t, int32(50), res.Code)
	require.Equal(t, "MaxTimeMSExpired", res.CodeName)
	require.GreaterOrEqual(t, waited, 200*time.Millisecond)
	require.EqualValues(t, 1, s.front.expired.Load())

	release()
	require.Zero(t, countIDs(t, s, "late", "late"), "the expired insert never ran")

	// The same connection serves its next request.
	roundTripRaw(t, conn, r, rawInsert(t, 2, "late", "ontime", 0))
	require.EqualValues(t, 1, countIDs(t, s, "late", "ontime"))

	// A driver sees error 50 as mongo.CommandError MaxTimeMSExpired.
	release = holdLock(t, s)
	client := connect(t, s.URI(), options.Client().SetTimeout(0))
	err = client.Database("late").RunCommand(context.Background(), bson.D{
		{Key: "insert", Value: "c"},
		{Key: "documents", Value: bson.A{bson.D{{Key: "_id", Value: "driver"}}}},
		{Key: "maxTimeMS", Value: 100},
	}).Err()
	var cmdErr mongo.CommandError
	require.ErrorAs(t, err, &cmdErr)
	require.Equal(t, int32(50), cmdErr.Code)
	release()
	require.Zero(t, countIDs(t, s, "late", "driver"))
}

// TestReadMessageGrowsAsBytesArrive: readMessage allocates for the bytes
// that have arrived, not for the length the header announces.
func TestReadMessageGrowsAsBytesArrive(t *testing.T) {
	errStalled := errors.New("no more bytes for now")

	read := func(body int) (grown []int, err error) {
		data := append(headerOnly(1), make([]byte, body)...)
		r := bufio.NewReaderSize(io.MultiReader(strings.NewReader(string(data)), iotestErrReader{errStalled}), clientBufSize)
		_, err = readMessage(r, nil, func(newCap int) error {
			grown = append(grown, newCap)
			return nil
		})
		return grown, err
	}

	// A header alone: nothing allocated beyond it.
	grown, err := read(0)
	require.ErrorIs(t, err, errStalled)
	require.Empty(t, grown)

	// 10 bytes of body: one small chunk.
	grown, err = read(10)
	require.ErrorIs(t, err, errStalled)
	require.Equal(t, []int{minChunk}, grown)

	// 1 MiB of body: the buffer at most doubles past what has arrived.
	grown, err = read(1 << 20)
	require.ErrorIs(t, err, errStalled)
	require.LessOrEqual(t, grown[len(grown)-1], 2*(headerLen+1<<20))

	// A whole message is read whole, whatever its size.
	msg := buildOpMsg(t, 7, 0, bson.D{{Key: "insert", Value: "c"}, {Key: "blob", Value: strings.Repeat("x", 100_000)}})
	got, err := readMessage(bufio.NewReaderSize(strings.NewReader(string(msg)), clientBufSize), nil, nil)
	require.NoError(t, err)
	require.Equal(t, msg, got)
}

// iotestErrReader returns err from every Read.
type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }
