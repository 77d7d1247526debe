package configs

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Setting is one configurable value: a key of the file, and unless it is
// only written in a file, an environment variable and a flag. Make one
// with StringSetting, IntSetting, DurationSetting, BoolSetting,
// StringsSetting or FileSetting.
type Setting struct {
	field string // the YAML path, named in errors
	env   string // "" for none
	flag  string // "" for none
	usage string
	value value
}

// value is a setting's value as a flag sets it and as a file gives it.
type value interface {
	flag.Value
	decodeYAML(n *yaml.Node) error
}

// settings lists the settings of c that a process of the given role reads
// from the environment and flags: "worker" gets docket's own,
// DashboardRole the database, logging and the dashboard's, any other
// command the database and logging.
func settings(c *Config, role string) []Setting {
	s := commonSettings(c)
	switch role {
	case DashboardRole:
		return append(s, c.Dashboard.settings()...)
	case "worker":
		return append(s, workerSettings(c)...)
	}
	return s
}

// fileSettings are every key a file may hold, whatever process reads it.
func fileSettings(c *Config) []Setting {
	s := append(commonSettings(c), workerSettings(c)...)
	s = append(s, c.Dashboard.settings()...)
	return append(s,
		Setting{"queue.collection", "", "", "the jobs collection", (*stringValue)(&c.Client.Collection)},
		Setting{"reaper.batch", "", "", "most jobs one reaper pass re-queues", (*intValue)(&c.Client.ReapBatch)},
		Setting{"periodicJobs", "", "", "jobs enqueued on a schedule", (*periodicJobsValue)(&c.Client.PeriodicJobs)},
	)
}

// commonSettings are those every process reads.
func commonSettings(c *Config) []Setting {
	return []Setting{
		{"mongo.uri", "DOCKET_MONGO_URI", "mongo-uri", "MongoDB connection string (TLS and auth through its options)", (*uriValue)(&c.Mongo.URI)},
		{"mongo.db", "DOCKET_DB", "db", "database for jobs and handler data", (*stringValue)(&c.Mongo.DB)},
		{"mongo.timeout", "DOCKET_MONGO_TIMEOUT", "mongo-timeout", "server selection and command timeout", (*durationValue)(&c.Mongo.Timeout)},
		{"mongo.writeTimeout", "DOCKET_WRITE_TIMEOUT", "write-timeout", "longest wait of an operation without a deadline of its own, write concern included (default: 10s, or less with a short lease)", (*durationValue)(&c.Client.WriteTimeout)},
		{"log.format", "DOCKET_LOG_FORMAT", "log-format", "log format: json or console", (*stringValue)(&c.Log.Format)},
		{"log.level", "DOCKET_LOG_LEVEL", "log-level", "lowest level logged: debug, info, warn or error", (*stringValue)(&c.Log.Level)},
		{"queue.writeConcern", "DOCKET_WRITE_CONCERN", "write-concern", "write concern of job state changes: majority or a number", (*stringValue)(&c.Client.WriteConcern)},
	}
}

