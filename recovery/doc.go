// Package recovery runs docket's maintenance on cron schedules: the reaper,
// which re-queues jobs whose worker died, and retention, which deletes old
// finished jobs; periodic jobs; and any Task an application's kinds
// contribute (docket's own handlers contribute the rename sweeper, transfer
// recovery and the tree sweeper). LeaderOnly runs a task only in the
// process that holds the elected leadership. Every pass is safe to run from
// many processes at once all the same: each write is fenced on what it read.
// The package imports no application code.
package recovery
