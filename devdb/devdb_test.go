package devdb

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.uber.org/zap/zaptest"
)

// startServer starts a server on a free port with a fresh data directory and
// closes it when the test ends.
func startServer(t *testing.T) *Server {
	t.Helper()

	return startServerIn(t, t.TempDir(), "127.0.0.1:0")
}

func startServerIn(t *testing.T, dir, addr string) *Server {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	s, err := Start(ctx, Config{Addr: addr, Dir: dir, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })

	return s
}

// connect returns a driver client for uri, disconnected when the test ends.
func connect(t *testing.T, uri string, opts ...*options.ClientOptions) *mongo.Client {
	t.Helper()

	opts = append([]*options.ClientOptions{options.Client().ApplyURI(uri)}, opts...)
	c, err := mongo.Connect(opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
	})

	return c
}

// TestFindOneAndUpdateIsAtomic is the test that FerretDB v1 alone fails (497
// of 500 documents double-claimed): concurrent claims through the front must
// each take a different document.
//
// Under -race FerretDB and its SQLite (transpiled from C) run instrumented,
// about ten times slower, so this test and the other slow ones run in
// parallel.
func TestFindOneAndUpdateIsAtomic(t *testing.T) {
	t.Parallel()

	const (
		docs    = 500
		workers = 8
	)

	s := startServer(t)
	client := connect(t, s.URI())
	coll := client.Database("atomic").Collection("jobs")
	ctx := context.Background()

	batch := make([]any, docs)
	for i := range batch {
		batch[i] = bson.D{{Key: "n", Value: i}, {Key: "state", Value: "queued"}}
	}
	_, err := coll.InsertMany(ctx, batch)
	require.NoError(t, err)

	type claim struct {
		ID    bson.ObjectID `bson:"_id"`
		State string        `bson:"state"`
		Owner int           `bson:"owner"`
	}

	var (
		mu      sync.Mutex
		claimed = make(map[bson.ObjectID][]int) // _id -> owners that got it
	)

	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			opts := options.FindOneAndUpdate().
				SetSort(bson.D{{Key: "n", Value: 1}}).
				SetReturnDocument(options.After)
			for {
				var c claim
				err := coll.FindOneAndUpdate(ctx,
					bson.D{{Key: "state", Value: "queued"}},
					bson.D{{Key: "$set", Value: bson.D{
						{Key: "state", Value: "running"},
						{Key: "owner", Value: w},
					}}},
					opts,
				).Decode(&c)
				if errors.Is(err, mongo.ErrNoDocuments) {
					errs <- nil
					return
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d: %w", w, err)
					return
				}
				if c.State != "running" || c.Owner != w {
					errs <- fmt.Errorf("worker %d got back %+v", w, c)
					return
				}

				mu.Lock()
				claimed[c.ID] = append(claimed[c.ID], w)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	var doubles int
	for id, owners := range claimed {
		if len(owners) != 1 {
			doubles++
			t.Errorf("document %s claimed by %v", id.Hex(), owners)
		}
	}
	require.Zero(t, doubles, "documents claimed more than once")
	require.Len(t, claimed, docs, "every document claimed")

	// The database agrees: every document is running, owned by the one
	// worker that saw it.
	cur, err := coll.Find(ctx, bson.D{})
	require.NoError(t, err)
	var stored []claim
	require.NoError(t, cur.All(ctx, &stored))
	require.Len(t, stored, docs)
	for _, c := range stored {
		require.Equal(t, "running", c.State)
		require.Equal(t, []int{c.Owner}, claimed[c.ID])
	}
}

func TestRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()

	ctxStart, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	s, err := Start(ctxStart, Config{Addr: "127.0.0.1:0", Dir: dir, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)

	c, err := mongo.Connect(options.Client().ApplyURI(s.URI()))
	require.NoError(t, err)
	coll := c.Database("keep").Collection("things")
	_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "v", Value: 1}})
	require.NoError(t, err)
	_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "v", Value: 1}},
		Options: options.Index().SetUnique(true),
	})
	require.NoError(t, err)
	require.NoError(t, c.Disconnect(ctx))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close twice")

	s2 := startServerIn(t, dir, "127.0.0.1:0")
	coll2 := connect(t, s2.URI()).Database("keep").Collection("things")

	var got struct {
		V int `bson:"v"`
	}
	require.NoError(t, coll2.FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&got))
	require.Equal(t, 1, got.V)

	// The unique index came back too.
	_, err = coll2.InsertOne(ctx, bson.D{{Key: "_id", Value: "b"}, {Key: "v", Value: 1}})
	require.True(t, mongo.IsDuplicateKeyError(err), "want a duplicate key error, got %v", err)
}