// workerSettings are those only the worker reads from the environment and
// flags.
func workerSettings(c *Config) []Setting {
	d := &c.Client
	return []Setting{
		{"worker.id", "DOCKET_WORKER_ID", "id", "worker id, unique across machines (default host-pid-random)", (*stringValue)(&d.ID)},
		{"worker.queues", "DOCKET_QUEUES", "queues", "comma-separated queues to serve", (*listValue)(&d.Queues)},
		{"worker.concurrency", "DOCKET_CONCURRENCY", "concurrency", "jobs run at once", (*intValue)(&d.Concurrency)},
		{"worker.lease", "DOCKET_LEASE", "lease", "lease a claim or heartbeat holds a job for", (*durationValue)(&d.Lease)},
		{"worker.heartbeatInterval", "DOCKET_HEARTBEAT_INTERVAL", "heartbeat-interval", "how often a running job's lease is renewed", (*durationValue)(&d.HeartbeatInterval)},
		{"worker.shutdownTimeout", "DOCKET_SHUTDOWN_TIMEOUT", "shutdown-timeout", "how long a stop waits for running jobs", (*durationValue)(&d.ShutdownTimeout)},
		{"worker.pollMin", "DOCKET_POLL_MIN", "poll-min", "first wait after an empty claim", (*durationValue)(&d.PollMin)},
		{"worker.pollMax", "DOCKET_POLL_MAX", "poll-max", "longest wait between claims on an idle queue", (*durationValue)(&d.PollMax)},
		{"worker.stuckGrace", "DOCKET_STUCK_GRACE", "stuck-grace", "how long a handler may run past its timeout, a cancel or a lost lease before the worker gives up on it", (*durationValue)(&d.StuckGrace)},
		{"worker.claimBatch", "DOCKET_CLAIM_BATCH", "claim-batch", "most jobs one claim takes: single claims for a trickle, batches up to this for a backlog (1: one findAndModify per job)", (*intValue)(&d.ClaimBatch)},
		{"worker.prefetch", "DOCKET_PREFETCH", "prefetch", "most jobs held beyond concurrency, claimed ahead while claims are slow compared with jobs (-1: none)", (*intValue)(&d.Prefetch)},
		{"queue.retryBase", "DOCKET_RETRY_BASE", "retry-base", "backoff after a first failed attempt (doubles each attempt)", (*durationValue)(&d.RetryBase)},
		{"queue.retryMax", "DOCKET_RETRY_MAX", "retry-max", "longest backoff between attempts", (*durationValue)(&d.RetryMax)},
		{"reaper.interval", "DOCKET_REAP_INTERVAL", "reap-interval", "how often the reaper runs", (*durationValue)(&d.ReapInterval)},
		{"reaper.grace", "DOCKET_REAP_GRACE", "reap-grace", "how long past expiry a lease is left alone (clock skew); one more lease if its worker still beats", (*durationValue)(&d.ReapGrace)},
		{"reaper.succeededRetention", "DOCKET_SUCCEEDED_RETENTION", "succeeded-retention", "how long succeeded and cancelled jobs are kept (negative: forever)", (*durationValue)(&d.SucceededRetention)},
		{"reaper.deadRetention", "DOCKET_DEAD_RETENTION", "dead-retention", "how long dead jobs are kept (negative: forever, the default)", (*durationValue)(&d.DeadRetention)},
		{"reaper.retentionBudget", "DOCKET_RETENTION_BUDGET", "retention-budget", "longest one pass spends deleting finished jobs", (*durationValue)(&d.RetentionBudget)},
		{"leader.ttl", "DOCKET_LEADER_TTL", "leader-ttl", "maintenance pauses between this and about twice it when the leader dies (at least 3s)", (*durationValue)(&d.LeaderTTL)},
		{"http.addr", "DOCKET_HTTP_ADDR", "http-addr", "host:port serving /metrics, /healthz and /readyz (default: none)", (*stringValue)(&c.HTTP.Addr)},
		{"capacities", "DOCKET_CAPACITIES", "capacities", "queue capacities set at start, QUEUE=N,... (default: none changed)", countsValue{&d.Capacities, &capacitiesForm}},
		{"limits", "DOCKET_LIMITS", "limits", "concurrency limits set at start, kind:KIND=N or queue:QUEUE=N,... (default: none changed)", countsValue{&d.Limits, &limitsForm}},
		{"partitionLimits", "DOCKET_PARTITION_LIMITS", "partition-limits", "concurrency limits per args value set at start, kind:KIND=N per FIELD,... (default: none changed)", (*partitionsValue)(&d.PartitionLimits)},
		{"rates", "DOCKET_RATES", "rates", "rate limits set at start, kind:KIND=N/PERIOD[ burst B] or queue:QUEUE=...,... (default: none changed)", (*ratesValue)(&d.Rates)},
		{"processLimits", "DOCKET_PROCESS_LIMITS", "process-limits", "this process's own concurrency limits, kind:KIND=N or queue:QUEUE=N,... (default: none)", countsValue{&d.ProcessLimits, &processLimitsForm}},
		{"http.queueStatsInterval", "DOCKET_QUEUE_STATS_INTERVAL", "queue-stats-interval", "how often the leader counts jobs per queue and state for /metrics", (*durationValue)(&c.HTTP.QueueStatsInterval)},
	}
}

