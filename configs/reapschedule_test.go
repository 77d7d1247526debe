package configs_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docketq/docket/configs"
	"github.com/stretchr/testify/require"
)

// TestReaperIntervalIsADuration: the reaper's schedule is a duration like
// every other interval, from the file, the environment and a flag.
func TestReaperIntervalIsADuration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("reaper:\n  interval: 2s\n"), 0o600))
	c, err := load(t, nil, "--config", path)
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, c.Client.ReapInterval)
	c, err = load(t, map[string]string{"DOCKET_REAP_INTERVAL": "3s"})
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, c.Client.ReapInterval)
	c, err = load(t, nil, "--reap-interval", "4s")
	require.NoError(t, err)
	require.Equal(t, 4*time.Second, c.Client.ReapInterval)
	_, err = load(t, nil, "--reap-interval", "-1s")
	require.ErrorContains(t, err, "reaper.interval: -1s must be positive")
}

// TestOldReaperScheduleIsRefusedWithItsReplacement: a file or environment
// still setting the old cron key is refused, naming the line and the
// setting to write instead, not ignored nor met with "field not found".
func TestOldReaperScheduleIsRefusedWithItsReplacement(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("worker:\n  concurrency: 3\nreaper:\n  grace: 1s\n  schedule: '@every 30s'\n"), 0o600))
	_, err := load(t, nil, "--config", path)
	require.ErrorContains(t, err, `line 5: reaper.schedule: "@every 30s"`)
	require.ErrorContains(t, err, "write reaper.interval: 30s instead")

	require.NoError(t, os.WriteFile(path, []byte("reaper:\n  schedule: '*/5 * * * *'\n"), 0o600))
	require.ErrorContains(t, configs.LoadFile(path, &configs.Config{}), "replaced by reaper.interval, a duration")

	_, err = load(t, map[string]string{"DOCKET_REAP_SCHEDULE": "@every 1m"})
	require.ErrorContains(t, err, "DOCKET_REAP_SCHEDULE (reaper.schedule)")
	require.ErrorContains(t, err, "write reaper.interval: 1m0s instead")
}
