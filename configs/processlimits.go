package configs

import (
	"fmt"

	"github.com/docketq/docket/queue"
	"gopkg.in/yaml.v3"
)

// ProcessLimits are the worker process's own concurrency limits: a
// limit's name, "kind:KIND" or "queue:QUEUE" as for Limits, → the most of
// its jobs this process holds at once (docket.Config.ProcessLimits). Unlike
// Limits they are never shared: each process enforces its own, and a
// process started without them has none.
//
// In YAML, a mapping: processLimits: {"kind:resize": 2}; in
// DOCKET_PROCESS_LIMITS and --process-limits, kind:resize=2,queue:bulk=4.
type ProcessLimits map[string]int

// processLimitsForm is how ProcessLimits read in the file; the flag and
// the variable read as Limits do (limitsValue).
var processLimitsForm = countsForm{
	setting: "processLimits", mapping: "limit names to limits", yamlExample: `{"kind:resize": 2}`,
	keyName: "a limit's name", noun: "limit", value: "the most jobs this process holds at once",
	pair: "NAME=N", pairExample: "kind:resize=2", max: queue.MaxLimit,
}

// UnmarshalYAML reads the mapping limit name → limit, refusing any value
// that is not a whole number with an error that names the limit and the
// line. An empty mapping is no limit.
func (l *ProcessLimits) UnmarshalYAML(n *yaml.Node) error {
	m, err := decodeCounts(n, processLimitsForm)
	if err != nil {
		return err
	}
	*l = m
	return nil
}

// Validate reports the first process limit whose name or value is
// invalid: names read as Limits' do, and values run from 1 (0 or less
// would hold no job: leave the limit out instead).
func (l ProcessLimits) Validate() error {
	for _, name := range l.Names() {
		n := l[name]
		if _, _, err := queue.ParseLimitName(name); err != nil {
			return fmt.Errorf("processLimits: %w", err)
		}
		if n < 1 || n > queue.MaxLimit {
			return fmt.Errorf("processLimits.%s: %d must be from 1 to %d, the most jobs of it this process holds at once", name, n, queue.MaxLimit)
		}
	}
	return nil
}

// Names returns the limits of l in name order.
func (l ProcessLimits) Names() []string { return sortedNames(l) }
