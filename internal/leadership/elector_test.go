package leadership

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/internal/testdb/slowproxy"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) { testdb.Main(m) }

const (
	testTTL      = 3 * time.Second
	testInterval = 300 * time.Millisecond
)

// node is one elector in a test, with a switch that stalls it (as a
// SIGSTOP would: no renewals, no resignation) until released.
type node struct {
	e      *Elector
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	stall  chan struct{} // non-nil while stalled
	parked chan struct{} // receives when a round found it stalled
}

func (n *node) pause() {
	n.mu.Lock()
	n.stall = make(chan struct{})
	n.mu.Unlock()
}

func (n *node) resume() {
	n.mu.Lock()
	close(n.stall)
	n.stall = nil
	n.mu.Unlock()
}

func startNodes(t *testing.T, coll *mongo.Collection, count int) []*node {
	t.Helper()
	nodes := make([]*node, count)
	for i := range nodes {
		nodes[i] = startNode(t, coll, Config{ID: fmt.Sprintf("p%d", i), TTL: testTTL, Interval: testInterval})
	}
	return nodes
}

// startNode runs an elector with cfg (and the test's logger) on coll until
// the test ends.
func startNode(t *testing.T, coll *mongo.Collection, cfg Config) *node {
	t.Helper()
	return startClockedNode(t, coll, cfg, nil)
}

// startClockedNode is startNode with the elector reading clock (nil: the
// machine's).
func startClockedNode(t *testing.T, coll *mongo.Collection, cfg Config, clock *TestClock) *node {
	t.Helper()
	cfg.Logger = zaptest.NewLogger(t)
	e, err := New(coll, cfg)
	require.NoError(t, err)
	if clock != nil {
		e.UseClock(clock)
	}
	n := &node{e: e, done: make(chan struct{}), parked: make(chan struct{}, 1)}
	e.pauseFor = func() {
		n.mu.Lock()
		ch := n.stall
		n.mu.Unlock()
		if ch != nil {
			select {
			case n.parked <- struct{}{}:
			default:
			}
			<-ch
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { defer close(n.done); e.Run(ctx) }()
	t.Cleanup(func() {
		n.mu.Lock()
		if n.stall != nil {
			close(n.stall)
			n.stall = nil
		}
		n.mu.Unlock()
		cancel()
		<-n.done
	})
	return n
}

// leaders returns the nodes that say they lead now.
func leaders(nodes []*node) []int {
	var out []int
	for i, n := range nodes {
		if _, ok := n.e.Leading(); ok {
			out = append(out, i)
		}
	}
	return out
}

// waitLeader waits for exactly one leader among nodes other than except,
// checking at every look that there are never two, and returns it.
func waitLeader(t *testing.T, nodes []*node, within time.Duration, except int) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		l := leaders(nodes)
		require.LessOrEqual(t, len(l), 1, "two processes lead at once: %v", l)
		if len(l) == 1 && l[0] != except {
			return l[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.FailNow(t, "no leader elected", "within %s", within)
	return -1
}

// watchOne checks for d that there is never more than one leader.
func watchOne(t *testing.T, nodes []*node, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		require.LessOrEqual(t, len(leaders(nodes)), 1, "two processes lead at once")
	}
}

func TestOneLeaderAmongMany(t *testing.T) {
	t.Parallel()
	coll := testdb.NewDB(t).Collection(DefaultCollection)
	nodes := startNodes(t, coll, 4)
	first := waitLeader(t, nodes, 5*time.Second, -1)
	watchOne(t, nodes, 2*testTTL)
	require.Equal(t, []int{first}, leaders(nodes), "a renewing leader keeps the lease")
	term, _ := nodes[first].e.Leading()
	require.EqualValues(t, 1, term.Number)
}

// TestFailoverAfterTheLeaderStalls: a leader that stops renewing (a
// SIGKILL, or a SIGSTOP that lasts) stops trusting its term before anyone
// else takes over, another process leads within two TTLs of its last
// renewal and two jitters (a follower's looks are a TTL and a jitter
// apart, and the one that first saw the last version waits a TTL more),
// and when the stalled one resumes it learns it was deposed and leaves the
// lease alone.
func TestFailoverAfterTheLeaderStalls(t *testing.T) {
	t.Parallel()
	coll := testdb.NewDB(t).Collection(DefaultCollection)
	nodes := startNodes(t, coll, 3)
	old := waitLeader(t, nodes, 5*time.Second, -1)
	oldTerm, _ := nodes[old].e.Leading()
	nodes[old].pause()
	stalled := time.Now()
	// The leader stalls at its next round: its last renewal may come up to
	// an interval after this.
	next := waitLeader(t, nodes, testInterval+2*(testTTL+testTTL/10)+time.Second, old)
	took := time.Since(stalled)
	t.Logf("failover took %s (ttl %s, interval %s)", took, testTTL, testInterval)
	require.GreaterOrEqual(t, took, testTTL-safetyMargin-testInterval, "the lease was taken before it could have expired")
	newTerm, _ := nodes[next].e.Leading()
	require.Greater(t, newTerm.Number, oldTerm.Number)

	nodes[old].resume()
	watchOne(t, nodes, 3*testInterval)
	require.Equal(t, []int{next}, leaders(nodes), "the resumed process does not lead")
	var doc struct {
		Owner string `bson:"owner"`
		Term  int64  `bson:"term"`
	}
	require.NoError(t, coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: DefaultName}}).Decode(&doc))
	require.Equal(t, fmt.Sprintf("p%d", next), doc.Owner)
	require.Equal(t, newTerm.Number, doc.Term)
}

