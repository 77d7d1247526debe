package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/configs"
	"github.com/docketq/docket/docketprom"
	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.uber.org/zap"
)

// Registrar adds a process's handlers to its registry.
type Registrar func(reg *jobs.Registry, db *mongo.Database, q *queue.Client, log *zap.Logger) error

// WorkerOptions are what a process running Worker adds to it.
type WorkerOptions struct {
	// Register adds the process's handlers. Required.
	Register Registrar
	// Monitor, when set, watches every command of the process's client
	// (the bench counts commands per job with it).
	Monitor *event.CommandMonitor
	// Started, when set, is called once the worker and its maintenance
	// run; Stopped once they have stopped, before Worker returns.
	Started, Stopped func()
}

// Worker is the main function of the worker command: it runs a worker pool
// and the reaper until SIGINT or SIGTERM, and returns the exit status.
// `worker reap` runs one reaper pass and exits.
func Worker(args []string, stdout, stderr io.Writer, register Registrar) int {
	return WorkerWith(args, stdout, stderr, WorkerOptions{Register: register})
}

// WorkerWith is Worker with the hooks of opts.
func WorkerWith(args []string, stdout, stderr io.Writer, opts WorkerOptions) int {
	reapOnce := len(args) > 0 && args[0] == "reap"
	if reapOnce {
		args = args[1:]
	}
	// No message or log line shows a password, whatever setting a
	// connection string was given to.
	red := configs.NewRedactor(configs.Getenv("DOCKET_MONGO_URI"))
	stderr = red.Writer(stderr)
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: worker [reap] [flags]\n\nRuns a pool of goroutines that claim and run jobs, and the reaper.\n`worker reap` runs one reaper pass and exits.\nSettings come from --config, then DOCKET_* variables, then flags.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	var appCfg handlers.Config // the demo kinds' settings, in the same file
	cfg, err := configs.LoadApp(fs, "worker", args, configs.Getenv, &appCfg)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return 2
	}
	red.Add(cfg.Mongo.URI)
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "worker: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	base, err := cfg.Log.NewLogger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return 2
	}
	defer func() { _ = base.Sync() }()
	log := base.With(zap.String("worker", cfg.Worker.ID))

	client, err := connect(cfg.Mongo, opts.Monitor)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 1
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(cfg.Mongo.DB)

	// Metrics and probes, served from before the database is reachable, so
	// that /healthz answers and /readyz says why the process is not ready.
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	health := docketprom.NewHealth(func(ctx context.Context) error { return client.Ping(ctx, readpref.Primary()) }, 0)
	if cfg.HTTP.Addr != "" && !reapOnce {
		srv, err := docketprom.Serve(cfg.HTTP.Addr, docketprom.Handler(registry, health), log)
		if err != nil {
			log.Error("cannot start", zap.Error(err))
			return 1
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		}()
		log.Info("serving /metrics, /healthz and /readyz", zap.String("http_addr", srv.Addr()))
	}

	dcfg := cfg.ClientConfig()
	dcfg.Logger = base
	dcfg.Setup = func(ctx context.Context) error { return handlers.Setup(ctx, db) }
	dc, err := docket.NewClient(db, dcfg)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 2
	}
	q := dc.Queue()
	if cfg.HTTP.Addr != "" && !reapOnce { // nobody reads them otherwise
		// The metrics an embedding application gets from
		// docketprom.NewCollector: the
		// pool's, and the jobs per queue and state, counted and exported by
		// the leader only while the client runs.
		col, err := docketprom.NewCollector(dc, &docketprom.Opts{QueueStatsInterval: cfg.HTTP.QueueStatsInterval, Logger: log})
		if err != nil {
			log.Error("cannot start", zap.Error(err))
			return 2
		}
		registry.MustRegister(col)
	}
	rcfg := cfg.Reaper
	rcfg.Logger = log // configs fills it with a no-op logger
	reaper, err := recovery.NewReaper(q, rcfg)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 2
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	startCtx, cancelStart := context.WithCancel(context.Background())
	defer cancelStart()
	go func() {
		select {
		case <-sigs:
			cancelStart()
		case <-startCtx.Done():
		}
	}()

	if reapOnce {
		res, err := reaper.RunOnce(startCtx)
		if err != nil {
			log.Error("reap failed", zap.String("error", configs.Redact(err.Error(), cfg.Mongo.URI)))
			return 1
		}
		line := fmt.Sprintf("requeued %d, dead %d", res.Requeued, res.Dead)
		for _, c := range []struct {
			what string
			n    int
		}{{"cancelled", res.Cancelled}, {"buried as malformed", res.Buried}, {"skipped", res.Skipped}} {
			if c.n > 0 {
				line += fmt.Sprintf(", %s %d", c.what, c.n)
			}
		}
		fmt.Fprintln(stdout, line)
		return 0
	}

	if err := opts.Register(dc.Registry(), db, q, log); err != nil {
		log.Error("cannot register handlers", zap.Error(err))
		return 2
	}
	// The demo application's kinds contribute their maintenance.
	scfg := appCfg.RenameSweeper
	scfg.Logger = log
	sweeper, err := handlers.NewRenameSweeper(db, q, scfg)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 2
	}
	tcfg := appCfg.TransferRecovery
	tcfg.Logger = log
	txRecovery, err := handlers.NewTransferRecovery(db, q, tcfg)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 2
	}
	tscfg := appCfg.TreeSweeper
	tscfg.Logger = log
	treeSweeper, err := handlers.NewTreeSweeper(db, tscfg)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 2
	}
	lcfg := appCfg.LedgerSweeper
	lcfg.Logger = log
	ledgerSweeper, err := handlers.NewLedgerSweeper(db, lcfg)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 2
	}
	if err := dc.AddMaintenance(sweeper, txRecovery, treeSweeper, ledgerSweeper); err != nil {
		log.Error("cannot start", zap.Error(err))
		return 2
	}
	// Start ensures the indexes, runs the handlers' set-up, sets the
	// capacities and limits the configuration names (before this worker
	// runs a job), then starts the pool, the election and the maintenance;
	// it starts nothing when it fails, so it is retried until the database
	// answers.
	start := dc.Start
	if err := waitForServer(startCtx, client, cfg.Mongo, log, start); err != nil {
		if errors.Is(err, queue.ErrSetupRefused) {
			log.Error("cannot start: the database refused docket's setup; fix the documents named below, then start again", zap.Error(err))
			return 1
		}
		log.Info("stopped before the database was reachable")
		return 0
	}
	cancelStart()
	health.SetUp()
	if opts.Started != nil {
		opts.Started()
	}

	sig := <-sigs
	health.ShuttingDown()
	log.Info("stopping: waiting for running jobs; signal again to stop at once",
		zap.String("signal", sig.String()), zap.Duration("shutdown_timeout", cfg.Worker.ShutdownTimeout))
	stopCtx, hardStop := context.WithCancel(context.Background())
	defer hardStop()
	go func() {
		select {
		case s := <-sigs:
			log.Info("second signal: cancelling running jobs and releasing their leases", zap.String("signal", s.String()))
			hardStop()
		case <-stopCtx.Done():
		}
	}()
	// Stops claiming and the maintenance, resigns the leadership (another
	// process takes the maintenance over at once), waits for running jobs.
	if err := dc.Stop(stopCtx); errors.Is(err, docket.ErrJobsCancelled) {
		log.Warn("stopped; the shutdown timeout or a second signal cancelled running jobs", zap.Error(err))
	} else if err != nil {
		log.Error("stop", zap.Error(err))
		return 1
	}
	// This process exits now, and with it any handler that ignored its
	// cancellation: give those jobs back rather than wait for their leases.
	if n := dc.ReleaseAbandoned(context.Background()); n > 0 {
		log.Info("released the jobs of handlers still running at exit", zap.Int("released", n))
	}
	if opts.Stopped != nil {
		opts.Stopped()
	}
	return 0
}
