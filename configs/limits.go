package configs

import (
	"fmt"

	"github.com/docketq/docket/queue"
	"gopkg.in/yaml.v3"
)

// Limits are concurrency limits from the configuration: a limit's name,
// "kind:KIND" or "queue:QUEUE", → the most of its jobs that run at once
// across every worker (queue.Client.SetLimit). As with Capacities, a
// worker sets each one at start, every start, so the last writer wins; a
// limit the file does not name is left as it is.
//
// In YAML, a mapping: limits: {"kind:email": 3}; in DOCKET_LIMITS and
// --limits, kind:email=3,queue:bulk=10.
type Limits map[string]int

// limitsForm is how Limits read.
var limitsForm = countsForm{
	setting: "limits", mapping: "limit names to limits", yamlExample: `{"kind:email": 3}`,
	keyName: "a limit's name", noun: "limit", value: "the most jobs that run at once",
	pair: "NAME=N", pairExample: "kind:email=3", max: queue.MaxLimit,
}

// UnmarshalYAML reads the mapping limit name → limit, refusing any value
// that is not a whole number with an error that names the limit and the
// line. An empty mapping is no limit.
func (l *Limits) UnmarshalYAML(n *yaml.Node) error {
	m, err := decodeCounts(n, limitsForm)
	if err != nil {
		return err
	}
	*l = m
	return nil
}

// Validate reports the first limit whose name or value is invalid. 0
// (which stops every job of the limit) is refused, as for capacities: 0
// in this file means "the default"; stopping a kind is an operator's
// decision (`docketctl limit kind:K 0`).
func (l Limits) Validate() error {
	for _, name := range l.Names() {
		n := l[name]
		if _, _, err := queue.ParseLimitName(name); err != nil {
			return fmt.Errorf("limits: %w", err)
		}
		if n < 1 || n > queue.MaxLimit {
			msg := fmt.Sprintf("limits.%s: %d must be from 1 to %d", name, n, queue.MaxLimit)
			if n == 0 {
				msg += " (0 would run none: stop them with `docketctl limit " + name + " 0`, or leave it out of the file)"
			}
			return fmt.Errorf("%s", msg)
		}
	}
	return nil
}

// Names returns the limits of l in name order.
func (l Limits) Names() []string { return sortedNames(l) }

// limitsValue is Limits as a flag or variable: kind:email=3,queue:bulk=10.
type limitsValue Limits

func (v *limitsValue) String() string { return formatCounts(*v) }

func (v *limitsValue) Set(s string) error {
	m, err := parseCounts(s, limitsForm)
	if err != nil {
		return err
	}
	*v = m
	return nil
}