// TestResignHandsOverAtTheNextLook: a leader that stops gracefully
// resigns, and another process leads at its next look (at most a TTL and a
// jitter later) rather than a TTL after that look.
func TestResignHandsOverAtTheNextLook(t *testing.T) {
	t.Parallel()
	coll := testdb.NewDB(t).Collection(DefaultCollection)
	nodes := startNodes(t, coll, 2)
	old := waitLeader(t, nodes, 5*time.Second, -1)
	start := time.Now()
	nodes[old].cancel()
	<-nodes[old].done
	waitLeader(t, nodes, testTTL+testTTL/10+testInterval, old)
	t.Logf("handover after resigning took %s", time.Since(start))
}

// TestForeignLeaseDocuments: a lease document another program wrote, with
// fields of any type (a regex too), neither blocks the election nor
// crashes it.
func TestForeignLeaseDocuments(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]bson.D{
		"odd types":             {{Key: "owner", Value: 5}, {Key: "token", Value: 7}, {Key: "version", Value: "x"}, {Key: "term", Value: nil}},
		"empty":                 {},
		"a lease never renewed": {{Key: "owner", Value: "gone"}, {Key: "token", Value: "t"}, {Key: "version", Value: int64(4)}, {Key: "term", Value: int64(9)}},
		// A filter reads a regex as a pattern: taking the lease must not
		// match it by equality (an invalid one failed every take).
		"a regex token":          {{Key: "owner", Value: "x"}, {Key: "token", Value: bson.Regex{Pattern: "^t"}}, {Key: "version", Value: int64(1)}},
		"an invalid regex token": {{Key: "owner", Value: "x"}, {Key: "token", Value: bson.Regex{Pattern: "a[", Options: "i"}}, {Key: "version", Value: int64(1)}},
		"a regex owner":          {{Key: "owner", Value: bson.Regex{Pattern: "("}}, {Key: "version", Value: int64(1)}},
		"a regex version":        {{Key: "token", Value: "t"}, {Key: "version", Value: bson.Regex{Pattern: "["}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			coll := testdb.NewDB(t).Collection(DefaultCollection)
			_, err := coll.InsertOne(context.Background(), append(bson.D{{Key: "_id", Value: DefaultName}}, doc...))
			require.NoError(t, err)
			nodes := startNodes(t, coll, 2)
			l := waitLeader(t, nodes, testTTL+5*testInterval+time.Second, -1)
			term, _ := nodes[l].e.Leading()
			if name == "a lease never renewed" {
				require.EqualValues(t, 10, term.Number, "terms keep counting up")
			}
		})
	}
}

