package configs

import (
	"cmp"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/docketprom"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
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

// Config is the whole configuration of a docket process: the client's,
// as a docket.Client takes it, and what only a process needs (its
// server, HTTP endpoint, logging and dashboard).
type Config struct {
	// Client is every setting of the docket client: the queue, worker,
	// reaper and leader sections, the periodic jobs and the flow control
	// of the file. The process adds its Logger and Setup.
	Client docket.Config
	// Mongo is the server and database the process uses.
	Mongo MongoConfig
	// HTTP serves the worker's metrics and health probes.
	HTTP HTTPConfig
	// Log is how the process logs.
	Log LogConfig
	// Dashboard is what `docketctl dashboard` trusts.
	Dashboard DashboardConfig
}

// HTTPConfig configures the worker's HTTP server: Prometheus metrics on
// /metrics, Kubernetes probes on /healthz and /readyz.
type HTTPConfig struct {
	// Addr is the host:port to listen on (":9090" for every interface).
	// Defaults to "": no server.
	Addr string
	// QueueStatsInterval is how often the elected leader counts the jobs
	// per queue and state for the metrics. Defaults to
	// docketprom.DefaultQueueStatsInterval.
	QueueStatsInterval time.Duration
}

// MongoConfig says which server and database to use.
type MongoConfig struct {
	// URI is a MongoDB connection string; TLS and authentication are set
	// with its standard options. Defaults to DefaultMongoURI.
	URI string
	// DB is the database. Defaults to DefaultDB.
	DB string
	// Timeout bounds server selection and one-shot commands. Defaults to
	// DefaultConnectTimeout.
	Timeout time.Duration
	// WriteTimeout bounds every operation that has no deadline of its own,
	// and with it how long a write waits for its write concern: with a
	// lost majority, a "majority" write otherwise waits forever. The
	// driver sends the remaining time as maxTimeMS, which MongoDB applies
	// to the write-concern wait too (error MaxTimeMSExpired), and gives up
	// client-side at the same deadline. WithDefaults sets it: to
	// Client.WriteTimeout (mongo.writeTimeout) when that is set, which
	// must be shorter than worker.lease minus worker.heartbeatInterval so
	// that a heartbeat's outcome is known before the lease it renews
	// lapses; else to the smaller of DefaultWriteTimeout and half of that
	// difference, and the worker's heartbeats and completions then follow
	// their leases alone.
	WriteTimeout time.Duration
}

// LogConfig says how to log.
type LogConfig struct {
	// Format is "json" or "console". Defaults to DefaultLogFormat.
	Format string
	// Level is "debug", "info", "warn" or "error". Defaults to
	// DefaultLogLevel.
	Level string
}

// WithDefaults returns c with every unset setting set to its default.
func (c Config) WithDefaults() Config {
	c.Mongo.URI = cmp.Or(c.Mongo.URI, DefaultMongoURI)
	c.Mongo.DB = cmp.Or(c.Mongo.DB, DefaultDB)
	c.Mongo.Timeout = cmp.Or(c.Mongo.Timeout, DefaultConnectTimeout)
	c.Log.Format = cmp.Or(c.Log.Format, DefaultLogFormat)
	c.Log.Level = cmp.Or(c.Log.Level, DefaultLogLevel)
	c.Client = c.Client.WithDefaults()
	c.Mongo.WriteTimeout = cmp.Or(c.Client.WriteTimeout, autoWriteTimeout(c.Client))
	c.HTTP.QueueStatsInterval = cmp.Or(c.HTTP.QueueStatsInterval, docketprom.DefaultQueueStatsInterval)
	return c
}

// Validate reports the first invalid setting, naming it as the file does
// (worker.lease) and its value.
func (c Config) Validate() error {
	if err := c.Mongo.Validate(); err != nil {
		return err
	}
	if err := c.Log.validate(); err != nil {
		return err
	}
	if err := c.validateFlowControl(); err != nil {
		return err
	}
	if err := c.Client.Validate(); err != nil {
		return renameSettings(&c, err)
	}
	if limit := c.Client.Lease - c.Client.HeartbeatInterval; c.Mongo.WriteTimeout >= limit {
		return fmt.Errorf("mongo.writeTimeout: %s must be shorter than worker.lease minus worker.heartbeatInterval (%s - %s = %s), so that a heartbeat that times out does so before the lease it renews lapses",
			c.Mongo.WriteTimeout, c.Client.Lease, c.Client.HeartbeatInterval, limit)
	}
	return c.HTTP.Validate()
}

// validateFlowControl checks the capacities and limits as the file writes
// them: from 1, where docket.Config also takes its "none" (-1).
func (c Config) validateFlowControl() error {
	for _, err := range []error{
		capacitiesForm.validate(c.Client.Capacities), limitsForm.validate(c.Client.Limits),
		processLimitsForm.validate(c.Client.ProcessLimits),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

func (l LogConfig) validate() error {
	switch l.Format {
	case "json", "console":
	default:
		return fmt.Errorf("log.format: %q must be \"json\" or \"console\"", l.Format)
	}
	switch l.Level {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level: %q must be debug, info, warn or error", l.Level)
	}
	return nil
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

// autoWriteTimeout is MongoConfig.WriteTimeout's default for client w:
// DefaultWriteTimeout, or half of what the lease leaves past one heartbeat
// interval when that is less, so that a heartbeat timing out leaves time
// for the next one. w must have its defaults.
func autoWriteTimeout(w docket.Config) time.Duration {
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
