package configs_test

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docketq/docket/configs"
	"github.com/docketq/docket/docketprom"
	"github.com/docketq/docket/handlers"
	"github.com/stretchr/testify/require"
)

func load(t *testing.T, env map[string]string, args ...string) (configs.Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// The demo kinds' settings, as the worker command reads them.
	return configs.LoadApp(fs, "worker", args, func(k string) string { return env[k] }, &handlers.Config{})
}

func TestDefaults(t *testing.T) {
	c, err := load(t, nil)
	require.NoError(t, err)
	require.Equal(t, "mongodb://127.0.0.1:27017", c.Mongo.URI)
	require.Equal(t, "docket", c.Mongo.DB)
	require.Equal(t, []string{"default"}, c.Client.Queues)
	require.Equal(t, 10, c.Client.Concurrency)
	require.Equal(t, 30*time.Second, c.Client.Lease)
	require.Equal(t, 10*time.Second, c.Client.HeartbeatInterval)
	require.Equal(t, 30*time.Second, c.Client.ShutdownTimeout)
	require.Equal(t, 15*time.Second, c.Client.ReapInterval)
	require.Equal(t, 5*time.Second, c.Client.ReapGrace)
	require.Equal(t, "majority", c.Client.WriteConcern)
	require.Equal(t, "json", c.Log.Format)
	require.NotEmpty(t, c.Client.ID)
}

// TestZeroIsTheDefault: a client setting given as 0, from a file, the
// environment or a flag, takes its default, as in a Go docket.Config.
func TestZeroIsTheDefault(t *testing.T) {
	c, err := load(t, map[string]string{"DOCKET_LEASE": "0s"}, "--concurrency", "0")
	require.NoError(t, err)
	require.Equal(t, 10, c.Client.Concurrency)
	require.Equal(t, 30*time.Second, c.Client.Lease)
	c, err = loadFile(t, "worker:\n  heartbeatInterval: 0s\n", nil)
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, c.Client.HeartbeatInterval)

	// The process's settings and the app's follow the same rule.
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var app handlers.Config
	c, err = configs.LoadApp(fs, "worker", []string{"--mongo-timeout=0", "--queue-stats-interval=0s", "--log-format=", "--tree-keep=0", "--write-timeout=0s"},
		func(string) string { return "" }, &app)
	require.NoError(t, err)
	require.Equal(t, configs.DefaultConnectTimeout, c.Mongo.Timeout)
	require.Equal(t, configs.DefaultWriteTimeout, c.Mongo.WriteTimeout)
	require.Equal(t, docketprom.DefaultQueueStatsInterval, c.HTTP.QueueStatsInterval)
	require.Equal(t, configs.DefaultLogFormat, c.Log.Format)
	require.Equal(t, handlers.TreeSweeperConfig{}.WithDefaults().Keep, app.TreeSweeper.Keep)
}

// TestPrecedence: file < environment < flags.
func TestPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "docket.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
mongo:
  uri: mongodb://file:27017
  db: filedb
worker:
  concurrency: 3
  queues: [a, b]
  lease: 1m
reaper:
  grace: 2s
`), 0o600))
	c, err := load(t, map[string]string{"DOCKET_CONFIG": path, "DOCKET_DB": "envdb", "DOCKET_CONCURRENCY": "7"}, "--concurrency", "9")
	require.NoError(t, err)
	require.Equal(t, "mongodb://file:27017", c.Mongo.URI)
	require.Equal(t, "envdb", c.Mongo.DB)
	require.Equal(t, 9, c.Client.Concurrency)
	require.Equal(t, []string{"a", "b"}, c.Client.Queues)
	require.Equal(t, time.Minute, c.Client.Lease)
	require.Equal(t, 2*time.Second, c.Client.ReapGrace)
	require.Equal(t, 10*time.Second, c.Client.HeartbeatInterval, "unset fields keep their defaults")

	c, err = load(t, map[string]string{"DOCKET_QUEUES": "x, y"}, "--config", path)
	require.NoError(t, err)
	require.Equal(t, []string{"x", "y"}, c.Client.Queues)
}

// TestTheShippedFilesLoad: every YAML file shipped in configs/ (make run
// reads them) loads as a worker's configuration.
func TestTheShippedFilesLoad(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		_, err := load(t, nil, "--config", f)
		require.NoError(t, err, f)
	}
}

func TestErrorsNameTheSettingAndValue(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"DOCKET_CONCURRENCY": "ten"}, nil, `DOCKET_CONCURRENCY (worker.concurrency): "ten": not an integer`},
		{map[string]string{"DOCKET_QUEUES": " , "}, nil, `DOCKET_QUEUES (worker.queues)`},
		{nil, []string{"--concurrency", "-1"}, "worker.concurrency: -1 must be at least 1"},
		{nil, []string{"--lease", "500ms"}, "worker.lease: 500ms must be at least 1s"},
		{nil, []string{"--poll-min", "2s", "--poll-max", "1s"}, "worker.pollMax: 1s must be at least worker.pollMin (2s)"},
		{nil, []string{"--retry-base", "1m", "--retry-max", "1s"}, "queue.retryMax: 1s"},
		{nil, []string{"--db", "a.b"}, `mongo.db: "a.b"`},
		{nil, []string{"--log-level", "loud"}, `log.level: "loud"`},
		{nil, []string{"--reap-grace", "-1s"}, "reaper.grace: -1s"},
		{nil, []string{"--http-addr", "9090"}, `http.addr: "9090" is not host:port`},
		{map[string]string{"DOCKET_HTTP_ADDR": "localhost:http"}, nil, `http.addr: "localhost:http": port "http" is not a number`},
		{nil, []string{"--http-addr", ":9090"}, ""},
		{nil, []string{"--queue-stats-interval", "-1s"}, "http.queueStatsInterval: -1s must be positive"},
		{map[string]string{"DOCKET_MONGO_URI": "mongodb://u:hunter2@h:port/"}, nil, `mongo.uri: "mongodb://u:xxxxx@h:port/`},
	} {
		_, err := load(t, tc.env, tc.args...)
		if tc.want == "" {
			require.NoError(t, err, "%v %v", tc.env, tc.args)
			continue
		}
		require.ErrorContains(t, err, tc.want, "%v %v", tc.env, tc.args)
		require.NotContains(t, err.Error(), "hunter2")
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ uri, want string }{
		{"mongodb://127.0.0.1:27017", "mongodb://127.0.0.1:27017"},
		{"mongodb://user:pw@h:1/db", "mongodb://user:xxxxx@h:1/db"},
		{"mongodb+srv://user:p%40ss@cluster.example.net/?tls=true", "mongodb+srv://user:xxxxx@cluster.example.net/?tls=true"},
		{"mongodb://user@h:1", "mongodb://user@h:1"},
	} {
		require.Equal(t, tc.want, configs.RedactURI(tc.uri))
	}
	require.Equal(t, "auth failed for p@ss", configs.Redact("auth failed for p@ss", "mongodb://h"))
	require.Equal(t, "auth failed for xxxxx", configs.Redact("auth failed for p@ss", "mongodb://u:p%40ss@h"))
}

