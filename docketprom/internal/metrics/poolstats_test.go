package metrics_test

import (
	"testing"

	"github.com/docketq/docket/docketprom/internal/metrics"
	"github.com/docketq/docket/worker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestPoolStatsAreReadAtEachScrape(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	var s worker.Stats
	require.NoError(t, metrics.RegisterPoolStats(reg, func() worker.Stats { return s }))
	read := func() map[string]float64 {
		fams, err := reg.Gather()
		require.NoError(t, err)
		out := map[string]float64{}
		for _, f := range fams {
			out[f.GetName()] = f.GetMetric()[0].GetCounter().GetValue()
		}
		return out
	}
	require.Equal(t, map[string]float64{"docket_stuck_handlers_total": 0, "docket_jobs_released_unstarted_total": 0, "docket_progress_reports_total": 0}, read())
	s = worker.Stats{StuckHandlers: 2, ReleasedUnstarted: 5, ProgressReports: 7}
	require.Equal(t, map[string]float64{"docket_stuck_handlers_total": 2, "docket_jobs_released_unstarted_total": 5, "docket_progress_reports_total": 7}, read())
}
