package configs

import (
	"github.com/docketq/docket"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// ClientPeriodicJobs returns the configured periodic jobs as a
// docket.Client takes them (docket.Config.PeriodicJobs): each job's args
// are the file's mapping under the file's kind.
func (c *Config) ClientPeriodicJobs() []docket.PeriodicJob {
	out := make([]docket.PeriodicJob, len(c.PeriodicJobs))
	for i, p := range c.PeriodicJobs {
		out[i] = docket.PeriodicJob{Name: p.Name, Schedule: p.Schedule, Args: fileArgs{kind: p.Kind, doc: p.Args},
			Queue: p.Queue, Priority: p.Priority, MaxAttempts: p.MaxAttempts}
	}
	return out
}

// fileArgs are a periodic job's args as a configuration file gives them: a
// kind, and a document of no Go type.
type fileArgs struct {
	kind string
	doc  any
}

// Kind implements jobs.Args.
func (a fileArgs) Kind() string { return a.kind }

// MarshalBSON encodes the file's document; none is {}.
func (a fileArgs) MarshalBSON() ([]byte, error) {
	if a.doc == nil {
		return bson.Marshal(bson.D{})
	}
	return bson.Marshal(a.doc)
}
