// Command devdb serves a MongoDB-protocol database for development and tests:
// FerretDB v1 with its SQLite backend, behind a front that runs one command at
// a time so that findAndModify is atomic, as docket needs.
//
// Usage:
//
//	devdb [--addr 127.0.0.1:27017] [--dir .docket/data] [--log-format json|console] [--verbose]
//	      [--max-conns 3000] [--max-inflight-bytes 268435456] [--message-timeout 1m]
//	      [--faults NAME=P[,NAME=P...]] [--seed N] [--elections EVERY/FOR]
//	      [--interleave]
//
// --faults injects MongoDB's failure replies, each NAME with probability P
// per command eligible for it: stepdown (a write refused, unapplied, with
// NotWritablePrimary 10107), lostreply (a write applied, then the connection
// closed before the reply), writeconcern (a write applied and acknowledged
// with a writeConcernError 64, WriteConcernFailed), timelimit (a command
// that carries maxTimeMS refused, unapplied, with MaxTimeMSExpired 50),
// cursorkill (a getMore answered CursorNotFound 43, its cursor killed),
// elemmatchnot (a filter with $not or $ne inside $elemMatch refused
// NotImplemented 238, as FerretDB v1 does).
// --seed seeds their decisions (0, the default, picks one; the listening
// line reports it). --elections 60s/8s refuses every write with
// NotWritablePrimary for 8s every 60s, the first window 60s after start,
// while reads answer. Every injected fault is logged at warn level with its
// command and connection. All are off by default; see
// docs/EMBEDDED-SERVER.md.
//
// --interleave applies every multi-document update and delete (updateMany,
// deleteMany, each such statement of a bulk write) one document at a time,
// each re-checked against the filter at its write, with other connections'
// commands let in between documents, as MongoDB does, instead of whole
// under devdb's lock; and now and then holds a getMore back, so that writes
// land between a cursor's batches. --seed also seeds its pauses, each
// logged, so that a run replays. Off by default.
//
// It runs Go's garbage collector at GOGC=400 unless GOGC is set. It logs
// one line, "devdb listening", with the address and the connection URI, and
// runs until SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/docketq/docket/devdb"
)

