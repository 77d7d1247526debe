package docket

import (
	"cmp"
	"context"
	"maps"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"go.uber.org/zap"
)

// registryBeatMax caps the interval between a client's beats in the
// workers registry; a shorter heartbeat interval beats that often. At
// 10 s (the default heartbeat interval) an idle process's registry costs
// one write per 10 s, and listings drop a process that died within
// queue.WorkerMissedBeats beats: 30 s.
const registryBeatMax = 10 * time.Second

// version is the version of this binary: its module version and VCS
// revision as the Go toolchain stamped them.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if (v == "" || v == "(devel)") && rev != "" {
		v = rev[:min(12, len(rev))]
		if dirty {
			v += "+dirty"
		}
	}
	return cmp.Or(v, "(devel)")
}

// pool is the client's pool as the registry sees it.
type pool interface {
	ID() string
	Running() int
}

// register enters this client in the workers registry and beats there
// until the returned function is called, which deletes its entry:
// `docketctl workers` and the dashboard list the processes alive, with
// their process limits, and the reaper spares the expired leases of a
// process that still beats (a slow one, not a dead one) for one more
// lease. Every started client registers, embedded or the worker command
// alike. A beat that fails is logged and retried at the next; the registry
// never stops the pool.
func register(q *queue.Client, wcfg worker.Config, w pool, kinds []string, log *zap.Logger) (unregister func()) {
	host, _ := os.Hostname()
	info := queue.WorkerInfo{
		ID: w.ID(), Host: host, PID: int64(os.Getpid()), Version: version(), Queues: wcfg.Queues, Kinds: kinds,
		Concurrency: int64(wcfg.Concurrency), StartedAt: time.Now(),
		BeatEvery: min(wcfg.HeartbeatInterval, registryBeatMax),
		// A copy: the beats read it while the application may still hold
		// its Config's map.
		ProcessLimits: maps.Clone(wcfg.ProcessLimits),
	}
	if len(info.Queues) == 0 {
		info.Queues = []string{"default"}
	}
	info.Concurrency = cmp.Or(info.Concurrency, worker.DefaultConcurrency)
	if info.BeatEvery <= 0 {
		info.BeatEvery = registryBeatMax
	}
	log = log.Named("registry")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		failing := false
		t := time.NewTicker(info.BeatEvery)
		defer t.Stop()
		for {
			info.Running = int64(w.Running())
			bctx, bcancel := context.WithTimeout(ctx, max(info.BeatEvery, time.Second))
			err := q.Beat(bctx, info)
			bcancel()
			switch {
			case err != nil && ctx.Err() == nil && !failing:
				log.Warn("registering the worker failed; retrying at every beat", zap.Error(err))
				failing = true
			case err == nil && failing:
				log.Info("registered the worker again")
				failing = false
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ucancel()
		if err := q.Unregister(uctx, info.ID); err != nil {
			log.Warn("unregistering the worker failed; listings drop it once it misses its beats", zap.Error(err))
		}
	}
}

// Middleware wraps every handler of a client (asynq's Use, River's
// middleware): it runs around each attempt, calls next.Work to run it, and
// returns the attempt's error, which steers the job as a handler's does. A
// panic in it is recovered and recorded as the handler's is.
//
//	client.Use(func(next jobs.Handler) jobs.Handler {
//		return jobs.HandlerFunc(func(ctx context.Context, job *jobs.Job) error {
//			ctx, span := tracer.Start(ctx, job.Kind)
//			defer span.End()
//			return next.Work(ctx, job)
//		})
//	})
type Middleware = jobs.Middleware
