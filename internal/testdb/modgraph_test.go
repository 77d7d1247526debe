package testdb

import (
	"os/exec"
	"strings"
	"testing"
)

// TestModuleGraphHasNoFerretDB keeps the embedded server's ~70 module
// requirements out of every user's module graph: FerretDB is required only
// by the devdb module (the devdb directory), which docket's module does not
// import; tests and the bench run devdb as a binary.
func TestModuleGraphHasNoFerretDB(t *testing.T) {
	t.Parallel()

	dir, err := moduleDir(".")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-m", "all")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m all: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(strings.ToLower(line), "ferretdb") {
			t.Errorf("docket's module graph holds %q; only the devdb module may require FerretDB", line)
		}
	}
}
