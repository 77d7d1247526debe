//go:build linux

package devdb

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// The tests of this file run devdb as a process of its own and read its
// memory from /proc: Linux only.

// devdbProcess is a devdb run as a process of its own, so that its memory
// can be read from /proc.
type devdbProcess struct {
	pid  int
	addr string
	uri  string
}

// startDevDBProcess runs the devdb binary with the given extra flags on a free
// port and a fresh directory, and stops it when the test ends.
func startDevDBProcess(t *testing.T, flags ...string) *devdbProcess {
	t.Helper()

	bin := devdbBinary(t)
	args := append([]string{"--addr", "127.0.0.1:0", "--dir", t.TempDir(), "--log-format", "json"}, flags...)
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())

	done := make(chan struct{})
	var waitErr error
	ready := make(chan devdbProcess, 1)
	var (
		logMu sync.Mutex
		logs  []string
	)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			if len(logs) < 200 {
				logs = append(logs, line)
			}
			logMu.Unlock()
			var l struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
				URI  string `json:"uri"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "devdb listening" {
				ready <- devdbProcess{pid: cmd.Process.Pid, addr: l.Addr, uri: l.URI}
			}
		}
		waitErr = cmd.Wait()
		close(done)
	}()

	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})

	select {
	case p := <-ready:
		t.Cleanup(func() {
			if t.Failed() {
				logMu.Lock()
				t.Logf("devdb logs (first %d lines):\n%s", len(logs), strings.Join(logs, "\n"))
				logMu.Unlock()
			}
		})
		return &p
	case <-done:
		t.Fatalf("devdb exited before listening: %v\n%s", waitErr, strings.Join(logs, "\n"))
	case <-time.After(2 * time.Minute):
		t.Fatal("devdb not listening after 2 minutes")
	}

	return nil
}

// memory is what /proc/PID/status says of a process's memory, in KiB.
type memory struct {
	RSS, HWM, Size int64
}

func (m memory) String() string {
	return fmt.Sprintf("VmRSS %d MiB, VmHWM %d MiB, VmSize %d MiB", m.RSS>>10, m.HWM>>10, m.Size>>10)
}

// readMemory reads pid's VmRSS, VmHWM and VmSize; ok is false once the
// process has gone.
func readMemory(pid int) (memory, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, false
	}

	var m memory
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "VmRSS":
			m.RSS = kb
		case "VmHWM":
			m.HWM = kb
		case "VmSize":
			m.Size = kb
		}
	}

	return m, true
}

// raiseFileLimit raises the test process's soft RLIMIT_NOFILE to its hard
// limit and returns the soft limit now in force.
func raiseFileLimit(t *testing.T) uint64 {
	t.Helper()

	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))
	}

	return lim.Cur
}

// TestHeaderFlood is issue 15's first case: connections that each send a
// 16-byte header announcing a 48 MB message and nothing more. devdb used to
// allocate the announced length at once, per connection, and had no limit on
// connections: 300 of them reserved about 15 GB, 3,000 got it killed. Now a
// header costs nothing, connections past --max-conns (default 3,000) are
// closed at once, and a driver client connected beforehand keeps being served
// throughout, with devdb's memory bounded.
func TestHeaderFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("opens thousands of connections")
	}

	const (
		maxConns   = DefaultMaxConns
		maxLatency = 3 * time.Second
		minRounds  = 20
		// Bounds on devdb's memory, measured at about 75 MiB RSS and 1.9
		// GiB VmSize with the flood in place (see docs/EMBEDDED-SERVER.md);
		// before the fix 300 such connections took VmSize to 15.6 GiB.
		maxHWM  = 512 << 10 // KiB
		maxSize = 8 << 20   // KiB
	)

	// The flood's connections are file descriptors of this process (one
	// each) and of devdb (one each for those it holds: it opens no FerretDB
	// connection before a whole message). 6,000, twice the default
	// --max-conns, stays well inside this machine's limit of 20,000.
	limit := raiseFileLimit(t)
	flood := min(6000, int(limit)-1000)
	if flood <= maxConns {
		t.Skipf("RLIMIT_NOFILE is %d (hard): too few descriptors for a flood past %d connections", limit, maxConns)
	}

	p := startDevDBProcess(t) // the default bounds

	// The driver client is connected and has been served before the flood
	// begins; its connections are among the maxConns.
	client := connect(t, p.uri)
	coll := client.Database("flood").Collection("c")
	ctx := context.Background()
	require.NoError(t, client.Ping(ctx, nil))
	_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "before"}})
	require.NoError(t, err)

	before, ok := readMemory(p.pid)
	require.True(t, ok)
	t.Logf("devdb before the flood: %v", before)

	// The client works all through the flood: ping, insert, find.
	stopClient := make(chan struct{})
	clientDone := make(chan struct{})
	var (
		rounds  int
		worst   time.Duration
		clientE error
	)
	go func() {
		defer close(clientDone)
		for i := 0; ; i++ {
			// At least minRounds, so that devdb has had time to take in
			// the flood's headers by the time memory is read.
			if i >= minRounds {
				select {
				case <-stopClient:
					return
				default:
				}
			}

			start := time.Now()
			opCtx, cancel := context.WithTimeout(ctx, 2*maxLatency)
			err := client.Ping(opCtx, nil)
			if err == nil {
				_, err = coll.InsertOne(opCtx, bson.D{{Key: "_id", Value: i}})
			}
			if err == nil {
				err = coll.FindOne(opCtx, bson.D{{Key: "_id", Value: i}}).Err()
			}
			cancel()
			if err != nil {
				clientE = fmt.Errorf("round %d: %w", i, err)
				return
			}
			worst = max(worst, time.Since(start))
			rounds++
		}
	}()

	// The flood. A reader per connection counts those devdb closes.
	var closedByServer atomic.Int64
	conns := make([]net.Conn, 0, flood)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	var readers sync.WaitGroup
	for i := range flood {
		c, err := net.Dial("tcp", p.addr)
		require.NoError(t, err, "dial %d", i)
		conns = append(conns, c)
		if _, err := c.Write(headerOnly(int32(i + 1))); err != nil {
			closedByServer.Add(1) // devdb closed it already: a reset
			continue
		}
		readers.Go(func() {
			_, err := c.Read(make([]byte, 1))
			if err != nil && !errors.Is(err, net.ErrClosed) {
				closedByServer.Add(1) // io.EOF or a reset: devdb closed it
			}
		})
	}
	t.Logf("flood: %d connections opened, each sent a 16-byte header announcing %d bytes", flood, MaxMessageSize)

	// devdb closes every connection past maxConns, and no other.
	refusedAtLeast := int64(flood - maxConns)
	require.Eventually(t, func() bool { return closedByServer.Load() >= refusedAtLeast },
		time.Minute, 10*time.Millisecond, "devdb closes the connections past --max-conns")

	// The client is served with the flood in place, and devdb's memory
	// stays bounded. (The client's operations stay one at a time, on the
	// connections it opened before the flood: devdb has no place for a new
	// one until the flood's connections close or time out.)
	close(stopClient)
	<-clientDone
	require.NoError(t, clientE)
	require.NoError(t, client.Ping(ctx, nil))
	_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "during"}})
	require.NoError(t, err)
	require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: "before"}}).Err())
	during, ok := readMemory(p.pid)
	require.True(t, ok, "devdb is still running")
	require.Positive(t, rounds)
	require.Less(t, worst, maxLatency, "the driver client stalled during the flood")

	closed := closedByServer.Load()
	require.LessOrEqual(t, closed, refusedAtLeast+10,
		"devdb closed connections it had room for (the client holds a few of the %d)", maxConns)
	t.Logf("devdb closed %d of %d flood connections (max-conns %d); client: %d rounds of ping+insert+find, slowest %v",
		closed, flood, maxConns, rounds, worst)
	t.Logf("devdb with the flood in place: %v", during)
	require.Less(t, during.HWM, int64(maxHWM), "devdb's peak RSS")
	require.Less(t, during.Size, int64(maxSize), "devdb's address space")

	// Once the flood goes, its connections' places are free again: a new
	// client connects and is served.
	for _, c := range conns {
		_ = c.Close()
	}
	readers.Wait()
	require.NoError(t, connect(t, p.uri).Ping(ctx, nil))

	after, ok := readMemory(p.pid)
	require.True(t, ok)
	t.Logf("devdb after the flood: %v", after)
}

// TestOrdinaryConnectionsServed: with the default bounds, 2,000 connections
// that each send a ping are all answered, and devdb's memory for them is
// measured.
func TestOrdinaryConnectionsServed(t *testing.T) {
	if testing.Short() {
		t.Skip("opens thousands of connections")
	}

	const (
		n      = 2000
		maxHWM = 1 << 20 // KiB
	)

	// devdb holds three descriptors per connection that sent a command (the
	// client's, its own to FerretDB and FerretDB's), this process one.
	if limit := raiseFileLimit(t); limit < 3*n+1000 {
		t.Skipf("RLIMIT_NOFILE is %d (hard): too few descriptors for %d connections", limit, n)
	}

	p := startDevDBProcess(t)
	before, ok := readMemory(p.pid)
	require.True(t, ok)

	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", p.addr)
		require.NoError(t, err, "dial %d", i)
		defer c.Close()
		_, err = c.Write(buildOpMsg(t, int32(i+1), 0, bson.D{{Key: "ping", Value: 1}, {Key: "$db", Value: "admin"}}))
		require.NoError(t, err)
		conns[i] = c
	}
	for i, c := range conns {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Minute)))
		m, err := readMessage(bufio.NewReader(c), nil, nil)
		require.NoError(t, err, "connection %d", i)
		require.Equal(t, int32(i+1), m.responseTo())
	}

	during, ok := readMemory(p.pid)
	require.True(t, ok)
	t.Logf("devdb before: %v; with %d connections served and open: %v", before, n, during)
	require.Less(t, during.HWM, int64(maxHWM))
}
