package devdb

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// overlayTestPackages are FerretDB's packages to which _overlay adds tests
// of its own (they are built inside FerretDB's module, so they run there).
var overlayTestPackages = []string{"github.com/FerretDB/FerretDB/internal/handler/sjson"}

// TestOverlayTests runs the tests of FerretDB's packages as devdb builds
// them (_overlay/workspace.sh), FerretDB's own and those _overlay adds: the
// document decoder's (_overlay/sjson_fast_test.go) among them.
func TestOverlayTests(t *testing.T) {
	t.Parallel()

	work, err := exec.Command(filepath.Join("_overlay", "workspace.sh")).Output()
	require.NoError(t, err, "_overlay/workspace.sh")
	cmd := exec.Command("go", append([]string{"test", "-count=1"}, overlayTestPackages...)...)
	cmd.Env = append(cmd.Environ(), "GOWORK="+strings.TrimSpace(string(work)))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go test of the overlaid packages:\n%s", out)
}