func TestLargeMessages(t *testing.T) {
	t.Parallel()

	s := startServer(t)
	coll := connect(t, s.URI()).Database("large").Collection("blobs")
	ctx := context.Background()

	// One 2 MB document.
	big := strings.Repeat("x", 2<<20)
	_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "big"}, {Key: "data", Value: big}})
	require.NoError(t, err)

	var got struct {
		Data string `bson:"data"`
	}
	require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: "big"}}).Decode(&got))
	require.Equal(t, big, got.Data)

	// A 20 MB insert in one message, and all of it back in one find.
	const n = 20
	blob := strings.Repeat("y", 1<<20)
	docs := make([]any, n)
	for i := range docs {
		docs[i] = bson.D{{Key: "i", Value: i}, {Key: "data", Value: blob}}
	}
	_, err = coll.InsertMany(ctx, docs)
	require.NoError(t, err)

	cur, err := coll.Find(ctx, bson.D{{Key: "i", Value: bson.D{{Key: "$exists", Value: true}}}})
	require.NoError(t, err)
	var all []struct {
		Data string `bson:"data"`
	}
	require.NoError(t, cur.All(ctx, &all))
	require.Len(t, all, n)
	for _, d := range all {
		require.Equal(t, blob, d.Data)
	}
}

func TestManyConnections(t *testing.T) {
	t.Parallel()

	const clients = 64

	s := startServer(t)
	ctx := context.Background()

	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for i := range clients {
		c := connect(t, s.URI())
		wg.Go(func() {
			coll := c.Database("many").Collection("c")
			for j := range 5 {
				if _, err := coll.InsertOne(ctx, bson.D{{Key: "client", Value: i}, {Key: "j", Value: j}}); err != nil {
					errs <- fmt.Errorf("client %d: %w", i, err)
					return
				}
			}
			n, err := coll.CountDocuments(ctx, bson.D{{Key: "client", Value: i}})
			if err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
				return
			}
			if n != 5 {
				errs <- fmt.Errorf("client %d: counted %d documents, want 5", i, n)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// Each client holds at least one connection of its own.
	require.GreaterOrEqual(t, s.front.opened.Load(), int64(clients))
}

// TestConcurrentClientsDoNotStall runs two clients side by side for longer
// than the driver's heartbeat interval (10 s), so that server monitoring runs
// while commands flow, and checks that neither ever waits long for a reply.
func TestConcurrentClientsDoNotStall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 16 s")
	}
	t.Parallel()

	const (
		runFor     = 16 * time.Second
		maxLatency = 3 * time.Second
	)

	s := startServer(t)

	var heartbeats, awaited atomic.Int64
	monitor := &event.ServerMonitor{
		ServerHeartbeatStarted: func(e *event.ServerHeartbeatStartedEvent) {
			heartbeats.Add(1)
			if e.Awaited {
				awaited.Add(1)
			}
		},
	}

	// One client with the driver's defaults, one polling as often as the
	// driver allows.
	clients := []*mongo.Client{
		connect(t, s.URI(), options.Client().SetServerMonitor(monitor)),
		connect(t, s.URI(), options.Client().SetServerMonitor(monitor).SetHeartbeatInterval(500*time.Millisecond)),
	}

	ctx, cancel := context.WithTimeout(context.Background(), runFor)
	defer cancel()

	type result struct {
		ops   int
		worst time.Duration
		err   error
	}
	results := make([]result, len(clients))

	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			coll := c.Database("stall").Collection(fmt.Sprintf("c%d", i))
			r := &results[i]
			for ctx.Err() == nil {
				start := time.Now()
				// Operations get their own deadline so that a stall shows as
				// an error, not as a hang at the end of the run.
				opCtx, opCancel := context.WithTimeout(context.Background(), 2*maxLatency)
				_, err := coll.InsertOne(opCtx, bson.D{{Key: "op", Value: r.ops}})
				if err == nil {
					err = coll.FindOne(opCtx, bson.D{{Key: "op", Value: r.ops}}).Err()
				}
				opCancel()
				if err != nil {
					r.err = fmt.Errorf("client %d, op %d: %w", i, r.ops, err)
					return
				}
				r.worst = max(r.worst, time.Since(start))
				r.ops++

				// Keep the collection small: FerretDB scans it whole.
				// With a deadline of its own, as the other operations: under
				// the run's, one cut by the run's end could fail on the
				// socket's deadline before ctx.Err() says the run is over.
				if r.ops%100 == 0 {
					opCtx, opCancel := context.WithTimeout(context.Background(), 2*maxLatency)
					_, err := coll.DeleteMany(opCtx, bson.D{})
					opCancel()
					if err != nil {
						r.err = fmt.Errorf("client %d: %w", i, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()

	t.Logf("heartbeats: %d, awaited (streaming) heartbeats: %d", heartbeats.Load(), awaited.Load())
	for i, r := range results {
		t.Logf("client %d: %d round trips, slowest %v", i, r.ops, r.worst)
		require.NoError(t, r.err)
		require.Positive(t, r.ops)
		require.Less(t, r.worst, maxLatency, "client %d stalled", i)
	}
	require.Greater(t, heartbeats.Load(), int64(len(clients)), "monitoring ran during the test")
}

// TestHelloSkipsTheLock shows that the commands the driver's monitor sends are
// answered while another command holds the lock, and that other commands wait.
func TestHelloSkipsTheLock(t *testing.T) {
	s := startServer(t)

	conn, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer conn.Close()
	r := bufio.NewReader(conn)

	s.front.lock()
	locked := true
	defer func() {
		if locked {
			s.front.unlock()
		}
	}()

	// An awaitable hello, as a streaming monitor would send it.
	hello := buildOpMsg(t, 1, 0, bson.D{
		{Key: "hello", Value: 1},
		{Key: "maxAwaitTimeMS", Value: int64(100)},
		{Key: "$db", Value: "admin"},
	})
	reply := roundTripRaw(t, conn, r, hello)
	require.Equal(t, int32(1), reply.responseTo())

	// A ping has to wait for the lock.
	_, err = conn.Write(buildOpMsg(t, 2, 0, bson.D{{Key: "ping", Value: 1}, {Key: "$db", Value: "admin"}}))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	_, err = r.Peek(1)
	var netErr net.Error
	require.ErrorAs(t, err, &netErr, "the ping must not be answered while the lock is held")
	require.True(t, netErr.Timeout())

	s.front.unlock()
	locked = false

	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	m, err := readMessage(r, nil, nil)
	require.NoError(t, err)
	require.Equal(t, int32(2), m.responseTo())
}

// TestUnacknowledgedWrites sends writes with write concern w:0, which the
// driver sends with moreToCome and no reply expected; FerretDB v1 replies
// anyway, and the front must not pass that reply on.
func TestUnacknowledgedWrites(t *testing.T) {
	s := startServer(t)
	client := connect(t, s.URI())
	ctx := context.Background()

	unacked := client.Database("w0").Collection("c",
		options.Collection().SetWriteConcern(writeconcern.Unacknowledged()))
	for i := range 20 {
		_, err := unacked.InsertOne(ctx, bson.D{{Key: "i", Value: i}})
		require.NoError(t, err)
	}

	// Once the unacknowledged writes have returned they have also run: the
	// front waits for each before serving the next command.
	n, err := client.Database("w0").Collection("c").CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Equal(t, int64(20), n)
}

func TestBadFrameLengthClosesConnection(t *testing.T) {
	s := startServer(t)

	for _, length := range []uint32{0, 15, MaxMessageSize + 1, 1 << 31} {
		t.Run(fmt.Sprint(length), func(t *testing.T) {
			conn, err := net.Dial("tcp", s.Addr())
			require.NoError(t, err)
			defer conn.Close()

			var hdr [headerLen]byte
			binary.LittleEndian.PutUint32(hdr[:], length)
			_, err = conn.Write(hdr[:])
			require.NoError(t, err)

			require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
			_, err = conn.Read(make([]byte, 1))
			require.ErrorIs(t, err, io.EOF, "the front closes the connection")
		})
	}

	// The server still serves others.
	require.NoError(t, connect(t, s.URI()).Ping(context.Background(), nil))
}

func TestConnectionsCloseTogether(t *testing.T) {
	s := startServer(t)

	// The client leaves: its backend connection is closed.
	conn, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	ping := buildOpMsg(t, 7, 0, bson.D{{Key: "ping", Value: 1}, {Key: "$db", Value: "admin"}})
	roundTripRaw(t, conn, bufio.NewReader(conn), ping)

	pc := onlyConn(t, s)
	require.NoError(t, conn.Close())
	require.Eventually(t, func() bool { return len(conns(s)) == 0 }, 10*time.Second, 10*time.Millisecond)
	_, err = pc.backend.Write(ping)
	require.ErrorIs(t, err, net.ErrClosed, "backend connection closed")

	// The backend leaves: the client connection is closed.
	conn, err = net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer conn.Close()
	roundTripRaw(t, conn, bufio.NewReader(conn), ping)

	pc = onlyConn(t, s)
	require.NoError(t, pc.backend.Close())
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = conn.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "client connection closed")
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()

	ctx := context.Background()
	s, err := Start(ctx, Config{Addr: "127.0.0.1:0", Dir: t.TempDir(), Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)

	// Leave clients connected, one of them idle mid-conversation, so Close
	// has connections to tear down.
	c, err := mongo.Connect(options.Client().ApplyURI(s.URI()))
	require.NoError(t, err)
	_, err = c.Database("leak").Collection("c").InsertOne(ctx, bson.D{{Key: "a", Value: 1}})
	require.NoError(t, err)
	raw, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer raw.Close()

	require.NoError(t, s.Close())
	require.NoError(t, c.Disconnect(ctx))

	// Poll by hand: require.Eventually runs its condition in a goroutine of
	// its own, which would count.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before Start, %d after Close:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

func TestAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()

	_, err = Start(context.Background(), Config{Addr: ln.Addr().String(), Dir: t.TempDir()})
	require.Error(t, err)
	require.Contains(t, err.Error(), ln.Addr().String())
	require.Contains(t, err.Error(), "address already in use")
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "no dir", cfg: Config{Addr: "127.0.0.1:0"}, want: "Config.Dir"},
		{name: "bad addr", cfg: Config{Addr: "localhost", Dir: "x"}, want: "Config.Addr"},
		{name: "dir with ?", cfg: Config{Addr: "127.0.0.1:0", Dir: "/tmp/a?b"}, want: "has '?', '#' or '%'"},
		{name: "dir with #", cfg: Config{Addr: "127.0.0.1:0", Dir: "/tmp/a#b"}, want: "has '?', '#' or '%'"},
		{name: "dir with %", cfg: Config{Addr: "127.0.0.1:0", Dir: "/tmp/a%20b"}, want: "has '?', '#' or '%'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Start(context.Background(), tc.cfg)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestCommandName(t *testing.T) {
	query := func(coll string, doc bson.D) message {
		raw, err := bson.Marshal(doc)
		require.NoError(t, err)
		m := make([]byte, headerLen)
		binary.LittleEndian.PutUint32(m[12:], opQuery)
		m = binary.LittleEndian.AppendUint32(m, 0)
		m = append(m, coll...)
		m = append(m, 0)
		m = binary.LittleEndian.AppendUint32(m, 0)
		m = binary.LittleEndian.AppendUint32(m, 0xffffffff)
		m = append(m, raw...)
		binary.LittleEndian.PutUint32(m, uint32(len(m)))
		return m
	}

	// An OP_MSG with a document sequence (kind 1) before the command.
	withSequence := func() message {
		cmd, err := bson.Marshal(bson.D{{Key: "insert", Value: "c"}, {Key: "$db", Value: "d"}})
		require.NoError(t, err)
		doc, err := bson.Marshal(bson.D{{Key: "a", Value: 1}})
		require.NoError(t, err)
		m := make([]byte, headerLen)
		binary.LittleEndian.PutUint32(m[12:], opMsg)
		m = binary.LittleEndian.AppendUint32(m, 0)
		m = append(m, 1)
		m = binary.LittleEndian.AppendUint32(m, uint32(4+len("documents")+1+len(doc)))
		m = append(m, "documents\x00"...)
		m = append(m, doc...)
		m = append(m, 0)
		m = append(m, cmd...)
		binary.LittleEndian.PutUint32(m, uint32(len(m)))
		return m
	}

	for _, tc := range []struct {
		name string
		msg  message
		want string
	}{
		{"op_msg hello", buildOpMsg(t, 1, 0, bson.D{{Key: "hello", Value: 1}}), "hello"},
		{"op_msg find", buildOpMsg(t, 1, 0, bson.D{{Key: "find", Value: "c"}}), "find"},
		{"op_msg sequence first", withSequence(), "insert"},
		{"op_msg empty", buildOpMsg(t, 1, 0, bson.D{}), ""},
		{"ping built by the front", pingMessage(-1), "ping"},
		{"op_query isMaster", query("admin.$cmd", bson.D{{Key: "isMaster", Value: 1}}), "isMaster"},
		{"op_query not a command", query("db.coll", bson.D{{Key: "isMaster", Value: 1}}), ""},
		{"truncated", message(buildOpMsg(t, 1, 0, bson.D{{Key: "hello", Value: 1}})[:22]), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.msg.commandName())
		})
	}

	require.True(t, buildOpMsg(t, 1, msgMoreToCome, bson.D{{Key: "insert", Value: "c"}}).moreToCome())
	require.False(t, buildOpMsg(t, 1, 0, bson.D{{Key: "insert", Value: "c"}}).moreToCome())
}

// buildOpMsg builds an OP_MSG request with one section of kind 0.
func buildOpMsg(t *testing.T, requestID int32, flags uint32, doc bson.D) message {
	t.Helper()

	raw, err := bson.Marshal(doc)
	require.NoError(t, err)

	m := make([]byte, headerLen)
	binary.LittleEndian.PutUint32(m[4:], uint32(requestID))
	binary.LittleEndian.PutUint32(m[12:], opMsg)
	m = binary.LittleEndian.AppendUint32(m, flags)
	m = append(m, 0)
	m = append(m, raw...)
	binary.LittleEndian.PutUint32(m, uint32(len(m)))

	return m
}

// roundTripRaw writes req to conn and reads one reply, checking that it
// answers req.
func roundTripRaw(t *testing.T, conn net.Conn, r *bufio.Reader, req message) message {
	t.Helper()

	_, err := conn.Write(req)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	reply, err := readMessage(r, nil, nil)
	require.NoError(t, err)
	require.Equal(t, req.requestID(), reply.responseTo())

	return reply
}

// conns returns the front's open connections.
func conns(s *Server) []*proxyConn {
	s.front.connsMu.Lock()
	defer s.front.connsMu.Unlock()

	var out []*proxyConn
	for pc := range s.front.conns {
		out = append(out, pc)
	}

	return out
}

func onlyConn(t *testing.T, s *Server) *proxyConn {
	t.Helper()

	cs := conns(s)
	require.Len(t, cs, 1)

	return cs[0]
}
