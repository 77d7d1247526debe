package configs_test

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/configs"
	"github.com/docketq/docket/handlers"
	"github.com/stretchr/testify/require"
)

// documented is a setting of docs/CONFIGURATION.md as a test sets it:
// its value as YAML text and as a variable or flag gives it, the value it
// must reach, and where that lands.
type documented struct {
	yaml, text string
	want       any
	got        func(c configs.Config, app handlers.Config) any
}

func client(f func(d docket.Config) any) func(configs.Config, handlers.Config) any {
	return func(c configs.Config, _ handlers.Config) any { return f(c.Client) }
}

func app(f func(a handlers.Config) any) func(configs.Config, handlers.Config) any {
	return func(_ configs.Config, a handlers.Config) any { return f(a) }
}

func proc(f func(c configs.Config) any) func(configs.Config, handlers.Config) any {
	return func(c configs.Config, _ handlers.Config) any { return f(c) }
}

// documentedSettings are every setting the reference documents, by key.
var documentedSettings = map[string]documented{
	"mongo.uri":                  {"mongodb://h1:27018", "mongodb://h1:27018", "mongodb://h1:27018", proc(func(c configs.Config) any { return c.Mongo.URI })},
	"mongo.db":                   {"d1", "d1", "d1", proc(func(c configs.Config) any { return c.Mongo.DB })},
	"mongo.timeout":              {"11s", "11s", 11 * time.Second, proc(func(c configs.Config) any { return c.Mongo.Timeout })},
	"mongo.writeTimeout":         {"4s", "4s", 4 * time.Second, client(func(d docket.Config) any { return d.WriteTimeout })},
	"log.format":                 {"console", "console", "console", proc(func(c configs.Config) any { return c.Log.Format })},
	"log.level":                  {"debug", "debug", "debug", proc(func(c configs.Config) any { return c.Log.Level })},
	"queue.collection":           {"jobs2", "jobs2", "jobs2", client(func(d docket.Config) any { return d.Collection })},
	"queue.writeConcern":         {"1", "1", "1", client(func(d docket.Config) any { return d.WriteConcern })},
	"queue.retryBase":            {"2s", "2s", 2 * time.Second, client(func(d docket.Config) any { return d.RetryBase })},
	"queue.retryMax":             {"2h", "2h", 2 * time.Hour, client(func(d docket.Config) any { return d.RetryMax })},
	"worker.id":                  {"w1", "w1", "w1", client(func(d docket.Config) any { return d.ID })},
	"worker.queues":              {"[a, b]", "a,b", []string{"a", "b"}, client(func(d docket.Config) any { return d.Queues })},
	"worker.concurrency":         {"7", "7", 7, client(func(d docket.Config) any { return d.Concurrency })},
	"worker.lease":               {"45s", "45s", 45 * time.Second, client(func(d docket.Config) any { return d.Lease })},
	"worker.heartbeatInterval":   {"9s", "9s", 9 * time.Second, client(func(d docket.Config) any { return d.HeartbeatInterval })},
	"worker.shutdownTimeout":     {"31s", "31s", 31 * time.Second, client(func(d docket.Config) any { return d.ShutdownTimeout })},
	"worker.pollMin":             {"60ms", "60ms", 60 * time.Millisecond, client(func(d docket.Config) any { return d.PollMin })},
	"worker.pollMax":             {"2s", "2s", 2 * time.Second, client(func(d docket.Config) any { return d.PollMax })},
	"worker.claimBatch":          {"17", "17", 17, client(func(d docket.Config) any { return d.ClaimBatch })},
	"worker.prefetch":            {"8", "8", 8, client(func(d docket.Config) any { return d.Prefetch })},
	"worker.stuckGrace":          {"11s", "11s", 11 * time.Second, client(func(d docket.Config) any { return d.StuckGrace })},
	"reaper.interval":            {"16s", "16s", 16 * time.Second, client(func(d docket.Config) any { return d.ReapInterval })},
	"reaper.grace":               {"6s", "6s", 6 * time.Second, client(func(d docket.Config) any { return d.ReapGrace })},
	"reaper.batch":               {"501", "501", 501, client(func(d docket.Config) any { return d.ReapBatch })},
	"reaper.succeededRetention":  {"25h", "25h", 25 * time.Hour, client(func(d docket.Config) any { return d.SucceededRetention })},
	"reaper.deadRetention":       {"48h", "48h", 48 * time.Hour, client(func(d docket.Config) any { return d.DeadRetention })},
	"reaper.retentionBudget":     {"21s", "21s", 21 * time.Second, client(func(d docket.Config) any { return d.RetentionBudget })},
	"leader.ttl":                 {"16s", "16s", 16 * time.Second, client(func(d docket.Config) any { return d.LeaderTTL })},
	"periodicJobs":               {`[{name: n, schedule: "@hourly", kind: noop}]`, "", "n @hourly noop", client(periodicSummary)},
	"capacities":                 {"{q: 5}", "q=5", map[string]int{"q": 5}, client(func(d docket.Config) any { return d.Capacities })},
	"limits":                     {`{"kind:k": 3}`, "kind:k=3", map[string]int{"kind:k": 3}, client(func(d docket.Config) any { return d.Limits })},
	"partitionLimits":            {`{"kind:k": "2 per c"}`, "kind:k=2 per c", map[string]docket.PartitionLimit{"kind:k": {N: 2, By: "c"}}, client(func(d docket.Config) any { return d.PartitionLimits })},
	"rates":                      {`{"kind:k": "3/s"}`, "kind:k=3/s", map[string]docket.Rate{"kind:k": {N: 3, Per: time.Second}}, client(func(d docket.Config) any { return d.Rates })},
	"processLimits":              {`{"kind:k": 2}`, "kind:k=2", map[string]int{"kind:k": 2}, client(func(d docket.Config) any { return d.ProcessLimits })},
	"http.addr":                  {`":9091"`, ":9091", ":9091", proc(func(c configs.Config) any { return c.HTTP.Addr })},
	"http.queueStatsInterval":    {"16s", "16s", 16 * time.Second, proc(func(c configs.Config) any { return c.HTTP.QueueStatsInterval })},
	"renameSweeper.schedule":     {`"@every 31s"`, "@every 31s", "@every 31s", app(func(a handlers.Config) any { return a.RenameSweeper.Schedule })},
	"renameSweeper.threshold":    {"2m", "2m", 2 * time.Minute, app(func(a handlers.Config) any { return a.RenameSweeper.Threshold })},
	"renameSweeper.batch":        {"501", "501", 501, app(func(a handlers.Config) any { return a.RenameSweeper.Batch })},
	"transferRecovery.schedule":  {`"@every 16s"`, "@every 16s", "@every 16s", app(func(a handlers.Config) any { return a.TransferRecovery.Schedule })},
	"transferRecovery.threshold": {"31s", "31s", 31 * time.Second, app(func(a handlers.Config) any { return a.TransferRecovery.Threshold })},
	"transferRecovery.batch":     {"502", "502", 502, app(func(a handlers.Config) any { return a.TransferRecovery.Batch })},
	"treeSweeper.schedule":       {`"@every 2m"`, "@every 2m", "@every 2m", app(func(a handlers.Config) any { return a.TreeSweeper.Schedule })},
	"treeSweeper.keep":           {"6", "6", 6, app(func(a handlers.Config) any { return a.TreeSweeper.Keep })},
	"ledgerSweeper.schedule":     {`"@every 11s"`, "@every 11s", "@every 11s", app(func(a handlers.Config) any { return a.LedgerSweeper.Schedule })},
	"ledgerSweeper.threshold":    {"2m", "2m", 2 * time.Minute, app(func(a handlers.Config) any { return a.LedgerSweeper.Threshold })},
	"ledgerSweeper.batch":        {"1001", "1001", 1001, app(func(a handlers.Config) any { return a.LedgerSweeper.Batch })},
	"dashboard.hosts":            {"[d.example.com]", "d.example.com", []string{"d.example.com"}, proc(func(c configs.Config) any { return c.Dashboard.Hosts })},
	"dashboard.tlsCert":          {"c.pem", "c.pem", "c.pem", proc(func(c configs.Config) any { return c.Dashboard.TLSCert })},
	"dashboard.tlsKey":           {"k.pem", "k.pem", "k.pem", proc(func(c configs.Config) any { return c.Dashboard.TLSKey })},
	"dashboard.plainHTTP":        {"true", "true", true, proc(func(c configs.Config) any { return c.Dashboard.PlainHTTP })},
}

