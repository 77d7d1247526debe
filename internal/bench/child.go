package bench

import (
	"context"
	"encoding/json"
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
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/docketq/docket/worker"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
)

// SleepArgs are the args of the bench-only kind "bench-sleep": a handler
// that waits, as one doing I/O would.
type SleepArgs struct {
	// Ms is how long the handler sleeps.
	Ms int `bson:"ms"`
}

// Kind implements jobs.Args.
func (SleepArgs) Kind() string { return "bench-sleep" }

// reportEvery is how often a worker process reports its counts.
const reportEvery = 100 * time.Millisecond

// runWorker is `bench worker [worker flags]`: a worker process as
// cmd/worker runs it (the pool, the reaper, the sweepers, the same
// settings), with a command monitor on its client and the bench-sleep kind
// registered. It prints a JSON snapshot of its counts to stdout every
// reportEvery, one marked ready once it has set up, and a full one marked
// final when SIGTERM has stopped it.
func runWorker(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg, err := configs.Load(fs, "worker", args, configs.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench worker: %v\n", err)
		return 2
	}
	log, err := cfg.Log.NewLogger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "bench worker: %v\n", err)
		return 2
	}
	fail := func(err error) int {
		log.Error("bench worker", zap.Error(err))
		return 1
	}

	mon := newMonitor(cfg.Queue.WithDefaults().Collection)
	client, err := mongo.Connect(cfg.Mongo.ClientOptions().SetMonitor(mon.commandMonitor()))
	if err != nil {
		return fail(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(cfg.Mongo.DB)

	qcfg := cfg.Queue
	qcfg.Logger = log
	q, err := queue.New(db, qcfg)
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Mongo.Timeout)
	err = q.EnsureIndexes(ctx)
	if err == nil {
		err = handlers.Setup(ctx, db)
	}
	cancel()
	if err != nil {
		return fail(err)
	}

	reg := jobs.NewRegistry()
	if err := handlers.Register(reg, handlers.Deps{DB: db, Queue: q, Logger: log}); err != nil {
		return fail(err)
	}
	if err := jobs.Register(reg, func(ctx context.Context, _ *jobs.Job, a SleepArgs) error {
		select {
		case <-time.After(time.Duration(a.Ms) * time.Millisecond):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, jobs.KindOptions{}); err != nil {
		return fail(err)
	}
	wcfg := cfg.Worker
	wcfg.Logger = log
	w, err := worker.New(q, reg, wcfg)
	if err != nil {
		return fail(err)
	}
	rcfg := cfg.Reaper
	rcfg.Logger = log
	reaper, err := recovery.NewReaper(q, rcfg)
	if err != nil {
		return fail(err)
	}
	scfg := cfg.RenameSweeper
	scfg.Logger = log
	sweeper, err := recovery.NewRenameSweeper(db, q, scfg)
	if err != nil {
		return fail(err)
	}
	tcfg := cfg.TransferRecovery
	tcfg.Logger = log
	txRecovery, err := recovery.NewTransferRecovery(db, q, tcfg)
	if err != nil {
		return fail(err)
	}
	sched, err := recovery.NewScheduler(log, reaper, sweeper, txRecovery)
	if err != nil {
		return fail(err)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	enc := json.NewEncoder(stdout)
	ready := mon.snapshot(false)
	ready.Ready = true
	_ = enc.Encode(ready)
	w.Start(context.Background())
	sched.Start()

	tick := time.NewTicker(reportEvery)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-tick.C:
			_ = enc.Encode(mon.snapshot(false))
		case <-sigs:
			running = false
		}
	}
	<-sched.Stop()
	if err := w.Stop(context.Background()); err != nil {
		return fail(err)
	}
	final := mon.snapshot(true)
	final.Final = true
	_ = enc.Encode(final)
	return 0
}
