package testdb

import (
	"sync"
	"testing"

	"github.com/docketq/docket/internal/testdb/devdbproc"
)

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
	proc *devdbproc.Process
}

// StartDevDB starts a devdb of the test's own on a free port, keeping its
// data in dir (a fresh temporary directory when dir is ""), with the flags
// of EnvDevDBFlags, and stops it when the test ends. The port stays the same
// across restarts.
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
	if err := p.Stop(); err != nil {
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
		p.Kill()
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

	p, err := devdbproc.Start(d.bin, d.addr, d.dir, startTimeout, DevDBFlags()...)
	if err != nil {
		return err
	}

	d.proc = p
	d.addr = p.Addr()
	d.uri = p.URI()

	return nil
}
