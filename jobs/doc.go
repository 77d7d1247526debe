// Package jobs defines docket's job document, its states, the errors a
// handler returns to steer a job, and the registry that maps a job kind to
// its handler.
//
// An args type names its kind, and a handler steers its job by the error it
// returns; package docket registers the handler and inserts the jobs:
//
//	type EmailArgs struct {
//		To string `bson:"to"`
//	}
//
//	func (EmailArgs) Kind() string { return "email" }
//
//	func sendWelcome(ctx context.Context, job *jobs.Job, a EmailArgs) error {
//		if a.To == "" {
//			return jobs.Permanent(errors.New("no address")) // dead at once
//		}
//		if !mailerUp() {
//			return jobs.Snooze(time.Minute) // again later, the attempt not counted
//		}
//		return send(ctx, a.To) // nil: succeeded; another error: retried with backoff
//	}
//
//	docket.MustAddHandler(client, sendWelcome, jobs.KindOptions{Timeout: time.Minute})
//
// The job document is a public contract: any application can enqueue a job
// with a plain insert into the jobs collection as long as it follows the
// schema documented on [Job] and in the README.
package jobs
