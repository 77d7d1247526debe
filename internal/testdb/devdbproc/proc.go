// Package devdbproc runs the devdb binary (the embedded development
// server, built from docket's devdb module) as a subprocess: the tests and the
// bench start it through here, so that docket's own module never imports
// FerretDB.
package devdbproc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// stopGrace is how long Stop waits after SIGTERM before it sends SIGKILL.
const stopGrace = 5 * time.Second

// Process is one run of a devdb binary.
type Process struct {
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

// Start runs the devdb binary bin on addr (host:port; port 0 picks a free
// one) with its data in dir and the extra flags given (e.g. "--faults",
// "stepdown=0.01"), and returns once the server answers a ping or
// startTimeout has passed. devdb's warnings and errors go on to stderr,
// and so does every line that is not one of its JSON log lines (a panic).
func Start(bin, addr, dir string, startTimeout time.Duration, extra ...string) (*Process, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("devdbproc: pipe: %w", err)
	}

	args := append([]string{"--addr", addr, "--dir", dir, "--log-format", "json"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout = w
	cmd.Stderr = w
	cmd.SysProcAttr = sysProcAttr()

	if err := cmd.Start(); err != nil {
		_ = w.Close()
		_ = r.Close()
		return nil, fmt.Errorf("devdbproc: start devdb: %w", err)
	}
	_ = w.Close() // the child holds its own copy

	p := &Process{cmd: cmd, done: make(chan struct{})}
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
				} else if passOn(line) {
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

	fail := func(reason string) (*Process, error) {
		p.Kill()
		<-logsDone
		return nil, fmt.Errorf("devdb on %s, data in %s, flags %q: %s\n%s", addr, dir, extra, reason, strings.Join(early, "\n"))
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

// Stop sends SIGTERM, then SIGKILL if the process is still running after
// stopGrace, and waits for it to exit. It returns an error unless the process
// exits cleanly after SIGTERM (or had exited before).
func (p *Process) Stop() error {
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
		p.Kill()
		return fmt.Errorf("devdb (pid %d) still running %v after SIGTERM; killed", p.cmd.Process.Pid, stopGrace)
	}
}

// Kill sends SIGKILL and waits for the process to exit.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Addr returns the host:port the server listens on.
func (p *Process) Addr() string { return p.addr }

// URI returns the server's connection string.
func (p *Process) URI() string { return p.uri }

// Pid returns the server's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// passOn reports whether a log line of devdb's goes on to stderr: its
// warnings and errors, and every line that is not one of its JSON log
// lines (a panic's message and stack, the Go runtime's fatal errors).
func passOn(line string) bool {
	if !strings.HasPrefix(line, "{") {
		return true
	}
	return strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`)
}
