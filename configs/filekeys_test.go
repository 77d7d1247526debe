package configs_test

import (
	"testing"
	"time"

	"github.com/docketq/docket/configs"
	"github.com/docketq/docket/handlers"
	"github.com/stretchr/testify/require"
)

// A dotted key is refused: `worker.lease: 50s` beside `worker: {lease:
// 40s}` would set one setting twice, the last silently winning.
func TestDottedKeysAreRefused(t *testing.T) {
	for _, yml := range []string{
		"worker.lease: 50s\n",
		"worker:\n  lease: 40s\nworker.lease: 50s\n",
		"worker:\n  concurrency: 2\n  heartbeat.interval: 1s\n",
	} {
		_, err := loadFile(t, yml, nil)
		require.ErrorContains(t, err, "write a setting's key nested", yml)
	}
}

// A key a mapping gives twice is refused, naming both lines.
func TestKeySetTwiceNamesBothLines(t *testing.T) {
	_, err := loadFile(t, "worker:\n  lease: 40s\nmongo:\n  db: d\nworker:\n  concurrency: 2\n", nil)
	require.ErrorContains(t, err, "line 5: worker is set twice (also on line 1)")
	_, err = loadFile(t, "renameSweeper:\n  schedule: '@every 1m'\n  schedule: '@every 2m'\n", nil)
	require.ErrorContains(t, err, "line 3: renameSweeper.schedule is set twice (also on line 2)")
}

// Merge keys (<<: *base) read as yaml.v3 reads them: the merged keys, the
// mapping's own winning, an earlier merged mapping's over a later one's;
// a merged key that is no setting there is refused as any other.
func TestMergeKeys(t *testing.T) {
	var c configs.Config
	var app handlers.Config
	require.NoError(t, loadFileApp(t, `
renameSweeper: &sweep
  schedule: "@every 1m"
  threshold: 2m
transferRecovery:
  <<: *sweep
  threshold: 45s
ledgerSweeper:
  <<: [{threshold: 3m}, *sweep]
periodicJobs:
  - &nightly {name: a, schedule: "@daily", kind: noop, queue: reports, priority: 2}
  - <<: *nightly
    name: b
<<: {mongo: {db: merged}}
`, &c, &app))
	require.Equal(t, "merged", c.Mongo.DB)
	jobs := c.Client.PeriodicJobs
	require.Len(t, jobs, 2)
	require.Equal(t, []any{"b", "@daily", "noop", "reports", 2}, []any{jobs[1].Name, jobs[1].Schedule, jobs[1].Args.Kind(), jobs[1].Queue, jobs[1].Priority})
	require.Equal(t, []any{"@every 1m", 45 * time.Second}, []any{app.TransferRecovery.Schedule, app.TransferRecovery.Threshold})
	require.Equal(t, []any{"@every 1m", 3 * time.Minute}, []any{app.LedgerSweeper.Schedule, app.LedgerSweeper.Threshold})

	for yml, want := range map[string]string{
		"mongo: &m {db: x}\nworker: {<<: *m}\n":                          "worker.db is not a setting",
		"periodicJobs:\n  - {name: a, args: &j {nope: 1}}\n  - <<: *j\n": "nope is not a periodic job's key",
		"worker: &w {<<: *w}\n":                                          "line 1: << merges a mapping that contains it",
		"worker: {<<: 5}\n":                                              "line 1: << must merge a mapping or a list of mappings",
		"worker: {<<: [{lease: 1s}, 5]}\n":                               "line 1: << must merge a mapping or a list of mappings",
	} {
		require.ErrorContains(t, loadFileApp(t, yml, &c, nil), want, yml)
	}
}

// loadFileApp writes yml to a file and loads it into c and app.
func loadFileApp(t *testing.T, yml string, c *configs.Config, app configs.App) error {
	t.Helper()
	return configs.LoadFileApp(writeFile(t, yml), c, app)
}
