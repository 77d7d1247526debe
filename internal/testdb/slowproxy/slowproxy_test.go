package slowproxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// target is the test server's host:port (the test is skipped when the
// server is a real MongoDB the proxy cannot front).
func target(t *testing.T) string {
	t.Helper()
	return testdb.ProxyTarget(t)
}

// connect returns a client of the server behind p, on a single connection
// per command in flight.
func connect(t *testing.T, p *Proxy) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + p.Addr() + "/?directConnection=true").
		SetHeartbeatInterval(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.Ping(ctx, nil))
	return c
}

// TestPassesCommandsUnchanged: documents written and read through the proxy
// are the server's.
func TestPassesCommandsUnchanged(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	p := Start(t, target(t), Config{Serial: true})
	coll := connect(t, p).Database(db.Name()).Collection("c")
	ctx := context.Background()
	big := bytes.Repeat([]byte("x"), 1<<20) // spans many reads
	_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "big", Value: big}})
	require.NoError(t, err)
	var got struct {
		Big []byte `bson:"big"`
	}
	require.NoError(t, db.Collection("c").FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&got), "written to the server")
	require.Equal(t, big, got.Big)
	got.Big = nil
	require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&got), "read through the proxy")
	require.Equal(t, big, got.Big)
}

// TestHoldsEveryReply: a reply comes no sooner than the delay after its
// command, and SetDelay changes the delay of the replies that follow.
func TestHoldsEveryReply(t *testing.T) {
	t.Parallel()
	p := Start(t, target(t), Config{Delay: 0})
	c := connect(t, p)
	ctx := context.Background()
	const delay = 400 * time.Millisecond
	p.SetDelay(delay)
	for range 3 {
		start := time.Now()
		require.NoError(t, c.Ping(ctx, nil))
		require.GreaterOrEqual(t, time.Since(start), delay)
	}
}

// TestSerialAnswersInOrder: with Serial, commands from many connections
// run one at a time, in the order they came, each holding the next back by
// the delay.
func TestSerialAnswersInOrder(t *testing.T) {
	t.Parallel()
	p := Start(t, target(t), Config{Serial: true})
	c := connect(t, p)
	ctx := context.Background()
	// Open the connections first, so that each command below is one
	// round trip on a connection of its own.
	var warm sync.WaitGroup
	for range 3 {
		warm.Go(func() { require.NoError(t, c.Ping(ctx, nil)) })
	}
	warm.Wait()

	const delay = 300 * time.Millisecond
	p.SetDelay(delay)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	start := time.Now()
	for i := range 3 {
		wg.Go(func() {
			require.NoError(t, c.Ping(ctx, nil))
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		})
		time.Sleep(delay / 3) // sent in the order 0, 1, 2
	}
	wg.Wait()
	require.Equal(t, []int{0, 1, 2}, order)
	require.GreaterOrEqual(t, time.Since(start), 3*delay, "one at a time")
}

// TestCloseEndsConnections: once closed, the proxy neither answers nor
// accepts.
func TestCloseEndsConnections(t *testing.T) {
	t.Parallel()
	p := Start(t, target(t), Config{})
	c := connect(t, p)
	p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	require.Error(t, c.Ping(ctx, nil))
	p.Close() // twice is harmless
}

func TestReadMessage(t *testing.T) {
	t.Parallel()
	msg := make([]byte, 20)
	binary.LittleEndian.PutUint32(msg, 20)
	got, err := readMessage(bytes.NewReader(append(msg, 1, 2, 3)))
	require.NoError(t, err)
	require.Equal(t, msg, got)

	for name, n := range map[string]uint32{"shorter than a header": 3, "longer than any message": maxMessage + 1} {
		bad := make([]byte, 20)
		binary.LittleEndian.PutUint32(bad, n)
		_, err := readMessage(bytes.NewReader(bad))
		require.Error(t, err, name)
	}
	_, err = readMessage(bytes.NewReader(msg[:10]))
	require.Error(t, err, "cut short")
}

func TestHasMoreToCome(t *testing.T) {
	t.Parallel()
	header := func(op, flags uint32) []byte {
		m := make([]byte, 21)
		binary.LittleEndian.PutUint32(m, 21)
		binary.LittleEndian.PutUint32(m[12:], op)
		binary.LittleEndian.PutUint32(m[16:], flags)
		return m
	}
	for _, tc := range []struct {
		name string
		msg  []byte
		want bool
	}{
		{"OP_MSG", header(opMsg, 0), false},
		{"OP_MSG moreToCome", header(opMsg, moreToCome), true},
		{"OP_MSG checksum and moreToCome", header(opMsg, moreToCome|1), true},
		{"OP_QUERY", header(2004, moreToCome), false},
		{"too short", header(opMsg, moreToCome)[:18], false},
	} {
		require.Equal(t, tc.want, hasMoreToCome(tc.msg), tc.name)
	}
}