// startTimeout bounds how long devdb waits for FerretDB to come up.
const startTimeout = time.Minute

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("devdb", flag.ContinueOnError)
	addr := fs.String("addr", devdb.DefaultAddr, "TCP address to listen on (host:port; port 0 picks a free one)")
	dir := fs.String("dir", ".docket/data", "directory for the SQLite files; created if missing")
	logFormat := fs.String("log-format", "json", "log format: json or console")
	verbose := fs.Bool("verbose", false, "also write FerretDB's own logs to stderr")
	maxConns := fs.Int("max-conns", devdb.DefaultMaxConns,
		"most client connections served at once; further ones are closed as soon as accepted")
	maxInFlight := fs.Int64("max-inflight-bytes", devdb.DefaultMaxInFlightBytes,
		fmt.Sprintf("most bytes of requests held at once over all connections, beyond 16 KiB each; at least %d", devdb.MaxMessageSize))
	messageTimeout := fs.Duration("message-timeout", devdb.DefaultMessageTimeout,
		"how long a client has to send the rest of a message once it has begun it")
	faultsFlag := fs.String("faults", "",
		"inject MongoDB's failure replies: NAME=P[,NAME=P...], NAME one of stepdown, lostreply, writeconcern, timelimit, cursorkill, elemmatchnot, P a probability per eligible command")
	seed := fs.Int64("seed", 0, "seed of the --faults decisions and the --interleave pauses; 0 picks one, reported in the listening line")
	electionsFlag := fs.String("elections", "",
		"EVERY/FOR, e.g. 60s/8s: every EVERY (the first EVERY after start) refuse all writes with NotWritablePrimary for FOR")
	interleave := fs.Bool("interleave", false,
		"apply multi-document updates and deletes one document at a time, letting other connections in between, as MongoDB does")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the server's life to this file (to see where a workload's server time goes)")

	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "devdb: unexpected arguments: %v\n", fs.Args())
		return 2
	}
	if *maxConns < 1 {
		fmt.Fprintf(os.Stderr, "devdb: --max-conns is %d; want at least 1\n", *maxConns)
		return 2
	}
	if *maxInFlight < devdb.MaxMessageSize {
		fmt.Fprintf(os.Stderr, "devdb: --max-inflight-bytes is %d; want at least %d, the largest message\n", *maxInFlight, devdb.MaxMessageSize)
		return 2
	}
	if *messageTimeout <= 0 {
		fmt.Fprintf(os.Stderr, "devdb: --message-timeout is %v; want a positive duration\n", *messageTimeout)
		return 2
	}

	faults, elections, err := parseFaultFlags(*faultsFlag, *electionsFlag)
	if err != nil {
		fmt.Fprintf(os.Stderr, "devdb: %v\n", err)
		return 2
	}

	logger, err := newLogger(*logFormat)
	if err != nil {
		fmt.Fprintf(os.Stderr, "devdb: %v\n", err)
		return 2
	}
	defer func() { _ = logger.Sync() }()

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "devdb: --cpuprofile: %v\n", err)
			return 2
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "devdb: --cpuprofile: %v\n", err)
			return 2
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}

	gcPercent := setGCPercent()

	var ferretLog io.Writer = io.Discard
	if *verbose {
		ferretLog = os.Stderr
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()

	srv, err := devdb.Start(startCtx, devdb.Config{
		Addr:        *addr,
		Dir:         *dir,
		Logger:      logger,
		FerretDBLog: ferretLog,

		MaxConns:         *maxConns,
		MaxInFlightBytes: *maxInFlight,
		MessageTimeout:   *messageTimeout,

		Faults:    faults,
		Seed:      *seed,
		Elections: elections,

		Interleave: *interleave,
	})
	if err != nil {
		logger.Error("devdb failed to start", zap.Error(err))
		return 1
	}

	logger.Info("devdb listening",
		zap.String("addr", srv.Addr()),
		zap.String("uri", srv.URI()),
		zap.String("dir", srv.Dir()),
		zap.Int("max_conns", *maxConns),
		zap.Int64("max_inflight_bytes", *maxInFlight),
		zap.Duration("message_timeout", *messageTimeout),
		zap.String("faults", *faultsFlag),
		zap.Int64("seed", srv.Seed()),
		zap.String("elections", *electionsFlag),
		zap.Int("gc_percent", gcPercent))

	<-ctx.Done()
	stop() // a second signal now kills the process the default way

	logger.Info("devdb shutting down")
	if err := srv.Close(); err != nil {
		logger.Error("devdb shutdown failed", zap.Error(err))
		return 1
	}
	logger.Info("devdb stopped")

	return 0
}

// parseFaultFlags parses --faults and --elections; either may be empty.
func parseFaultFlags(faultsFlag, electionsFlag string) (map[string]float64, devdb.Elections, error) {
	var faults map[string]float64
	if faultsFlag != "" {
		f, err := devdb.ParseFaults(faultsFlag)
		if err != nil {
			return nil, devdb.Elections{}, fmt.Errorf("--%w", err)
		}
		faults = f
	}
	var elections devdb.Elections
	if electionsFlag != "" {
		e, err := devdb.ParseElections(electionsFlag)
		if err != nil {
			return nil, devdb.Elections{}, fmt.Errorf("--%w", err)
		}
		elections = e
	}
	return faults, elections, nil
}

// newLogger returns a production logger writing to stderr, as JSON or as
// human-readable console lines.
func newLogger(format string) (*zap.Logger, error) {
	cfg := zap.NewProductionConfig()
	cfg.Sampling = nil
	cfg.DisableStacktrace = true
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder

	switch format {
	case "json":
	case "console":
		cfg.Encoding = "console"
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalLevelEncoder
	default:
		return nil, fmt.Errorf("--log-format must be json or console, not %q", format)
	}

	logger, err := cfg.Build()
	if err != nil {
		return nil, fmt.Errorf("build logger: %w", err)
	}

	return logger, nil
}
