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

	"github.com/docketq/docket/configs"
	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/docketq/docket/worker"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
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
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: worker [reap] [flags]\n\nRuns a pool of goroutines that claim and run jobs, and the reaper.\n`worker reap` runs one reaper pass and exits.\nSettings come from --config, then DOCKET_* variables, then flags.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	cfg, err := configs.Load(fs, "worker", args, configs.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return 2
	}
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

	qcfg := cfg.Queue
	qcfg.Logger = log
	q, err := queue.New(db, qcfg)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 2
	}
	rcfg := cfg.Reaper
	rcfg.Logger = log
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

	setup := func(ctx context.Context) error {
		if err := q.EnsureIndexes(ctx); err != nil {
			return err
		}
		return handlers.Setup(ctx, db)
	}
	if err := waitForServer(startCtx, client, cfg.Mongo, log, setup); err != nil {
		if errors.Is(err, queue.ErrSetupRefused) {
			log.Error("cannot start: the database refused docket's setup; fix the documents named below, then start again", zap.Error(err))
			return 1
		}
		log.Info("stopped before the database was reachable")
		return 0
	}
	cancelStart()

	reg := jobs.NewRegistry()
	if err := opts.Register(reg, db, q, log); err != nil {
		log.Error("cannot register handlers", zap.Error(err))
		return 2
	}
	wcfg := cfg.Worker
	wcfg.Logger = base
	wcfg.WriteTimeout = cfg.Mongo.WriteTimeout
	w, err := worker.New(q, reg, wcfg)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 2
	}
	scfg := cfg.RenameSweeper
	scfg.Logger = log
	sweeper, err := recovery.NewRenameSweeper(db, q, scfg)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 2
	}
	tcfg := cfg.TransferRecovery
	tcfg.Logger = log
	txRecovery, err := recovery.NewTransferRecovery(db, q, tcfg)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 2
	}
	tscfg := cfg.TreeSweeper
	tscfg.Logger = log
	treeSweeper, err := recovery.NewTreeSweeper(db, tscfg)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 2
	}
	periodic, err := recovery.NewPeriodicEnqueuer(db, q, cfg.PeriodicJobs, log)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 2
	}
	// Every process schedules the maintenance; only the elected leader runs
	// it, so its cost does not grow with the number of processes.
	elector, err := leadership.New(db.Collection(leadership.DefaultCollection),
		leadership.Config{ID: cfg.Worker.ID, TTL: cfg.Leader.TTL, Logger: log})
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 2
	}
	var tasks []recovery.Task
	for _, t := range []recovery.Task{reaper, sweeper, txRecovery, treeSweeper, periodic} {
		tasks = append(tasks, recovery.LeaderOnly(elector, t))
	}
	sched, err := recovery.NewScheduler(log, tasks...)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 2
	}
	electing, stopElecting := context.WithCancel(context.Background())
	elected := make(chan struct{})
	go func() { defer close(elected); elector.Run(electing) }()
	defer func() { stopElecting(); <-elected }() // resigns, so another process leads at once
	w.Start(context.Background())
	defer register(q, cfg, w, reg.Kinds(), log)() // the workers registry (registry.go), until this process stops
	sched.Start()
	if opts.Started != nil {
		opts.Started()
	}

	sig := <-sigs
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
	reaping := sched.Stop()
	stopElecting() // give the leadership up now: another process takes over the maintenance at once
	if err := w.Stop(stopCtx); err != nil {
		log.Error("stop", zap.Error(err))
		return 1
	}
	// This process exits now, and with it any handler that ignored its
	// cancellation: give those jobs back rather than wait for their leases.
	if n := w.ReleaseAbandoned(context.Background()); n > 0 {
		log.Info("released the jobs of handlers still running at exit", zap.Int("released", n))
	}
	select {
	case <-reaping:
	case <-time.After(5 * time.Second):
		log.Warn("a reaper pass was still running at exit; its fenced writes are safe to abandon")
	}
	if opts.Stopped != nil {
		opts.Stopped()
	}
	return 0
}