// TestFollowerLooksOncePerTTL: a follower of a live leader reads the lease
// once per TTL, not once per interval: it may take over only once a version
// has stood for a TTL, so it has nothing to learn sooner. It never takes
// the renewed lease.
func TestFollowerLooksOncePerTTL(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	leader := startNode(t, db.Collection(DefaultCollection), Config{ID: "leader", TTL: testTTL})
	waitLeader(t, []*node{leader}, 5*time.Second, -1)

	var looks atomic.Int64
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if coll, _ := e.Command.Lookup(e.CommandName).StringValueOK(); coll == DefaultCollection {
			looks.Add(1)
		}
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(mon))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	// The default interval, TTL/3: the leader renews every second.
	follower := startNode(t, client.Database(db.Name()).Collection(DefaultCollection), Config{ID: "follower", TTL: testTTL})
	const ttls = 3
	watchOne(t, []*node{leader, follower}, ttls*testTTL)
	got := looks.Load()
	t.Logf("the follower sent %d commands to the lease collection in %s (ttl %s)", got, ttls*testTTL, testTTL)
	// Its first look at once, then one a TTL (and a jitter) later.
	require.LessOrEqual(t, got, int64(ttls+1), "a follower looks once per TTL")
	require.GreaterOrEqual(t, got, int64(ttls-1), "a follower keeps looking")
	_, ok := leader.e.Leading()
	require.True(t, ok, "the renewing leader keeps the lease")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "ID must not be empty"},
		{Config{ID: "a", TTL: time.Second}, "leadership.ttl: 1s must be at least 3s"},
		{Config{ID: "a", TTL: 9 * time.Second, Interval: 5 * time.Second}, "leadership.interval: 5s must be positive and at most half the ttl (4.5s)"},
	} {
		_, err := New(nil, tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
}

// TestLeaderKeepsTheLeaseOnASlowServer: issue 22. On a server that runs
// one command at a time, each taking seconds (devdb behind a worker's scans
// of a big jobs collection), a renewal waits in line behind other
// processes' commands for longer than the renewal interval. The leader
// keeps its lease all the same, without a moment out of it, since a
// renewal may take as long as the lease it renews still holds.
func TestLeaderKeepsTheLeaseOnASlowServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about 40 s")
	}
	t.Parallel()
	p := slowproxy.Start(t, testdb.ProxyTarget(t), slowproxy.Config{Serial: true})
	connect := func() *mongo.Client {
		// Monitoring hellos rarely: they would wait in line too.
		c, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + p.Addr() + "/?directConnection=true").
			SetHeartbeatInterval(time.Minute))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
		return c
	}
	db := testdb.NewDB(t)
	const ttl = 15 * time.Second // the default, and the default interval (5 s)
	n := startNode(t, connect().Database(db.Name()).Collection(DefaultCollection), Config{ID: "slow", TTL: ttl})
	waitLeader(t, []*node{n}, 10*time.Second, -1)

	// Two other processes keep the server busy, each sending its next
	// command as soon as the last is answered; with every command taking
	// 2 s, a renewal waits its turn behind both: 6 s in all.
	const delay = 2 * time.Second
	p.SetDelay(delay)
	load := connect().Database(db.Name()).Collection("jobs")
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				_ = load.FindOne(ctx, bson.D{{Key: "state", Value: "available"}}).Err()
			}
		})
	}
	defer wg.Wait()
	defer stop()

	const watch = 30 * time.Second
	start := time.Now()
	for time.Since(start) < watch {
		_, ok := n.e.Leading()
		require.True(t, ok, "the leader lost its lease on a slow server, %s after it slowed", time.Since(start))
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWallClockSetBackDoesNotExtendTheTerm: a leader's wall clock set back
// (by an hour) neither ends its term nor extends it: the leader counts its
// term on the monotonic clock, and stops trusting it TTL minus the margin
// after its last renewal was sent.
func TestWallClockSetBackDoesNotExtendTheTerm(t *testing.T) {
	t.Parallel()
	coll := testdb.NewDB(t).Collection(DefaultCollection)
	clock := &TestClock{}
	n := startClockedNode(t, coll, Config{ID: "p0", TTL: testTTL, Interval: testInterval}, clock)
	waitLeader(t, []*node{n}, 5*time.Second, -1)
	// No more renewals: the last one was sent before the node parked.
	n.pause()
	<-n.parked
	clock.JumpWall(-time.Hour)
	_, ok := n.e.Leading()
	require.True(t, ok, "a wall clock set back ended the term")
	clock.Pass(testTTL - safetyMargin)
	_, ok = n.e.Leading()
	require.False(t, ok, "a wall clock set back extended the term")
}
