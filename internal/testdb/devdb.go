package testdb

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// stopGrace is how long Stop waits after SIGTERM before it sends SIGKILL.
const stopGrace = 5 * time.Second

// DevDB is a devdb subprocess that a test controls: it can stop, kill and
// restart it, to test crashes and outages. Its methods report failures to the
// test that started it, so call them from that test's goroutine.
type DevDB struct {
	t   testing.TB
	bin string
	dir string

	mu   sync.Mutex
	addr string // host:port, fixed after the first start
	uri  string
	proc *process
}

// StartDevDB starts a devdb of the test's own on a free port, keeping its
// data in dir (a fresh temporary directory when dir is ""), and stops it
// when the test ends. The port stays the same across restarts.
func StartDevDB(t testing.TB, dir string) *DevDB {
	t.Helper()

	if dir == "" {
		dir = t.TempDir()
	}

	d := &DevDB{t: t, bin: DevDBBinary(t), dir: dir, addr: "127.0.0.1:0"}
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)

	return d
}

// URI returns the server's connection string. It does not change across
// restarts.
func (d *DevDB) URI() string {
	d.mu.Lock()
	defer d.mu.Unlock()

	return d.uri
}

// Dir returns the server's data directory.
func (d *DevDB) Dir() string {
	return d.dir
}

// Stop stops the server the way an operator would, with SIGTERM, and waits
// for it to exit; it sends SIGKILL if the server is still running 5 s later.
// A server that does not exit cleanly fails the test. Stopping a stopped
// server does nothing.
func (d *DevDB) Stop() {
	d.t.Helper()

	d.mu.Lock()
	p := d.proc
	d.mu.Unlock()

	if p == nil {
		return
	}
	if err := p.stop(); err != nil {
		d.t.Errorf("testdb: %v", err)
	}
}

// Kill kills the server with SIGKILL, as a crash would, and waits for it to
// exit. Killing a stopped server does nothing.
func (d *DevDB) Kill() {
	d.mu.Lock()
	p := d.proc
	d.mu.Unlock()

	if p != nil {
		p.kill()
	}
}

// Restart stops the server if it is running, then starts it again on the same
// port and data directory, and waits until it answers.
func (d *DevDB) Restart() {
	d.t.Helper()

	d.Stop()
	if err := d.start(); err != nil {
		d.t.Fatal(err)
	}
}

func (d *DevDB) start() error {
	d.mu.Lock()
	defer d.mu.Unlock()

	p, err := startProcess(d.bin, d.addr, d.dir)
	if err != nil {
		return err
	}

	d.proc = p
	d.addr = p.addr
	d.uri = p.uri

	return nil
}

// process is one run of a devdb binary.
type process struct {
	cmd  *exec.Cmd
	addr string
	uri  string

	done    chan struct{} // closed when the process has exited
	waitErr error         // set before done is closed
}

// listening is the log line devdb writes once it serves.
type listening struct {
	Msg  string `json:"msg"`
	Addr string `json:"addr"`
	URI  string `json:"uri"`
}

// startProcess runs the devdb binary bin on addr and dir and returns once it
// answers a ping.
func startProcess(bin, addr, dir string) (*process, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("testdb: pipe: %w", err)
	}

	cmd := exec.Command(bin, "--addr", addr, "--dir", dir, "--log-format", "json")
	cmd.Stdout = w
	cmd.Stderr = w
	cmd.SysProcAttr = sysProcAttr()

	if err := cmd.Start(); err != nil {
		_ = w.Close()
		_ = r.Close()
		return nil, fmt.Errorf("testdb: start devdb: %w", err)
	}
	_ = w.Close() // the child holds its own copy

	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()

	// Read the logs until the listening line, keeping them for the error
	// message should devdb not get there; afterwards pass its warnings and
	// errors on to stderr and drop the rest. Reading goes on until devdb
	// exits, so that it never blocks writing a log line.
	out := bufio.NewReader(r)
	var early []string
	ready := make(chan listening, 1)
	logsDone := make(chan struct{})
	go func() {
		defer close(logsDone)
		defer r.Close()
		found := false
		for {
			line, err := out.ReadString('\n')
			if line != "" {
				if !found {
					var l listening
					if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "devdb listening" {
						found = true
						ready <- l
					} else {
						early = append(early, strings.TrimSpace(line))
					}
				} else if strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) {
					fmt.Fprintf(os.Stderr, "devdb[%d]: %s", cmd.Process.Pid, line)
				}
			}
			if err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()

	fail := func(reason string) (*process, error) {
		p.kill()
		<-logsDone
		return nil, fmt.Errorf("testdb: devdb on %s, data in %s: %s\n%s", addr, dir, reason, strings.Join(early, "\n"))
	}

	select {
	case l := <-ready:
		p.addr, p.uri = l.Addr, l.URI
	case <-p.done:
		<-logsDone
		return fail(fmt.Sprintf("exited before listening (%v)", p.waitErr))
	case <-timer.C:
		return fail(fmt.Sprintf("not listening after %v", startTimeout))
	}

	if err := ping(p.uri, startTimeout); err != nil {
		return fail(err.Error())
	}

	return p, nil
}

// ping waits until the server at uri answers a ping.
func ping(uri string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	c, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = c.Disconnect(context.Background()) }()

	if err := c.Ping(ctx, nil); err != nil {
		return fmt.Errorf("ping: %w", err)
	}

	return nil
}

// stop sends SIGTERM, then SIGKILL if the process is still running after
// stopGrace, and waits for it to exit. It returns an error unless the process
// exits cleanly after SIGTERM (or had exited before).
func (p *process) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("devdb (pid %d): SIGTERM: %w", p.cmd.Process.Pid, err)
	}

	timer := time.NewTimer(stopGrace)
	defer timer.Stop()

	select {
	case <-p.done:
		if p.waitErr != nil {
			return fmt.Errorf("devdb (pid %d) exited uncleanly after SIGTERM: %w", p.cmd.Process.Pid, p.waitErr)
		}
		return nil
	case <-timer.C:
		p.kill()
		return fmt.Errorf("devdb (pid %d) still running %v after SIGTERM; killed", p.cmd.Process.Pid, stopGrace)
	}
}

// kill sends SIGKILL and waits for the process to exit.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}