func periodicSummary(d docket.Config) any {
	if len(d.PeriodicJobs) != 1 {
		return d.PeriodicJobs
	}
	p := d.PeriodicJobs[0]
	return fmt.Sprintf("%s %s %s", p.Name, p.Schedule, p.Args.Kind())
}

// referenceRow is a row of a reference table: `key` | `VAR` or — | `--flag` or —.
var referenceRow = regexp.MustCompile("^\\| `([^`]+)` \\| (?:`([A-Z_]+)`|—) \\| (?:`--([a-z-]+)`|—) \\|")

// TestEveryDocumentedSettingDecodes: docs/CONFIGURATION.md is the
// contract. Each setting its reference lists reaches the same field from
// the file under its key, from its variable and from its flag, and every
// setting the test knows is documented.
func TestEveryDocumentedSettingDecodes(t *testing.T) {
	b, err := os.ReadFile("../docs/CONFIGURATION.md")
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		m := referenceRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		key, env, flagName := m[1], m[2], m[3]
		s, ok := documentedSettings[key]
		require.True(t, ok, "docs/CONFIGURATION.md documents %s, which this test does not know", key)
		seen[key] = true
		role := "worker"
		if strings.HasPrefix(key, "dashboard.") {
			role = configs.DashboardRole
		}
		c, a := loadAs(t, role, nil, "--config", writeKey(t, key, s.yaml))
		require.Equal(t, s.want, s.got(c, a), "%s in a file", key)
		if env != "" {
			c, a = loadAs(t, role, map[string]string{env: s.text})
			require.Equal(t, s.want, s.got(c, a), "%s as %s", key, env)
		}
		if flagName != "" {
			c, a = loadAs(t, role, nil, "--"+flagName, s.text)
			require.Equal(t, s.want, s.got(c, a), "%s as --%s", key, flagName)
		}
	}
	for key := range documentedSettings {
		require.True(t, seen[key], "%s is not in docs/CONFIGURATION.md's reference", key)
	}
}

// loadAs loads the configuration of a process of role, with the demo
// kinds' settings.
func loadAs(t *testing.T, role string, env map[string]string, args ...string) (configs.Config, handlers.Config) {
	t.Helper()
	fs := flag.NewFlagSet(role, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var a handlers.Config
	c, err := configs.LoadApp(fs, role, args, func(k string) string { return env[k] }, &a)
	require.NoError(t, err, "%v %v", env, args)
	return c, a
}

// writeKey writes a file setting key (a.b) to the YAML text value.
func writeKey(t *testing.T, key, value string) string {
	text := key + ": " + value + "\n"
	if section, name, ok := strings.Cut(key, "."); ok {
		text = section + ":\n  " + name + ": " + value + "\n"
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}
