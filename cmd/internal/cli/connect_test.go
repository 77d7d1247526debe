package cli

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/configs"
	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// stallProxy forwards TCP to a server until stall is set; from then on it
// reads what clients send and answers nothing, as a primary does while it
// waits for a majority that is not there.
type stallProxy struct {
	ln    net.Listener
	stall atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &stallProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go p.pipe(c, s)
			go p.pipe(s, c)
		}
	}()
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

func (p *stallProxy) pipe(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if err != nil {
			_ = to.Close()
			return
		}
		if p.stall.Load() {
			continue // swallowed: never answered
		}
		if _, err := to.Write(buf[:n]); err != nil {
			_ = from.Close()
			return
		}
	}
}

// TestWriteTimeoutBoundsAStalledWrite: a majority write with no deadline of
// its own, to a server that stops answering, fails after
// mongo.writeTimeout with a timeout error instead of waiting forever, and
// the command carried maxTimeMS, which a real MongoDB applies to its
// write-concern wait.
func TestWriteTimeoutBoundsAStalledWrite(t *testing.T) {
	testdb.SkipOnRealMongo(t, "stalls a devdb of its own behind a proxy")
	srv := testdb.StartDevDB(t, "")
	addr := strings.TrimSuffix(strings.TrimPrefix(srv.URI(), "mongodb://"), "/")
	proxy := newStallProxy(t, addr)

	cfg := configs.MongoConfig{
		URI:          "mongodb://" + proxy.ln.Addr().String() + "/?directConnection=true",
		DB:           "wt",
		Timeout:      5 * time.Second,
		WriteTimeout: 300 * time.Millisecond,
	}
	var maxTimeMS sync.Map // command name → maxTimeMS sent
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if v, err := e.Command.LookupErr("maxTimeMS"); err == nil {
			maxTimeMS.Store(e.CommandName, v.AsInt64())
		}
	}}
	client, err := connect(cfg, mon)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Disconnect(ctx)
	})
	coll := client.Database(cfg.DB).Collection("jobs", options.Collection().SetWriteConcern(writeconcern.Majority()))

	ctx := context.Background() // no deadline: only writeTimeout bounds it
	_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "j1"}, {Key: "state", Value: "available"}})
	require.NoError(t, err)
	v, ok := maxTimeMS.Load("insert")
	require.True(t, ok, "the insert carried no maxTimeMS: the server would wait for its write concern without bound")
	require.LessOrEqual(t, v.(int64), int64(300))

	proxy.stall.Store(true)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "j1"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "running"}}}})
		done <- err
	}()
	select {
	case err := <-done:
		took := time.Since(start)
		require.Error(t, err)
		require.True(t, mongo.IsTimeout(err) || errors.Is(err, context.DeadlineExceeded), "want a timeout error, got %v", err)
		require.Less(t, took, 3*time.Second, "the write gave up after %s", took)
	case <-time.After(5 * time.Second):
		t.Fatal("a majority write to a server that does not answer was still waiting after 5s, with mongo.writeTimeout 300ms")
	}
}