// TestTheDocumentedExampleIsTheDefaults: configs/docket.yaml claims to list
// every setting at its default; it must equal the defaults, setting by
// setting, so that neither can drift from the other.
// The file holds docket's settings and the demo kinds' (handlers.Config),
// and both parts are checked.
func TestTheDocumentedExampleIsTheDefaults(t *testing.T) {
	var fromFile configs.Config
	var appFromFile handlers.Config
	require.NoError(t, configs.LoadFileApp("docket.yaml", &fromFile, &appFromFile))
	fromFile = fromFile.WithDefaults()
	appFromFile.Defaults()
	defaults := configs.Config{}.WithDefaults()
	var appDefaults handlers.Config
	appDefaults.Defaults()
	// The worker id is random per process unless set; the file leaves it unset.
	fromFile.Client.ID, defaults.Client.ID = "", ""
	require.Empty(t, fromFile.Client.PeriodicJobs, "the example lists no periodic job, only how to write one")
	fromFile.Client.PeriodicJobs = nil
	require.Equal(t, defaults, fromFile)
	require.Equal(t, appDefaults, appFromFile)

	// And the file sets each of them explicitly, rather than leaving them to
	// the defaults: an empty file would pass the check above.
	var raw configs.Config
	var appRaw handlers.Config
	require.NoError(t, configs.LoadFileApp("docket.yaml", &raw, &appRaw))
	raw.Client.ID, raw.Mongo.WriteTimeout = "x", defaults.Mongo.WriteTimeout // documented as derived
	require.Equal(t, raw, raw.WithDefaults(), "docket.yaml leaves a setting to its default instead of listing it")
	appRawDefaults := appRaw
	appRawDefaults.Defaults()
	require.Equal(t, appWithoutLoggers(appRaw), appWithoutLoggers(appRawDefaults), "docket.yaml leaves a demo kind's setting to its default instead of listing it")
}

// A key neither docket nor the app knows is an error naming it and its line.
func TestUnknownKeysAreRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("worker:\n  concurrency: 3\nrenameSweper:\n  schedule: '@every 1m'\n"), 0o600))
	var c configs.Config
	var app handlers.Config
	err := configs.LoadFileApp(path, &c, &app)
	require.ErrorContains(t, err, "line 3")
	require.ErrorContains(t, err, "renameSweper")
	// Without the app, its keys are unknown too.
	require.NoError(t, os.WriteFile(path, []byte("worker:\n  concurrency: 3\nrenameSweeper:\n  schedule: '@every 1m'\n"), 0o600))
	require.ErrorContains(t, configs.LoadFile(path, &c), "renameSweeper")
	require.NoError(t, configs.LoadFileApp(path, &c, &app))
	require.Equal(t, 3, c.Client.Concurrency)
	// A key given twice, where the last would silently win, is refused too.
	require.NoError(t, os.WriteFile(path, []byte("worker:\n  lease: 1m\n  lease: 2m\n"), 0o600))
	require.ErrorContains(t, configs.LoadFile(path, &c), "line 3: worker.lease is set twice (also on line 2)")
	require.Equal(t, "@every 1m", app.RenameSweeper.Schedule)
}

// appWithoutLoggers returns c with the loggers, which no file sets, taken out.
func appWithoutLoggers(c handlers.Config) handlers.Config {
	c.RenameSweeper.Logger, c.TransferRecovery.Logger, c.TreeSweeper.Logger, c.LedgerSweeper.Logger = nil, nil, nil, nil
	return c
}
