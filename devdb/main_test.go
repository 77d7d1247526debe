package devdb

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The devdb binary some tests run as a process of its own: built once per
// test binary, without the race detector, and removed by TestMain.
var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		if err := os.RemoveAll(binDir); err != nil {
			fmt.Fprintf(os.Stderr, "devdb: remove the test binary: %v\n", err)
		}
	}
	os.Exit(code)
}

// devdbBinary returns the path of a devdb binary: the one named by
// DOCKET_DEVDB_BIN, or else one built from ./cmd/devdb.
func devdbBinary(t testing.TB) string {
	t.Helper()

	if bin := os.Getenv("DOCKET_DEVDB_BIN"); bin != "" {
		return bin
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "devdb-testbin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "devdb")
		if out, err := exec.Command("go", "build", "-o", binPath, "./cmd/devdb").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/devdb: %w\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}
