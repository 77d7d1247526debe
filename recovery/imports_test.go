package recovery_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestEngineImportsNoApplication keeps the engine free of application code:
// no engine package may depend on handlers (the demo application's kinds),
// which contribute their maintenance as recovery.Task values instead.
func TestEngineImportsNoApplication(t *testing.T) {
	t.Parallel()

	engine := []string{".", "./jobs", "./queue", "./worker", "./recovery", "./configs", "./dockettest", "./internal/leadership", "./docketprom/internal/metrics", "./internal/store"}
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, engine...)
	cmd := exec.Command("go", args...)
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/docketq/docket/handlers") {
			t.Errorf("the engine (%s) depends on %s", strings.Join(engine, " "), p)
		}
	}
}
