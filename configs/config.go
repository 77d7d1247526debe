package configs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/docketq/docket/docketprom"
	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/docketq/docket/worker"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"gopkg.in/yaml.v3"
)

// Defaults for MongoConfig and LogConfig.
const (
	// DefaultMongoURI is the server docket connects to: devdb's default
	// address, or a local MongoDB.
	DefaultMongoURI = "mongodb://127.0.0.1:27017"
	// DefaultDB is the database holding jobs and handler data.
	DefaultDB = "docket"
	// DefaultConnectTimeout bounds server selection and each operation of a
	// one-shot command such as enqueue.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultWriteTimeout is the longest an operation without a deadline of
	// its own waits, including for its write concern, unless the worker's
	// lease asks for less (see MongoConfig.WriteTimeout).
	DefaultWriteTimeout = 10 * time.Second
	// DefaultLogFormat is the log encoding.
	DefaultLogFormat = "json"
	// DefaultLogLevel is the lowest level logged.
	DefaultLogLevel = "info"
)

// Config is the whole configuration of a docket process.
type Config struct {
	Mongo  MongoConfig           `yaml:"mongo"`
	Queue  queue.Config          `yaml:"queue"`
	Worker worker.Config         `yaml:"worker"`
	Reaper recovery.ReaperConfig `yaml:"reaper"`
	// Leader elects the one worker process that runs maintenance.
	Leader LeaderConfig `yaml:"leader"`
	// PeriodicJobs are enqueued on their schedules by the leader.
	PeriodicJobs []recovery.PeriodicJob `yaml:"periodicJobs"`
	// Capacities bounds queues; each worker sets them at start. Defaults
	// to none: no queue's capacity is changed.
	Capacities Capacities `yaml:"capacities"`
	// Limits bound how many jobs of a kind or a queue run at once across
	// every worker; each worker sets them at start. Defaults to none: no
	// limit is changed.
	Limits Limits `yaml:"limits"`
	// PartitionLimits bound how many jobs of a kind or a queue run at once
	// per value of an args field, across every worker; each worker sets
	// them at start. Defaults to none: no partition limit is changed.
	PartitionLimits PartitionLimits `yaml:"partitionLimits"`
	// Rates bound how many jobs of a kind or a queue start per period
	// across every worker; each worker sets them at start. Defaults to
	// none: no rate is changed.
	Rates Rates `yaml:"rates"`
	// ProcessLimits bound how many jobs of a kind or a queue this process
	// holds at once, whatever the other processes hold; kept in the
	// process, never shared. Defaults to none.
	ProcessLimits ProcessLimits `yaml:"processLimits"`
	// HTTP serves the worker's metrics and health probes.
	HTTP HTTPConfig `yaml:"http"`
	Log  LogConfig  `yaml:"log"`
	// Dashboard is what `docketctl dashboard` trusts.
	Dashboard DashboardConfig `yaml:"dashboard"`
}

// HTTPConfig configures the worker's HTTP server: Prometheus metrics on
// /metrics, Kubernetes probes on /healthz and /readyz.
type HTTPConfig struct {
	// Addr is the host:port to listen on (":9090" for every interface).
	// Defaults to "": no server.
	Addr string `yaml:"addr"`
	// QueueStatsInterval is how often the elected leader counts the jobs
	// per queue and state for the metrics. Defaults to
	// docketprom.DefaultQueueStatsInterval.
	QueueStatsInterval time.Duration `yaml:"queueStatsInterval"`
}

// MongoConfig says which server and database to use.
type MongoConfig struct {
	// URI is a MongoDB connection string; TLS and authentication are set
	// with its standard options. Defaults to DefaultMongoURI.
	URI string `yaml:"uri"`
	// DB is the database. Defaults to DefaultDB.
	DB string `yaml:"db"`
	// Timeout bounds server selection and one-shot commands. Defaults to
	// DefaultConnectTimeout.
	Timeout time.Duration `yaml:"timeout"`
	// WriteTimeout bounds every operation that has no deadline of its own,
	// and with it how long a write waits for its write concern: with a
	// lost majority, a "majority" write otherwise waits forever. The
	// driver sends the remaining time as maxTimeMS, which MongoDB applies
	// to the write-concern wait too (error MaxTimeMSExpired), and gives up
	// client-side at the same deadline. It must be shorter than
	// worker.lease minus worker.heartbeatInterval, so that a heartbeat's
	// outcome is known before the lease it renews lapses. Defaults to the
	// smaller of DefaultWriteTimeout and half of that difference.
	WriteTimeout time.Duration `yaml:"writeTimeout"`
	// WriteTimeoutAuto is true when WriteTimeout was not set and took its
	// default: the worker's heartbeats and completions then follow the
	// lease alone (each may wait for as long as the lease it renews or
	// ends still holds), where a WriteTimeout that was set bounds them too.
	WriteTimeoutAuto bool `yaml:"-"`
}

