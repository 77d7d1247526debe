package e2e

import (
	"testing"

	"github.com/docketq/docket/internal/testdb"

	// The tests run binaries built from these packages (cmd/worker,
	// cmd/enqueue, internal/testworker, cmd/devdb); importing them makes
	// go test's cache see a change to them and run the tests again.
	_ "github.com/docketq/docket/internal/cli"
	_ "github.com/docketq/docket/internal/devdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }
