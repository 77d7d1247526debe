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
	"github.com/docketq/docket/internal/clientengine"
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
	w, code := loadWorker(args, stderr)
	if w == nil {
		return code
	}
	defer func() { _ = w.base.Sync() }()
	client, err := connect(w.cfg.Mongo, opts.Monitor)
	if err != nil {
		return w.cannotStart(1, err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	w.client, w.db = client, client.Database(w.cfg.Mongo.DB)
	if !reapOnce {
		stop, err := w.serveProbes()
		if err != nil {
			return w.cannotStart(1, err)
		}
		defer stop()
	}
	if code := w.newClient(reapOnce); code != 0 {
		return code
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
		return w.reapOnce(startCtx, stdout)
	}
	if code := w.addApplication(opts.Register); code != 0 {
		return code
	}
	if code, started := w.start(startCtx); !started {
		return code
	}
	cancelStart()
	w.health.SetUp()
	if opts.Started != nil {
		opts.Started()
	}
	code = w.stopOnSignal(sigs)
	if code == 0 && opts.Stopped != nil {
		opts.Stopped()
	}
	return code
}

// workerProc is one run of the worker command, built step by step.
type workerProc struct {
	cfg      configs.Config
	app      handlers.Config // the demo kinds' settings, in the same file
	base     *zap.Logger
	log      *zap.Logger // base, naming the worker
	client   *mongo.Client
	db       *mongo.Database
	registry *prometheus.Registry
	health   *docketprom.Health
	dc       *docket.Client
}

// loadWorker reads the configuration and builds the logger. A nil
// workerProc means the process ends, with code.
func loadWorker(args []string, stderr io.Writer) (*workerProc, int) {
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
	w := &workerProc{}
	cfg, err := configs.LoadApp(fs, "worker", args, configs.Getenv, &w.app)
	if errors.Is(err, flag.ErrHelp) {
		return nil, 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return nil, 2
	}
	red.Add(cfg.Mongo.URI)
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "worker: unexpected argument %q\n", fs.Arg(0))
		return nil, 2
	}
	w.cfg = cfg
	if w.base, err = cfg.Log.NewLogger(stderr); err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return nil, 2
	}
	w.log = w.base.With(zap.String("worker", cfg.Client.ID))
	w.registry = prometheus.NewRegistry()
	w.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return w, 0
}

// cannotStart logs why the worker cannot start and returns code.
func (w *workerProc) cannotStart(code int, err error) int {
	w.log.Error("cannot start", zap.Error(err))
	return code
}