// Load builds the configuration of a process of the given role ("worker",
// DashboardRole, or any other command such as "enqueue") from, in increasing precedence: defaults, the YAML file
// named by --config or DOCKET_CONFIG, DOCKET_* environment variables, and
// the flags in args. It registers its flags on fs, parses args with it and
// returns the validated configuration. Errors name the setting and value.
func Load(fs *flag.FlagSet, role string, args []string, getenv func(string) string) (Config, error) {
	return LoadApp(fs, role, args, getenv, nil)
}

// App is the configuration an application adds to docket's: its kinds'
// settings (their maintenance schedules, say) under top-level YAML keys of
// its own, read from the same file. Its Settings name every key it reads
// from the file, and its variables and flags; its types need no yaml tags.
type App interface {
	// Defaults sets every unset (zero) field to its default, in place.
	// It runs before the flags, so that --help shows the defaults, and
	// again after them, so that a flag given 0 takes the default too.
	Defaults()
	// Validate reports the first invalid field, naming it and its value.
	Validate() error
	// Settings are the app's keys in the file, and its environment
	// variables and flags, bound to its fields; a process of the "worker"
	// role exposes the variables and flags.
	Settings() []Setting
}

// LoadApp is Load for a process whose application adds the configuration
// app (nil for none): the file may hold app's keys beside docket's (any
// other key is an error), and a "worker" process also reads app's variables
// and flags. app is filled in place, defaults set and validated. A
// setting left out, or 0, takes its default, as in a docket.Config: app's
// Defaults runs again after the flags.
//
// No error, and nothing printed to fs's output (--help, a flag's bad
// value), shows a password: neither that of a connection string given to
// any setting, nor the configured URI's wherever it appears (see
// Redactor). fs's output is left redacting.
func LoadApp(fs *flag.FlagSet, role string, args []string, getenv func(string) string, app App) (c Config, err error) {
	if app != nil {
		if err := checkApp(fileSettings(&c), app); err != nil {
			return c, err // before a flag named twice panics
		}
	}
	red := NewRedactor(getenv("DOCKET_MONGO_URI"))
	if u, ok := flagValue(args, "mongo-uri"); ok {
		red.Add(u)
	}
	defer func() {
		red.Add(c.Mongo.URI)
		err = red.Error(err)
	}()
	fs.SetOutput(red.Writer(fs.Output()))
	path, err := loadFileAndEnv(&c, role, args, getenv, app, red)
	if err != nil {
		return c, err
	}
	setDefaults(&c, app) // before the flags, so that --help shows the defaults
	if err := parseFlags(fs, path, processSettings(&c, role, app), args); err != nil {
		return c, err
	}
	// A setting a flag zeroed takes its default, as from anywhere else;
	// the write timeout follows the final lease.
	setDefaults(&c, app)
	if err := c.Validate(); err != nil {
		return c, err
	}
	if app != nil {
		return c, app.Validate()
	}
	return c, nil
}

// loadFileAndEnv loads into c and app the file that args or getenv name,
// if any, whose path it returns, then the environment's settings; red
// learns the URI each gives.
func loadFileAndEnv(c *Config, role string, args []string, getenv func(string) string, app App, red *Redactor) (string, error) {
	path := getenv("DOCKET_CONFIG")
	if p, ok := flagValue(args, "config"); ok {
		path = p
	}
	if path != "" {
		if err := LoadFileApp(path, c, app); err != nil {
			return path, err
		}
		red.Add(c.Mongo.URI)
	}
	if v := getenv("DOCKET_REAP_SCHEDULE"); v != "" && role == "worker" {
		return path, fmt.Errorf("DOCKET_REAP_SCHEDULE (reaper.schedule): %q: %s", v, reapScheduleReplaced(v))
	}
	if err := setFromEnv(processSettings(c, role, app), getenv); err != nil {
		return path, err
	}
	red.Add(c.Mongo.URI)
	return path, nil
}

