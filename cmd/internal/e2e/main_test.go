package e2e

import (
	"testing"

	"github.com/docketq/docket/internal/testdb"

	// The tests run binaries built from these packages (cmd/worker,
	// cmd/enqueue, cmd/internal/testworker); importing them makes go test's
	// cache see a change to them and run the tests again. devdb is in a
	// module of its own: run go test with -count=1 after changing it.
	_ "github.com/docketq/docket/cmd/internal/cli"
)

func TestMain(m *testing.M) { testdb.Main(m) }
