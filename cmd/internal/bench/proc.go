package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// proc is one worker process: this binary run as `bench worker`.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	last snapshot // the latest line it printed
	base snapshot // its ready line: the commands of its set-up
	// claims are the claim round trips of its periodic reports, in ms.
	claims []float64
	rdy    chan struct{}
	done   chan struct{} // closed when its stdout ends
	errs   *prefixWriter
}

// workerOpts are a worker process's settings.
type workerOpts struct {
	uri, db     string
	concurrency int
	claimBatch  int      // defaultClaimBatch: the worker's default
	extra       []string // more worker flags
}

func startWorker(o workerOpts, stderr io.Writer) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// The URI goes in the environment, not on the command line, where ps
	// would show its password to every user of the machine.
	cmd := exec.Command(self, "worker",
		"--db", o.db,
		"--concurrency", strconv.Itoa(o.concurrency),
		"--log-level", "error")
	if o.claimBatch != defaultClaimBatch {
		cmd.Args = append(cmd.Args, "--claim-batch", strconv.Itoa(o.claimBatch))
	}
	cmd.Args = append(cmd.Args, o.extra...)
	cmd.Env = append(os.Environ(), "DOCKET_CONFIG=", "DOCKET_MONGO_URI="+o.uri)
	p := &proc{cmd: cmd, rdy: make(chan struct{}), done: make(chan struct{}), errs: &prefixWriter{w: stderr}}
	cmd.Stderr = p.errs
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker process: %w", err)
	}
	p.errs.prefix = fmt.Sprintf("worker[%d]: ", cmd.Process.Pid)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var s snapshot
			if json.Unmarshal(sc.Bytes(), &s) != nil {
				continue
			}
			p.mu.Lock()
			p.last = s
			p.claims = append(p.claims, s.NewClaimMs...)
			if s.Ready {
				p.base = s
				close(p.rdy)
			}
			p.mu.Unlock()
		}
	}()
	return p, nil
}

func (p *proc) snapshot() snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// window returns its latest report and how many claim round trips its
// reports have carried so far, claimsSince those after the first n.
func (p *proc) window() (snapshot, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last, len(p.claims)
}

func (p *proc) claimsSince(n int) []float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]float64(nil), p.claims[min(n, len(p.claims)):]...)
}

// waitReady waits until the process has set up and is about to claim.
func (p *proc) waitReady(timeout time.Duration) error {
	select {
	case <-p.rdy:
		return nil
	case <-p.done:
		return fmt.Errorf("worker process exited before it was ready")
	case <-time.After(timeout):
		return fmt.Errorf("worker process not ready after %s", timeout)
	}
}

// usage is what a stopped worker process used.
type usage struct {
	Commands int64            `json:"commands"` // after set-up
	ByName   map[string]int64 `json:"byName"`
	ClaimMs  []float64        `json:"-"`
	CPU      time.Duration    `json:"cpu"`
	MaxRSSMB float64          `json:"maxRssMB"`
	// ClaimCmds and DoneCmds are the claims' and completions' commands
	// among Commands.
	ClaimCmds, DoneCmds int64 `json:"-"`
	// Leader, Pauses and Registry are the leader election's commands, the
	// paused-queue reads and the registry's beats among Commands.
	Leader, Pauses, Registry int64 `json:"-"`
}

// kill sends SIGKILL, as a crash would, and waits for the process to exit.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
	_ = p.cmd.Wait()
}

// stop sends SIGTERM, waits for the final report and returns the process's
// counts and resource use.
func (p *proc) stop() (usage, error) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	return p.ended()
}

// stopWithin is stop bounded by grace: past it, a second SIGTERM (the
// worker then cancels its running jobs and gives their leases back), and
// past half as long again a SIGKILL. It reports how it ended: "" when the
// first signal stopped it, else "second signal" or "killed".
func (p *proc) stopWithin(grace time.Duration) (usage, string, error) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	how := ""
	select {
	case <-p.done:
	case <-time.After(grace):
		how = "second signal"
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace / 2):
			how = "killed"
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	u, err := p.ended()
	if how == "killed" {
		err = nil // no final report: the caller uses the periodic ones
	}
	return u, how, err
}

// ended returns the counts of a process whose stdout has ended.
func (p *proc) ended() (usage, error) {
	err := p.cmd.Wait()
	p.mu.Lock()
	last, base := p.last, p.base
	p.mu.Unlock()
	u := usage{Commands: last.Commands - base.Commands, ByName: last.ByName, ClaimMs: last.ClaimMs,
		ClaimCmds: last.ClaimCmds - base.ClaimCmds, DoneCmds: last.DoneCmds - base.DoneCmds,
		Leader: last.Leader - base.Leader, Pauses: last.Pauses - base.Pauses, Registry: last.Registry - base.Registry}
	if ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		u.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		u.MaxRSSMB = float64(ru.Maxrss) / 1024 // KiB on Linux
	}
	if err != nil {
		return u, fmt.Errorf("worker process: %w", err)
	}
	if !last.Final {
		return u, fmt.Errorf("worker process ended without its final report")
	}
	return u, nil
}

// prefixWriter passes a child's stderr on, each write prefixed.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = fmt.Fprintf(p.w, "%s%s", p.prefix, b)
	return len(b), nil
}
