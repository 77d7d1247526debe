package configs

import (
	"errors"
	"fmt"
	"slices"

	"github.com/docketq/docket"
	"go.mongodb.org/mongo-driver/v2/bson"
	"gopkg.in/yaml.v3"
)

// periodicJobsValue is the periodic jobs of the configuration, a sequence
// of mappings in the file only: each job's args are the file's mapping
// under the file's kind.
type periodicJobsValue []docket.PeriodicJob

// periodicJobFile is one periodic job as the file writes it.
type periodicJobFile struct {
	Name        string `yaml:"name"`
	Schedule    string `yaml:"schedule"`
	Kind        string `yaml:"kind"`
	Args        any    `yaml:"args"`
	Queue       string `yaml:"queue"`
	Priority    int    `yaml:"priority"`
	MaxAttempts int    `yaml:"maxAttempts"`
}

// periodicJobKeys are the keys of a periodic job in the file.
var periodicJobKeys = []string{"name", "schedule", "kind", "args", "queue", "priority", "maxAttempts"}

func (v *periodicJobsValue) String() string { return fmt.Sprintf("%d periodic jobs", len(*v)) }

func (v *periodicJobsValue) Set(string) error {
	return errors.New("periodic jobs are set in the configuration file only")
}

// decodeYAML reads the sequence n, refusing a key a periodic job does not
// have, with its line.
func (v *periodicJobsValue) decodeYAML(n *yaml.Node) error {
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("periodicJobs: line %d: must be a list of jobs, such as [{name: nightly, schedule: \"@daily\", kind: report}]", n.Line)
	}
	out := make([]docket.PeriodicJob, len(n.Content))
	for i, item := range n.Content {
		item = resolve(item) // an alias (*job) is checked as the job it names
		if item.Kind != yaml.MappingNode {
			return fmt.Errorf("periodicJobs[%d]: line %d: must be a mapping such as {name: nightly, schedule: \"@daily\", kind: report}", i, item.Line)
		}
		for j := 0; j < len(item.Content); j += 2 {
			if k := item.Content[j]; !slices.Contains(periodicJobKeys, k.Value) {
				return fmt.Errorf("periodicJobs[%d]: line %d: %s is not a periodic job's key (%v)", i, k.Line, k.Value, periodicJobKeys)
			}
		}
		var p periodicJobFile
		if err := item.Decode(&p); err != nil {
			return yamlError(fmt.Sprintf("periodicJobs[%d]", i), err)
		}
		out[i] = docket.PeriodicJob{Name: p.Name, Schedule: p.Schedule, Args: fileArgs{kind: p.Kind, doc: p.Args},
			Queue: p.Queue, Priority: p.Priority, MaxAttempts: p.MaxAttempts}
	}
	*v = out
	return nil
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
