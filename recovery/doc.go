// Package recovery runs docket's maintenance on cron schedules in every
// worker process: the reaper, which re-queues jobs whose worker died, and
// retention, which deletes old finished jobs. Every pass is safe to run from
// many processes at once: each write is fenced on what it read.
package recovery
