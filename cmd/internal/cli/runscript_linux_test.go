package cli

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
)

// demoDir lays out what scripts/run.sh needs (scripts/ and bin/ with the
// commands and devdb) in a directory of its own, which every process the
// demo starts has as its working directory.
func demoDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "scripts"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	for _, s := range []string{"run.sh", "demo-batch.sh"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "scripts", s))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "scripts", s), b, 0o755))
	}
	bins := map[string]string{"devdb": testdb.DevDBBinary(t)}
	for _, cmd := range []string{"worker", "enqueue", "docketctl"} {
		bins[cmd] = testdb.BuildBinary(t, "github.com/docketq/docket/cmd/"+cmd, false)
	}
	for name, path := range bins {
		require.NoError(t, os.Symlink(path, filepath.Join(dir, "bin", name)))
	}
	t.Cleanup(func() {
		// Whatever a failed run left behind: only processes of this
		// directory, by pid.
		for _, pid := range processesIn(dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return dir
}

// processesIn returns the processes whose working directory is dir.
func processesIn(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && cwd == dir {
			out = append(out, pid)
		}
	}
	return out
}

// describe names the processes for a failure message.
func describe(pids []int) string {
	var out []string
	for _, pid := range pids {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")))
	}
	return strings.Join(out, "; ")
}

func localPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// demo returns the command running script (a shell line) in dir, on ports
// of its own, with stderr to dir/stderr.log.
func demo(t *testing.T, dir, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DOCKET_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		fmt.Sprintf("DOCKET_DEVDB_ADDR=127.0.0.1:%d", localPort(t)),
		fmt.Sprintf("DOCKET_DASHBOARD_PORT=%d", localPort(t)),
		fmt.Sprintf("DOCKET_METRICS_PORT=%d", localPort(t)))
	logf, err := os.Create(filepath.Join(dir, "stderr.log"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = logf.Close() })
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a job of its own, as a shell runs it
	return cmd
}

// waitGone waits for the demo's command to end, then for every process
// of dir to be gone.
func waitGone(t *testing.T, cmd *exec.Cmd, dir string, within time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(within):
		t.Fatalf("the demo did not end within %s; running: %s", within, describe(processesIn(dir)))
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(processesIn(dir)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if left := processesIn(dir); len(left) > 0 {
		log, _ := os.ReadFile(filepath.Join(dir, "stderr.log"))
		t.Fatalf("left running after the demo ended: %s\nstderr:\n%s", describe(left), tail(string(log), 2000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// readUntil reads lines of r until one starts with prefix.
func readUntil(t *testing.T, sc *bufio.Scanner, prefix string) {
	t.Helper()
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			return
		}
	}
	t.Fatalf("the demo's output ended before %q", prefix)
}

// TestMakeRunStopsEverythingWhenItsStdoutCloses: `make run` whose stdout
// reader goes away (`| head -1`; a pipe closed once the demo serves; `|
// tee run.log` then Ctrl-C, which kills tee) stops its workers, dashboard
// and devdb: no process of the demo is left. Before, the script's first
// write to the closed pipe killed it (SIGPIPE) and devdb, in a session of
// its own, ran on.
func TestMakeRunStopsEverythingWhenItsStdoutCloses(t *testing.T) {
	testdb.SkipOnRealMongo(t, "make run's demo, on a devdb of its own")
	t.Parallel()
	if testing.Short() {
		t.Skip("starts devdb, two workers and the dashboard through scripts/run.sh")
	}
	t.Run("head -1", func(t *testing.T) {
		dir := demoDir(t)
		cmd := demo(t, dir, "scripts/run.sh | head -1 >/dev/null")
		require.NoError(t, cmd.Start())
		waitGone(t, cmd, dir, 60*time.Second)
	})
	t.Run("pipe closed while serving", func(t *testing.T) {
		dir := demoDir(t)
		cmd := demo(t, dir, "exec scripts/run.sh")
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		readUntil(t, bufio.NewScanner(out), "== serving ==")
		require.NotEmpty(t, processesIn(dir))
		require.NoError(t, out.Close())
		waitGone(t, cmd, dir, 60*time.Second)
	})
	t.Run("tee then Ctrl-C", func(t *testing.T) {
		dir := demoDir(t)
		cmd := demo(t, dir, "scripts/run.sh | tee run.log")
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		sc := bufio.NewScanner(out)
		readUntil(t, sc, "== processing")
		// Ctrl-C: SIGINT to the terminal's foreground job, the pipeline's
		// process group (devdb has a session of its own).
		require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT))
		go func() {
			for sc.Scan() { // drain until tee is gone
			}
		}()
		waitGone(t, cmd, dir, 60*time.Second)
	})
}