// setDefaults sets every zero setting of c, and of app, to its default.
func setDefaults(c *Config, app App) {
	*c = c.WithDefaults()
	if app != nil {
		app.Defaults()
	}
}

// processSettings are the settings of c, and of app, that a process of
// role reads from the environment and flags.
func processSettings(c *Config, role string, app App) []Setting {
	ss := settings(c, role)
	if app != nil && role == "worker" {
		ss = append(ss, app.Settings()...)
	}
	return ss
}

// setFromEnv sets each of ss its environment variable gives.
func setFromEnv(ss []Setting, getenv func(string) string) error {
	for _, s := range ss {
		if s.env == "" {
			continue
		}
		if v := getenv(s.env); v != "" {
			if err := s.value.Set(v); err != nil {
				return fmt.Errorf("%s (%s): %q: %w", s.env, s.field, redactIf(s, v), err)
			}
		}
	}
	return nil
}

// parseFlags registers --config and the flags of ss on fs, and parses args.
func parseFlags(fs *flag.FlagSet, path string, ss []Setting, args []string) error {
	fs.String("config", path, "YAML config file (also DOCKET_CONFIG); see configs/docket.yaml")
	for _, s := range ss {
		if s.flag != "" {
			fs.Var(s.value, s.flag, fmt.Sprintf("%s (%s, %s)", s.usage, s.env, s.field))
		}
	}
	return fs.Parse(args)
}

func redactIf(s Setting, v string) string {
	if _, ok := s.value.(*uriValue); ok {
		return RedactURI(v)
	}
	return v
}

// flagValue finds -name=v, --name=v, -name v or --name v in args.
func flagValue(args []string, name string) (string, bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		trimmed := strings.TrimLeft(a, "-")
		if trimmed == a || len(a)-len(trimmed) > 2 {
			continue
		}
		if v, ok := strings.CutPrefix(trimmed, name+"="); ok {
			return v, true
		}
		if trimmed == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// Getenv is os.Getenv, the environment docket's commands give Load. A
// program of its own passes os.Getenv, or a lookup of its own, to Load.
var Getenv = os.Getenv

type stringValue string

func (v *stringValue) String() string     { return string(*v) }
func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }

// uriValue is a connection string that never shows its password, not even
// as a flag's default in --help.
type uriValue string

func (v *uriValue) String() string     { return RedactURI(string(*v)) }
func (v *uriValue) Set(s string) error { *v = uriValue(s); return nil }

type intValue int

func (v *intValue) String() string { return strconv.Itoa(int(*v)) }
func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("not an integer")
	}
	*v = intValue(n)
	return nil
}

type durationValue time.Duration

func (v *durationValue) String() string { return time.Duration(*v).String() }
func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("not a duration such as 500ms, 30s or 5m")
	}
	*v = durationValue(d)
	return nil
}

type listValue []string

func (v *listValue) String() string { return strings.Join(*v, ",") }
func (v *listValue) Set(s string) error {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return fmt.Errorf("needs at least one name")
	}
	*v = out
	return nil
}

func (v *stringValue) decodeYAML(n *yaml.Node) error   { return n.Decode((*string)(v)) }
func (v *uriValue) decodeYAML(n *yaml.Node) error      { return n.Decode((*string)(v)) }
func (v *intValue) decodeYAML(n *yaml.Node) error      { return n.Decode((*int)(v)) }
func (v *durationValue) decodeYAML(n *yaml.Node) error { return n.Decode((*time.Duration)(v)) }
func (v *listValue) decodeYAML(n *yaml.Node) error     { return n.Decode((*[]string)(v)) }
