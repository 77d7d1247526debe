package devdb

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCommandGCPercent checks that the devdb command runs Go's garbage
// collector at GOGC=400 (a fifth less CPU under a burn-down) unless GOGC is
// set, which it then keeps, and says which in its listening line.
func TestCommandGCPercent(t *testing.T) {
	t.Parallel()

	for _, c := range []struct {
		env  string
		want float64
	}{{"", 400}, {"GOGC=150", 150}} {
		cmd := exec.Command(devdbBinary(t), "--addr", "127.0.0.1:0", "--dir", t.TempDir())
		cmd.Env = slices.DeleteFunc(cmd.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOGC=") })
		if c.env != "" {
			cmd.Env = append(cmd.Env, c.env)
		}
		require.Equal(t, c.want, listeningLine(t, cmd)["gc_percent"], "GOGC %q", c.env)
	}
}

// listeningLine starts cmd, a devdb command, and returns its "devdb
// listening" log line; the command is killed when the test ends.
func listeningLine(t *testing.T, cmd *exec.Cmd) map[string]any {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) == nil && l["msg"] == "devdb listening" {
			return l
		}
	}
	t.Fatalf("devdb ended without logging that it listens: %v", sc.Err())
	return nil
}
