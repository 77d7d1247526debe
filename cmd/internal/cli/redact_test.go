package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
)

// TestConfigErrorsNeverShowThePassword: a connection string given to a
// setting that is not the URI (DOCKET_DB, --db, DOCKET_LOG_FORMAT,
// DOCKET_WRITE_CONCERN, DOCKET_HTTP_ADDR, a duration, the config file), or
// the configured URI's password put anywhere else, is refused by worker,
// enqueue and docketctl with an error naming the setting and showing no
// password; so is a worker's log line carrying it. (Not parallel: it sets
// the environment.)
func TestConfigErrorsNeverShowThePassword(t *testing.T) {
	commands := map[string]func(args []string, stderr *bytes.Buffer) int{
		"worker": func(args []string, stderr *bytes.Buffer) int {
			return Worker(args, &bytes.Buffer{}, stderr, func(*jobs.Registry, *mongo.Database, *queue.Client, *zap.Logger) error { return nil })
		},
		"enqueue": func(args []string, stderr *bytes.Buffer) int {
			return Enqueue(append([]string{"job"}, args...), strings.NewReader(""), &bytes.Buffer{}, stderr)
		},
		"docketctl": func(args []string, stderr *bytes.Buffer) int {
			return Ctl(append([]string{"stats"}, args...), strings.NewReader(""), &bytes.Buffer{}, stderr)
		},
	}
	type attempt struct {
		name string
		env  map[string]string
		args []string
		file string // the config file's text, %s the URI
		// want is what the message must name.
		want string
		// workerOnly: the setting is the worker's.
		workerOnly bool
	}
	attempts := []attempt{
		{name: "DOCKET_DB", env: map[string]string{"DOCKET_DB": "%s"}, want: "mongo.db"},
		{name: "--db", args: []string{"--db", "%s"}, want: "mongo.db"},
		{name: "DOCKET_LOG_FORMAT", env: map[string]string{"DOCKET_LOG_FORMAT": "%s"}, want: "log.format"},
		{name: "--log-format", args: []string{"--log-format=%s"}, want: "log.format"},
		{name: "DOCKET_LOG_LEVEL", env: map[string]string{"DOCKET_LOG_LEVEL": "%s"}, want: "log.level"},
		{name: "DOCKET_WRITE_CONCERN", env: map[string]string{"DOCKET_WRITE_CONCERN": "%s"}, want: "writeConcern"},
		{name: "DOCKET_MONGO_TIMEOUT", env: map[string]string{"DOCKET_MONGO_TIMEOUT": "%s"}, want: "mongo.timeout"},
		{name: "--mongo-timeout", args: []string{"--mongo-timeout", "%s"}, want: "mongo-timeout"},
		{name: "DOCKET_HTTP_ADDR", env: map[string]string{"DOCKET_HTTP_ADDR": "%s"}, want: "http.addr", workerOnly: true},
		{name: "--lease", args: []string{"--lease", "%s"}, want: "lease", workerOnly: true},
		{name: "config file", file: "mongo:\n  db: '%s'\n", want: "mongo.db"},
		// The configured password alone, in another setting.
		{name: "password in DOCKET_DB", env: map[string]string{"DOCKET_MONGO_URI": "%s", "DOCKET_DB": "%p.x"}, want: "mongo.db"},
		{name: "password in --db", args: []string{"--mongo-uri", "%s", "--db", "%p.x"}, want: "mongo.db"},
		{name: "password in the file's db", file: "mongo:\n  uri: '%s'\n  db: '%p.x'\n", want: "mongo.db"},
		{name: "password in --log-format, URI in the file", file: "mongo:\n  uri: '%s'\n", args: []string{"--log-format", "%p"}, want: "log.format"},
	}
	for _, pw := range []string{"S3cretPw", "p@ss/w0rd:x"} {
		uri := "mongodb://docket:" + pw + "@db1.example.net:27017/?authSource=admin"
		fill := func(s string) string {
			return strings.NewReplacer("%s", uri, "%p", pw).Replace(s)
		}
		for cmd, run := range commands {
			for _, a := range attempts {
				if a.workerOnly && cmd != "worker" {
					continue
				}
				t.Run(pw+"/"+cmd+"/"+a.name, func(t *testing.T) {
					for k, v := range a.env {
						t.Setenv(k, fill(v))
					}
					var args []string
					for _, v := range a.args {
						args = append(args, fill(v))
					}
					if a.file != "" {
						path := filepath.Join(t.TempDir(), "docket.yaml")
						require.NoError(t, os.WriteFile(path, []byte(fill(a.file)), 0o600))
						t.Setenv("DOCKET_CONFIG", path)
					}
					var stderr bytes.Buffer
					code := run(args, &stderr)
					require.Equal(t, 2, code, stderr.String())
					require.Contains(t, stderr.String(), a.want)
					require.NotContains(t, stderr.String(), pw)
					require.NotContains(t, stderr.String(), "w0rd")
				})
			}
		}
		// A log line that carries the URI (here as the worker's id) hides
		// its password too: `worker reap` against nothing logs its failure.
		t.Run(pw+"/worker log line", func(t *testing.T) {
			t.Setenv("DOCKET_WORKER_ID", uri)
			t.Setenv("DOCKET_MONGO_URI", "mongodb://docket:"+pw+"@127.0.0.1:1/?directConnection=true")
			var stderr bytes.Buffer
			code := commands["worker"]([]string{"reap", "--mongo-timeout", "300ms"}, &stderr)
			require.Equal(t, 1, code, stderr.String())
			require.Contains(t, stderr.String(), "reap failed")
			require.Contains(t, stderr.String(), "mongodb://docket:xxxxx@db1.example.net")
			require.NotContains(t, stderr.String(), pw)
			require.NotContains(t, stderr.String(), "w0rd")
		})
	}
}
