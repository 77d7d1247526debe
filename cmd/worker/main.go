// Command worker runs a pool of goroutines that claim and run docket jobs,
// and the reaper that re-queues the jobs of workers that died. Run as many
// as you like, on any machines, against the same database.
package main

import (
	"os"

	"github.com/docketq/docket/cmd/internal/cli"
	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
)

func main() {
	os.Exit(cli.Worker(os.Args[1:], os.Stdout, os.Stderr,
		func(reg *jobs.Registry, db *mongo.Database, q *queue.Client, log *zap.Logger) error {
			return handlers.Register(reg, handlers.Deps{DB: db, Queue: q, Logger: log})
		}))
}
