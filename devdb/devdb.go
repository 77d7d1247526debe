// Package devdb runs a MongoDB-protocol server for development and tests:
// FerretDB v1 embedded with its SQLite backend, behind a wire-level front that
// runs one write at a time.
//
// FerretDB v1 does not make findAndModify (nor update) atomic: it reads the
// matching documents, then writes them by _id, with nothing held in between,
// so two concurrent claims can take the same job. docket relies on MongoDB's
// single-document atomicity, so the front serializes writes: it reads one
// whole request from a client connection, takes a global lock, forwards the
// request to a FerretDB connection dedicated to that client connection, reads
// the reply and releases the lock. Commands that only read (find, count,
// distinct, the list commands, an aggregate without $out or $merge) run
// beside it, at most max(4, 2 x CPUs) at once, a find by _id without a
// place: a read cannot break a write's atomicity, and SQLite in WAL mode
// reads beside a write. Commands that only describe the server (hello,
// isMaster) and getMore, which only reads a
// cursor and on a tailable awaitData cursor waits for data up to its
// maxTimeMS, take neither.
//
// A request waiting for the lock is dropped unrun if its client closes the
// connection, and answered MaxTimeMSExpired unrun if its maxTimeMS passes.
//
// The front bounds what hostile or broken clients can take: a message's
// buffer grows as its bytes arrive (at most MaxMessageSize), request bytes
// count toward Config.MaxInFlightBytes, connections past Config.MaxConns are
// closed as soon as accepted, and a message begun must arrive within
// Config.MessageTimeout.
//
// devdb gives every collection's SQLite table an index on the expression
// FerretDB looks documents up by _id with, which its own _id index does not
// serve (see idindex.go): lookups and writes by _id then cost the same
// whatever the collection's size.
//
// Off by default, the front can also send the failure replies of a MongoDB
// replica set (Config.Faults, Config.Seed, Config.Elections; faults.go): a
// write refused by a stepdown, a reply lost after the write, a
// writeConcernError, a passed time limit, a killed cursor.
//
// devdb is not a production database: FerretDB v1 filters and sorts in Go over
// whole collections (every filter but {_id: X} reads and decodes every
// document), and the front removes all concurrency between commands.
package devdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	"go.uber.org/zap"
)

// DefaultAddr is the address the server listens on when Config.Addr is empty:
// MongoDB's own default port, on the loopback interface.
const DefaultAddr = "127.0.0.1:27017"

// Defaults of the front's bounds; see Config.
const (
	DefaultMaxConns         = 3000
	DefaultMaxInFlightBytes = 256 << 20
	DefaultMessageTimeout   = time.Minute
)

