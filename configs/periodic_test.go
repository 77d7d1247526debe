package configs_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/docketq/docket/configs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// The file's periodic jobs reach a docket.Client as args of the file's
// kind that encode to the file's mapping ({} when it gives none).
func TestClientPeriodicJobs(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "docket.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`periodicJobs:
  - {name: a, schedule: "@every 1s", kind: record, args: {n: 1, s: x}, queue: ticks, priority: 2, maxAttempts: 3}
  - {name: b, schedule: "@hourly", kind: noop}
`), 0o600))
	var c configs.Config
	require.NoError(t, configs.LoadFile(path, &c))
	list := c.Client.PeriodicJobs
	require.Len(t, list, 2)

	a := list[0]
	require.Equal(t, []any{"a", "@every 1s", "record", "ticks", 2, 3}, []any{a.Name, a.Schedule, a.Args.Kind(), a.Queue, a.Priority, a.MaxAttempts})
	raw, err := bson.Marshal(a.Args)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, bson.Unmarshal(raw, &doc))
	require.Equal(t, map[string]any{"n": int32(1), "s": "x"}, doc)

	raw, err = bson.Marshal(list[1].Args)
	require.NoError(t, err)
	require.Equal(t, "noop", list[1].Args.Kind())
	require.Equal(t, bson.Raw{5, 0, 0, 0, 0}, bson.Raw(raw))
}

// A periodic job given as an alias (*job) is checked as any other: a key
// no periodic job has is refused, not dropped.
func TestPeriodicJobAliasIsChecked(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "docket.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`periodicJobs:
  - {name: a, schedule: "@hourly", kind: noop, args: {next: &j {name: b, schedule: "@daily", kind: noop, nope: 1}}}
  - *j
`), 0o600))
	var c configs.Config
	require.ErrorContains(t, configs.LoadFile(path, &c), "periodicJobs[1]: line 2: nope is not a periodic job's key")
	require.NoError(t, os.WriteFile(path, []byte("periodicJobs: [5]\n"), 0o600))
	require.ErrorContains(t, configs.LoadFile(path, &c), "periodicJobs[0]: line 1: must be a mapping")
}
