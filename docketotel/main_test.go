package docketotel_test

import (
	"os"
	"testing"

	"github.com/docketq/docket/internal/testdb"
)

func TestMain(m *testing.M) {
	if os.Getenv(inserterEnv) != "" {
		os.Exit(runInserter())
	}
	testdb.Main(m)
}
