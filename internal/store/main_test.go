package store_test

import (
	"testing"

	"github.com/docketq/docket/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }
