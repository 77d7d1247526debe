package docket_test

import (
	"testing"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
)

// TestConfigProcessLimitsAreChecked: NewClient refuses a process limit
// whose name does not read as Config.Limits' names do, or whose value is
// not at least 1, naming Config.ProcessLimits and the entry; valid ones
// make a client.
func TestConfigProcessLimitsAreChecked(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	for _, c := range []struct {
		limits map[string]int
		want   string
	}{
		{map[string]int{docket.KindLimit("resize"): 0}, `Config.ProcessLimits["kind:resize"]: 0 must be from 1 to 10000`},
		{map[string]int{docket.QueueLimit("bulk"): -1}, `Config.ProcessLimits["queue:bulk"]: -1 must be from 1`},
		{map[string]int{docket.KindLimit("resize"): 1_000_000}, `Config.ProcessLimits["kind:resize"]: 1000000`},
		{map[string]int{"resize": 2}, "Config.ProcessLimits: "},
		{map[string]int{"kind:": 2}, "Config.ProcessLimits: "},
	} {
		_, err := docket.NewClient(db, docket.Config{ProcessLimits: c.limits})
		require.ErrorContains(t, err, c.want, c.limits)
		require.NotContains(t, err.Error(), "worker.", "named as Config's field: %v", c.limits)
	}
	_, err := docket.NewClient(db, docket.Config{ProcessLimits: map[string]int{
		docket.KindLimit("resize"): 2, docket.QueueLimit("bulk"): 1,
	}})
	require.NoError(t, err)
}
