//go:build linux

package chaos

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// syncBuffer collects a process's output while it runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// process is one worker process of the run.
type process struct {
	id    string // the worker id it was given with --id
	cmd   *exec.Cmd
	out   *syncBuffer
	done  chan struct{} // closed when it has exited
	start time.Time

	// Set under run.mu.
	killed  bool // SIGKILLed by the run
	stalled bool // SIGSTOPped right now
	stopped bool // SIGTERMed at the end
}

func startProcess(bin, id string, env, args []string) (*process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{id: id, cmd: cmd, out: out, done: make(chan struct{}), start: time.Now()}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitCode is the process's exit status, -1 if it was killed by a signal
// or has not exited.
func (p *process) exitCode() int {
	if !p.exited() {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *process) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	<-p.done
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
