// Package store is docket's jobs store as its engine uses it: claiming
// (one job, or a batch under one lease token), heartbeats, the writes that
// finish an attempt or give it back, releasing a claim whose reply was
// lost, reaping expired leases and retention, with the caches of paused
// queues and concurrency limits that every claim reads.
//
// Every write by a lease holder is fenced on the job's id, its running
// state and the holder's lease token, so a worker that lost its lease can
// change nothing (jobs.ErrLeaseLost). A write may be applied with its reply
// lost, so a fenced write that matches nothing reads the job back before it
// reports jobs.ErrLeaseLost: an earlier try of its own found in place is
// success; when that read fails too, the error wraps ErrOutcomeUnknown and
// trying the write again is safe.
//
// The code is written for MongoDB. What a server speaking its protocol may
// lack (the embedded server of docket's tests lacks some of it) is
// detected and named in one place, server.go; the code elsewhere refers to
// a feature by name (Server).
//
// A queue.Client, which an application enqueues and administers with,
// holds a Store; package worker, package recovery and docket's tests reach
// it with Of(client). Being internal, this package cannot be imported from
// outside docket, so no application can claim or write behind a lease.
package store
