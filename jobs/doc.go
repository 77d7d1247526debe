// Package jobs defines docket's job document, its states, the errors a
// handler returns to steer a job, and the registry that maps a job kind to
// its handler.
//
// The job document is a public contract: any application can enqueue a job
// with a plain insert into the jobs collection as long as it follows the
// schema documented on [Job] and in the README.
package jobs
