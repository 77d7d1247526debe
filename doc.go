// Package docket is a job queue on MongoDB: jobs are documents, worker
// processes on any number of machines claim them with an atomic
// findAndModify that stamps a lease, keep the lease alive while a handler
// runs, and finish with a write fenced on that lease.
//
// A Client is the whole of it for a Go program: it inserts jobs, and once
// started it runs a pool of handlers, the reaper (which re-queues the jobs
// of workers that died) and retention, periodic jobs, and the maintenance
// the application's kinds contribute. Maintenance runs in one elected
// process at a time, however many run.
//
// A kind is an args type whose Kind method names it; its handler takes the
// args decoded:
//
//	type EmailArgs struct {
//		To string `bson:"to"`
//	}
//
//	func (EmailArgs) Kind() string { return "email" }
//
//	mc, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:27017"))
//	...
//	client, err := docket.NewClient(mc.Database("app"), docket.Config{Logger: logger})
//	docket.MustAddHandler(client, func(ctx context.Context, job *jobs.Job, args EmailArgs) error {
//		return send(ctx, args.To)
//	}, jobs.KindOptions{Timeout: 30 * time.Second})
//	if err := client.Start(ctx); err != nil { ... }
//	res, err := client.Insert(ctx, EmailArgs{To: "a@example.com"}, nil)
//	...
//	err = client.Stop(ctx) // stop claiming, wait for running jobs; ctx's end cancels them
//
// A handler's error steers its job: nil succeeds it, jobs.Permanent ends it
// dead, jobs.Snooze runs it again later, jobs.Cancel cancels it, and any
// other error retries it with backoff. Run is a program's main loop: Start,
// then Stop at SIGINT or SIGTERM.
//
// The README's "From Go" is the shortest start, docs/GO-API.md the
// tour, and the package's Example functions run each part. Package jobs
// holds the job document and the handler's errors; dockettest tests
// handlers, docketotel traces a client and docketprom exports its metrics.
// The worker command (cmd/worker) is a Client with configuration, signals
// and logging around it.
package docket