// Config configures a Server.
type Config struct {
	// Addr is the TCP address clients connect to, as host:port. Port 0 picks
	// a free port; Server.URI reports the one chosen.
	// Defaults to DefaultAddr.
	Addr string

	// Dir is the directory holding the SQLite files, one per database. It is
	// created if missing. Required.
	Dir string

	// Logger receives the front's logs.
	// Defaults to a no-op logger.
	Logger *zap.Logger

	// FerretDBLog receives FerretDB's own logs, as text.
	// Defaults to io.Discard.
	FerretDBLog io.Writer

	// MaxConns is the most client connections served at once. A connection
	// past it is closed as soon as it is accepted, with nothing read from
	// it. Each connection that has sent a command also holds a connection
	// to FerretDB: three file descriptors in all.
	// Defaults to DefaultMaxConns (3,000).
	MaxConns int

	// MaxInFlightBytes bounds the memory that requests take, over all
	// connections: a request's buffer grows as its bytes arrive, and what
	// it holds beyond its first 16 KiB counts toward this bound until its
	// reply has been read. A connection whose request would pass it is
	// closed. At least MaxMessageSize (48,000,000), so that the largest
	// message fits.
	// Defaults to DefaultMaxInFlightBytes (256 MiB).
	MaxInFlightBytes int64

	// MessageTimeout is how long a client has to send the rest of a message
	// once its first byte has arrived; a connection that takes longer is
	// closed. Time between messages is not bounded.
	// Defaults to DefaultMessageTimeout (1 minute).
	MessageTimeout time.Duration

	// Faults maps a fault's name (FaultStepdown, FaultLostReply,
	// FaultWriteConcern, FaultTimeLimit, FaultCursorKill) to the probability,
	// in [0, 1], that it is injected into each command eligible for it: the
	// failure replies of a MongoDB replica set (docs/EMBEDDED-SERVER.md).
	// Every injected fault is logged at warn level.
	// Defaults to none.
	Faults map[string]float64

	// Seed seeds the fault decisions and Interleave's pauses: the same seed
	// and the same commands give the same faults and pauses. Server.Seed
	// reports it.
	// Defaults to 0, which picks a random seed.
	Seed int64

	// Elections, when its Every is not 0, refuses every write with
	// NotWritablePrimary for For at every Every, the first window starting
	// Every after Start, while reads answer, as during an election.
	// Defaults to none.
	Elections Elections

	// Interleave applies every multi-document update and delete one
	// document at a time, each re-checked against the filter at its write,
	// with other connections' commands let in between documents, as MongoDB
	// applies them; and now and then holds a getMore back, so that writes
	// land between a cursor's batches (see interleave.go).
	// Defaults to false: a multi-document write runs whole, alone.
	Interleave bool
}

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.FerretDBLog == nil {
		c.FerretDBLog = io.Discard
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxInFlightBytes == 0 {
		c.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if c.MessageTimeout == 0 {
		c.MessageTimeout = DefaultMessageTimeout
	}

	return c
}

func (c Config) validate() error {
	if c.Dir == "" {
		return errors.New("devdb: Config.Dir is required")
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("devdb: Config.Addr %q is not host:port: %w", c.Addr, err)
	}
	if c.MaxConns < 0 {
		return fmt.Errorf("devdb: Config.MaxConns is %d; want a positive number (0 for the default, %d)", c.MaxConns, DefaultMaxConns)
	}
	if c.MaxInFlightBytes < MaxMessageSize {
		return fmt.Errorf("devdb: Config.MaxInFlightBytes is %d; want at least %d (MaxMessageSize), so that the largest message fits (0 for the default, %d)",
			c.MaxInFlightBytes, MaxMessageSize, DefaultMaxInFlightBytes)
	}
	if c.MessageTimeout < 0 {
		return fmt.Errorf("devdb: Config.MessageTimeout is %v; want a positive duration (0 for the default, %v)", c.MessageTimeout, DefaultMessageTimeout)
	}
	if err := validateFaults(c.Faults); err != nil {
		return fmt.Errorf("devdb: Config.Faults: %w", err)
	}
	if err := c.Elections.validate(); err != nil {
		return fmt.Errorf("devdb: Config.Elections: %w", err)
	}

	return nil
}

// ferretNewMu serializes calls to ferretdb.New, which writes package-level
// state of FerretDB's (the version's Package field) without a lock.
var ferretNewMu sync.Mutex

// Server is a running devdb: FerretDB and the front before it.
type Server struct {
	front   *front
	indexer *idIndexer
	uri     string
	dir     string
	seed    int64

	stopFerret context.CancelFunc
	ferretDone chan struct{}
}

// Start starts FerretDB on cfg.Dir and the front on cfg.Addr. ctx bounds the
// start-up only; the server runs until Close. Several servers may run in one
// process, each on its own directory.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}

	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("devdb: data directory %q: %w", cfg.Dir, err)
	}
	if strings.ContainsAny(dir, "?#%") {
		// FerretDB puts the directory into its SQLite URIs as it is: a '?'
		// or '#' cuts the path there (the data went to another file), and
		// a '%' followed by two hex digits is decoded.
		return nil, fmt.Errorf("devdb: data directory %q: its path has '?', '#' or '%%', which FerretDB cannot open files under; choose another", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("devdb: create data directory: %w", err)
	}

	// Listen before starting FerretDB, so that a busy address fails fast and
	// says which address it was.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("devdb: cannot listen on %s (is another server using it?): %w", cfg.Addr, err)
	}

	// FerretDB wants a "file:" URI naming a directory, ending in '/'.
	// synchronous(normal): in SQLite's WAL mode a commit is durable against
	// a crash of the process (SIGKILL included) and never corrupts the
	// files; a crash of the machine may lose the last commits, as MongoDB's
	// default write concern (acknowledged before its journal's next flush)
	// may. Syncing every commit cost a tenth of a chain's server time.
	sqliteURL := (&url.URL{Scheme: "file", Path: dir + "/", RawQuery: "_pragma=synchronous(normal)"}).String()

	ferretNewMu.Lock()
	fdb, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		Handler:   "sqlite",
		SQLiteURL: sqliteURL,
		Logger:    slog.New(slog.NewTextHandler(cfg.FerretDBLog, nil)),
	})
	ferretNewMu.Unlock()
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("devdb: start FerretDB on %s: %w", dir, err)
	}

	runCtx, stopFerret := context.WithCancel(context.Background())
	ferretDone := make(chan struct{})
	go func() {
		defer close(ferretDone)
		_ = fdb.Run(runCtx)
	}()

	// MongoDBURI blocks until FerretDB listens.
	uriCh := make(chan string, 1)
	go func() { uriCh <- fdb.MongoDBURI() }()

	var backendURI string
	select {
	case backendURI = <-uriCh:
	case <-ferretDone:
		stopFerret()
		_ = ln.Close()
		return nil, errors.New("devdb: FerretDB stopped during start-up")
	case <-ctx.Done():
		stopFerret()
		<-ferretDone
		_ = ln.Close()
		return nil, fmt.Errorf("devdb: start-up: %w", ctx.Err())
	}

	u, err := url.Parse(backendURI)
	if err != nil {
		stopFerret()
		<-ferretDone
		_ = ln.Close()
		return nil, fmt.Errorf("devdb: FerretDB URI %q: %w", backendURI, err)
	}

	log := cfg.Logger.Named("devdb")
	seed := cfg.Seed
	if seed == 0 {
		seed = randomSeed()
	}
	s := &Server{
		front: newFront(ln, u.Host, log, frontConfig{
			maxConns:       cfg.MaxConns,
			maxInFlight:    cfg.MaxInFlightBytes,
			messageTimeout: cfg.MessageTimeout,
			faults:         newInjector(cfg.Faults, seed, cfg.Elections, log),
			il:             newInterleaver(cfg.Interleave, seed, log),
		}),
		uri:        "mongodb://" + ln.Addr().String() + "/",
		dir:        dir,
		seed:       seed,
		stopFerret: stopFerret,
		ferretDone: ferretDone,
	}

	s.indexer = startIDIndexer(dir, s.front.lock, s.front.unlock, log)
	indexNow := s.indexer.indexNow
	s.front.afterIndexes.Store(&indexNow)

	log.Debug("started", zap.String("backend", u.Host), zap.String("dir", dir))

	return s, nil
}

// URI returns the MongoDB connection string of the server.
func (s *Server) URI() string {
	return s.uri
}

// Addr returns the address the server listens on, as host:port.
func (s *Server) Addr() string {
	return s.front.ln.Addr().String()
}

// Seed returns the seed of the fault decisions: Config.Seed, or the one
// picked when that was 0.
func (s *Server) Seed() int64 {
	return s.seed
}

// Dir returns the absolute path of the data directory.
func (s *Server) Dir() string {
	return s.dir
}

// Close stops accepting connections, closes the open ones and stops FerretDB,
// which closes its SQLite files. It returns when everything has stopped. It is
// safe to call more than once.
func (s *Server) Close() error {
	err := s.front.close()
	s.indexer.close()

	s.stopFerret()
	<-s.ferretDone

	return err
}