// LeaderConfig configures the election of the worker process that runs
// maintenance (the reaper, retention, the sweepers, periodic jobs).
type LeaderConfig struct {
	// TTL is how long a leader that stopped renewing keeps the lease: the
	// longest maintenance pauses when the leader dies. Defaults to
	// leadership.DefaultTTL; at least 3 s.
	TTL time.Duration `yaml:"ttl"`
}

// LogConfig says how to log.
type LogConfig struct {
	// Format is "json" or "console". Defaults to DefaultLogFormat.
	Format string `yaml:"format"`
	// Level is "debug", "info", "warn" or "error". Defaults to
	// DefaultLogLevel.
	Level string `yaml:"level"`
}

// WithDefaults returns c with every unset field of every component set to
// its default.
func (c Config) WithDefaults() Config {
	if c.Mongo.URI == "" {
		c.Mongo.URI = DefaultMongoURI
	}
	if c.Mongo.DB == "" {
		c.Mongo.DB = DefaultDB
	}
	if c.Mongo.Timeout == 0 {
		c.Mongo.Timeout = DefaultConnectTimeout
	}
	if c.Log.Format == "" {
		c.Log.Format = DefaultLogFormat
	}
	if c.Log.Level == "" {
		c.Log.Level = DefaultLogLevel
	}
	c.Queue = c.Queue.WithDefaults()
	c.Worker = c.Worker.WithDefaults()
	if c.Mongo.WriteTimeout == 0 {
		c.Mongo.WriteTimeout = autoWriteTimeout(c.Worker)
		c.Mongo.WriteTimeoutAuto = true
	}
	c.Reaper = c.Reaper.WithDefaults()
	if c.Leader.TTL == 0 {
		c.Leader.TTL = leadership.DefaultTTL
	}
	if c.HTTP.QueueStatsInterval == 0 {
		c.HTTP.QueueStatsInterval = docketprom.DefaultQueueStatsInterval
	}
	return c
}

// Validate reports the first invalid setting, naming it and its value.
func (c Config) Validate() error {
	if err := c.Mongo.Validate(); err != nil {
		return err
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		return fmt.Errorf("log.format: %q must be \"json\" or \"console\"", c.Log.Format)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level: %q must be debug, info, warn or error", c.Log.Level)
	}
	if err := c.Queue.Validate(); err != nil {
		return err
	}
	if err := c.Worker.Validate(); err != nil {
		return err
	}
	if limit := c.Worker.Lease - c.Worker.HeartbeatInterval; c.Mongo.WriteTimeout >= limit {
		return fmt.Errorf("mongo.writeTimeout: %s must be shorter than worker.lease minus worker.heartbeatInterval (%s - %s = %s), so that a heartbeat that times out does so before the lease it renews lapses",
			c.Mongo.WriteTimeout, c.Worker.Lease, c.Worker.HeartbeatInterval, limit)
	}
	if err := c.Reaper.Validate(); err != nil {
		return err
	}
	if c.Leader.TTL < leadership.MinTTL {
		return fmt.Errorf("leader.ttl: %s must be at least %s", c.Leader.TTL, leadership.MinTTL)
	}
	if err := recovery.ValidatePeriodicJobs(c.PeriodicJobs); err != nil {
		return fmt.Errorf("periodicJobs: %w", err)
	}
	if err := c.Capacities.Validate(); err != nil {
		return err
	}
	if err := c.Limits.Validate(); err != nil {
		return err
	}
	if err := c.Rates.Validate(); err != nil {
		return err
	}
	if err := c.PartitionLimits.Validate(); err != nil {
		return err
	}
	if err := c.ProcessLimits.Validate(); err != nil {
		return err
	}
	return c.HTTP.Validate()
}

// Validate checks the address and the interval.
func (h HTTPConfig) Validate() error {
	if h.Addr != "" {
		_, port, err := net.SplitHostPort(h.Addr)
		if err != nil {
			return fmt.Errorf("http.addr: %q is not host:port, such as 127.0.0.1:9090 or :9090", h.Addr)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("http.addr: %q: port %q is not a number from 0 to 65535", h.Addr, port)
		}
	}
	if h.QueueStatsInterval <= 0 {
		return fmt.Errorf("http.queueStatsInterval: %s must be positive", h.QueueStatsInterval)
	}
	return nil
}

