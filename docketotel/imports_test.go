package docketotel_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A program that embeds docket without tracing imports no OpenTelemetry:
// only docketotel does.
func TestOnlyDocketotelImportsOpenTelemetry(t *testing.T) {
	t.Parallel()
	pkgs := []string{"github.com/docketq/docket", "github.com/docketq/docket/jobs", "github.com/docketq/docket/queue",
		"github.com/docketq/docket/worker", "github.com/docketq/docket/cmd/worker", "github.com/docketq/docket/cmd/enqueue"}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		require.False(t, strings.HasPrefix(dep, "go.opentelemetry.io/"), "%s is imported", dep)
	}
}