// serveProbes serves the metrics and probes, if http.addr is set, from
// before the database is reachable, so that /healthz answers and /readyz
// says why the process is not ready. It returns the server's stop.
func (w *workerProc) serveProbes() (func(), error) {
	w.health = docketprom.NewHealth(func(ctx context.Context) error { return w.client.Ping(ctx, readpref.Primary()) }, 0)
	if w.cfg.HTTP.Addr == "" {
		return func() {}, nil
	}
	srv, err := docketprom.Serve(w.cfg.HTTP.Addr, docketprom.Handler(w.registry, w.health), w.log)
	if err != nil {
		return nil, err
	}
	w.log.Info("serving /metrics, /healthz and /readyz", zap.String("http_addr", srv.Addr()))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// newClient builds the docket client, and its metrics when they are
// served: those an embedding application gets from
// docketprom.NewCollector, the pool's and, counted and exported by the
// leader only while the client runs, the jobs per queue and state.
func (w *workerProc) newClient(reapOnce bool) int {
	dcfg := w.cfg.Client
	dcfg.Logger = w.base
	dcfg.Setup = func(ctx context.Context) error { return handlers.Setup(ctx, w.db) }
	dc, err := docket.NewClient(w.db, dcfg)
	if err != nil {
		return w.cannotStart(2, err)
	}
	w.dc = dc
	if w.cfg.HTTP.Addr == "" || reapOnce { // nobody reads them otherwise
		return 0
	}
	col, err := docketprom.NewCollector(dc, &docketprom.Opts{QueueStatsInterval: w.cfg.HTTP.QueueStatsInterval, Logger: w.log})
	if err != nil {
		return w.cannotStart(2, err)
	}
	w.registry.MustRegister(col)
	return 0
}

// reapOnce runs one reaper pass (`worker reap`) and prints what it did.
func (w *workerProc) reapOnce(ctx context.Context, stdout io.Writer) int {
	reaper, err := recovery.NewReaper(clientengine.Part[*queue.Client](w.dc), clientengine.Part[recovery.ReaperConfig](w.dc))
	if err != nil {
		return w.cannotStart(2, err)
	}
	res, err := reaper.RunOnce(ctx)
	if err != nil {
		w.log.Error("reap failed", zap.String("error", configs.Redact(err.Error(), w.cfg.Mongo.URI)))
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

// addApplication registers the process's handlers and the demo kinds'
// maintenance.
func (w *workerProc) addApplication(register Registrar) int {
	q := clientengine.Part[*queue.Client](w.dc)
	if err := register(w.dc.Registry(), w.db, q, w.log); err != nil {
		w.log.Error("cannot register handlers", zap.Error(err))
		return 2
	}
	a := w.app
	a.RenameSweeper.Logger, a.TransferRecovery.Logger = w.log, w.log
	a.TreeSweeper.Logger, a.LedgerSweeper.Logger = w.log, w.log
	var tasks []recovery.Task
	for _, build := range []func() (recovery.Task, error){
		func() (recovery.Task, error) { return handlers.NewRenameSweeper(w.db, q, a.RenameSweeper) },
		func() (recovery.Task, error) { return handlers.NewTransferRecovery(w.db, q, a.TransferRecovery) },
		func() (recovery.Task, error) { return handlers.NewTreeSweeper(w.db, a.TreeSweeper) },
		func() (recovery.Task, error) { return handlers.NewLedgerSweeper(w.db, a.LedgerSweeper) },
	} {
		t, err := build()
		if err != nil {
			return w.cannotStart(2, err)
		}
		tasks = append(tasks, t)
	}
	if err := w.dc.AddMaintenance(tasks...); err != nil {
		return w.cannotStart(2, err)
	}
	return 0
}

// start starts the client: it ensures the indexes, runs the handlers'
// set-up, sets the capacities and limits the configuration names (before
// this worker runs a job), then starts the pool, the election and the
// maintenance; it starts nothing when it fails, so it is retried until the
// database answers or ctx ends. started is false when the process ends
// instead, with code.
func (w *workerProc) start(ctx context.Context) (code int, started bool) {
	err := waitForServer(ctx, w.client, w.cfg.Mongo, w.log, w.dc.Start)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, queue.ErrSetupRefused):
		w.log.Error("cannot start: the database refused docket's setup; fix the documents named below, then start again", zap.Error(err))
		return 1, false
	default:
		w.log.Info("stopped before the database was reachable")
		return 0, false
	}
}

// stopOnSignal waits for SIGINT or SIGTERM, then stops the client: it
// stops claiming and the maintenance, resigns the leadership (another
// process takes the maintenance over at once) and waits for running jobs,
// which a second signal cancels.
func (w *workerProc) stopOnSignal(sigs <-chan os.Signal) int {
	sig := <-sigs
	w.health.ShuttingDown()
	w.log.Info("stopping: waiting for running jobs; signal again to stop at once",
		zap.String("signal", sig.String()), zap.Duration("shutdown_timeout", w.cfg.Client.ShutdownTimeout))
	stopCtx, hardStop := context.WithCancel(context.Background())
	defer hardStop()
	go func() {
		select {
		case s := <-sigs:
			w.log.Info("second signal: cancelling running jobs and releasing their leases", zap.String("signal", s.String()))
			hardStop()
		case <-stopCtx.Done():
		}
	}()
	if err := w.dc.Stop(stopCtx); errors.Is(err, docket.ErrJobsCancelled) {
		w.log.Warn("stopped; the shutdown timeout or a second signal cancelled running jobs", zap.Error(err))
	} else if err != nil {
		w.log.Error("stop", zap.Error(err))
		return 1
	}
	// This process exits now, and with it any handler that ignored its
	// cancellation: give those jobs back rather than wait for their leases.
	if n := w.dc.ReleaseAbandoned(context.Background()); n > 0 {
		w.log.Info("released the jobs of handlers still running at exit", zap.Int("released", n))
	}
	return 0
}
