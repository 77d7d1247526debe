package bench

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/docketq/docket/cmd/internal/cli"
	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
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

// runWorker is `bench worker [worker flags]`: a worker process running the
// very code of cmd/worker (internal/cli), with a command monitor on its
// client and the bench-sleep kind registered. It prints a JSON snapshot of
// its counts to stdout every reportEvery, one marked ready once it runs,
// and a full one marked final when SIGTERM has stopped it.
func runWorker(args []string, stdout, stderr io.Writer) int {
	mon := newMonitor(queue.DefaultCollection)
	enc := json.NewEncoder(stdout)
	var mu sync.Mutex // enc is shared by the reporter and the final report
	report := func(s snapshot) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(s)
	}
	stop := make(chan struct{})
	reported := make(chan struct{})
	return cli.WorkerWith(args, stdout, stderr, cli.WorkerOptions{
		Register: func(reg *jobs.Registry, db *mongo.Database, q *queue.Client, log *zap.Logger) error {
			if err := handlers.Register(reg, handlers.Deps{DB: db, Queue: q, Logger: log}); err != nil {
				return err
			}
			return jobs.Register(reg, func(ctx context.Context, _ *jobs.Job, a SleepArgs) error {
				select {
				case <-time.After(time.Duration(a.Ms) * time.Millisecond):
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}, jobs.KindOptions{})
		},
		Monitor: mon.commandMonitor(),
		Started: func() {
			ready := mon.snapshot(false)
			ready.Ready = true
			report(ready)
			go func() {
				defer close(reported)
				tick := time.NewTicker(reportEvery)
				defer tick.Stop()
				for {
					select {
					case <-tick.C:
						s := mon.snapshot(false)
						s.NewClaimMs = mon.takeClaims()
						report(s)
					case <-stop:
						return
					}
				}
			}()
		},
		Stopped: func() {
			close(stop)
			<-reported
			final := mon.snapshot(true)
			final.Final = true
			report(final)
		},
	})
}