// Validate checks the URI, the database name and the timeout.
func (m MongoConfig) Validate() error {
	if !strings.HasPrefix(m.URI, "mongodb://") && !strings.HasPrefix(m.URI, "mongodb+srv://") {
		return fmt.Errorf("mongo.uri: %q must start with mongodb:// or mongodb+srv://", RedactURI(m.URI))
	}
	if err := options.Client().ApplyURI(m.URI).Validate(); err != nil {
		return fmt.Errorf("mongo.uri: %q: %s", RedactURI(m.URI), Redact(err.Error(), m.URI))
	}
	if m.DB == "" || strings.ContainsAny(m.DB, "/\\. \"$") {
		return fmt.Errorf("mongo.db: %q is not a valid database name", m.DB)
	}
	if m.Timeout <= 0 {
		return fmt.Errorf("mongo.timeout: %s must be positive", m.Timeout)
	}
	if m.WriteTimeout <= 0 {
		return fmt.Errorf("mongo.writeTimeout: %s must be positive", m.WriteTimeout)
	}
	return nil
}

// autoWriteTimeout is MongoConfig.WriteTimeout's default for worker w:
// DefaultWriteTimeout, or half of what the lease leaves past one heartbeat
// interval when that is less, so that a heartbeat timing out leaves time
// for the next one. w must have its defaults.
func autoWriteTimeout(w worker.Config) time.Duration {
	if half := (w.Lease - w.HeartbeatInterval) / 2; half > 0 && half < DefaultWriteTimeout {
		return half
	}
	return DefaultWriteTimeout
}

// ClientOptions returns the driver options for the configured server.
// WriteTimeout is the client's operation timeout (timeoutMS): mongo-driver
// v2 has no wtimeout, and bounds an operation, its write-concern wait
// included, by its context's deadline or else by this timeout. Reads go to
// the primary whatever readPreference the URI names: every read a docket
// process makes (a batch claim's read-back, a unique key's holder, the
// accounts and transaction a transfer loads) must see its own writes.
func (m MongoConfig) ClientOptions() *options.ClientOptions {
	o := options.Client().ApplyURI(m.URI).
		SetServerSelectionTimeout(m.Timeout).
		SetConnectTimeout(m.Timeout).
		SetReadPreference(readpref.Primary()).
		SetAppName("docket")
	if m.WriteTimeout > 0 {
		o.SetTimeout(m.WriteTimeout)
	}
	return o
}

// LoadFile reads the YAML file at path into c, leaving settings the file
// does not name as they were. Unknown keys are errors.
func LoadFile(path string, c *Config) error {
	return LoadFileApp(path, c, nil)
}

// LoadFileApp is LoadFile for a file that may also hold app's keys (nil
// for none): both are decoded from the one document, strictly, so a key
// that neither docket nor app knows is an error naming its line.
func LoadFileApp(path string, c *Config, app App) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	// Decode into one struct that inlines docket's Config and the app's,
	// so the decoder knows every key and reports lines as written.
	target := reflect.ValueOf(c)
	if app != nil {
		av := reflect.ValueOf(app)
		if av.Kind() != reflect.Pointer || av.Elem().Kind() != reflect.Struct {
			return fmt.Errorf("configs: the app's configuration must be a pointer to a struct, not %T", app)
		}
		both := reflect.New(reflect.StructOf([]reflect.StructField{
			{Name: "Docket", Type: target.Elem().Type(), Tag: `yaml:",inline"`},
			{Name: "App", Type: av.Elem().Type(), Tag: `yaml:",inline"`},
		}))
		both.Elem().Field(0).Set(target.Elem())
		both.Elem().Field(1).Set(av.Elem())
		docket := target
		defer func() {
			docket.Elem().Set(both.Elem().Field(0))
			av.Elem().Set(both.Elem().Field(1))
		}()
		target = both
	}
	if err := oldReapSchedule(b); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(target.Interface()); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config file %s: %s", path, redactFile(err.Error(), b))
	}
	return nil
}

// redactFile redacts from msg, an error about the YAML text b, the password
// of any connection string b holds: a YAML error can quote a value, and the
// URI is not known yet when the file does not decode.
func redactFile(msg string, b []byte) string {
	for _, line := range strings.Split(string(b), "\n") {
		_, v, ok := strings.Cut(line, ":")
		if !ok || !strings.Contains(v, "@") {
			continue
		}
		msg = Redact(msg, strings.Trim(v, " \t\r'\""))
	}
	return msg
}
