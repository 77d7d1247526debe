package configs

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/docketq/docket/queue"
	"gopkg.in/yaml.v3"
)

// countsForm says how a setting that maps names to whole numbers
// (capacities, limits, process limits) reads, what it accepts and how its
// errors are worded.
type countsForm struct {
	setting     string // its key: "capacities"
	mapping     string // what maps to what: "queue names to capacities"
	yamlExample string // {orders: 5}
	keyName     string // a key, as an error names it: "a queue name"
	noun        string // one entry: "queue"
	value       string // what a value gives: "the most unfinished jobs of the queue"
	pair        string // one entry in a list: "QUEUE=N"
	pairExample string // orders=5
	max         int
	validName   func(name string) error
	outOfRange  func(name string, n int) string // appended to a value's error
}

// capacitiesForm is how capacities read: queue name → the most admitted,
// unfinished jobs of that queue. 0, which would refuse every enqueue, is
// refused: closing a queue is an operator's decision.
var capacitiesForm = countsForm{
	setting: "capacities", mapping: "queue names to capacities", yamlExample: "{orders: 5}",
	keyName: "a queue name", noun: "queue", value: "the most unfinished jobs of the queue",
	pair: "QUEUE=N", pairExample: "orders=5", max: queue.MaxCapacity, validName: queue.ValidQueueName,
	outOfRange: zeroHint("0 would refuse every enqueue: close a queue with `docketctl capacity %s 0`, or leave it out of the file"),
}

// limitsForm is how limits read: "kind:KIND" or "queue:QUEUE" → the most
// of its jobs that run at once across every worker.
var limitsForm = countsForm{
	setting: "limits", mapping: "limit names to limits", yamlExample: `{"kind:email": 3}`,
	keyName: "a limit's name", noun: "limit", value: "the most jobs that run at once",
	pair: "NAME=N", pairExample: "kind:email=3", max: queue.MaxLimit, validName: validLimitName,
	outOfRange: zeroHint("0 would run none: stop them with `docketctl limit %s 0`, or leave it out of the file"),
}

// processLimitsForm is how process limits read: named as limits are, →
// the most of its jobs this process holds at once.
var processLimitsForm = countsForm{
	setting: "processLimits", mapping: "limit names to limits", yamlExample: `{"kind:resize": 2}`,
	keyName: "a limit's name", noun: "limit", value: "the most jobs this process holds at once",
	pair: "NAME=N", pairExample: "kind:resize=2", max: queue.MaxLimit, validName: validLimitName,
	outOfRange: func(string, int) string { return ", the most jobs of it this process holds at once" },
}

// zeroHint words what a 0 of the named entry would do, after a range
// error.
func zeroHint(format string) func(string, int) string {
	return func(name string, n int) string {
		if n != 0 {
			return ""
		}
		return " (" + fmt.Sprintf(format, name) + ")"
	}
}

func validLimitName(name string) error {
	_, _, err := queue.ParseLimitName(name)
	return err
}

// validate reports the first entry of m whose name or value f refuses.
func (f countsForm) validate(m map[string]int) error {
	for _, name := range sortedNames(m) {
		if err := f.validName(name); err != nil {
			return fmt.Errorf("%s: %w", f.setting, err)
		}
		if n := m[name]; n < 1 || n > f.max {
			return fmt.Errorf("%s.%s: %d must be from 1 to %d%s", f.setting, name, n, f.max, f.outOfRange(name, n))
		}
	}
	return nil
}

// countsValue is a setting of the form f as a flag, a variable
// (NAME=N,NAME=N) and a file's mapping give it.
type countsValue struct {
	m *map[string]int
	f *countsForm
}

func (v countsValue) String() string {
	if v.m == nil {
		return ""
	}
	return formatCounts(*v.m)
}

func (v countsValue) Set(s string) error {
	m, err := parseCounts(s, *v.f)
	if err == nil {
		*v.m = m
	}
	return err
}

func (v countsValue) decodeYAML(n *yaml.Node) error {
	m, err := decodeCounts(n, *v.f)
	if err == nil {
		*v.m = m
	}
	return err
}

// decodeCounts reads a YAML mapping of names to whole numbers, refusing
// any value that is not one with an error that names the entry and the
// line. A null or empty mapping is none (nil).
func decodeCounts(n *yaml.Node, f countsForm) (map[string]int, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: line %d: must map %s, such as %s", f.setting, n.Line, f.mapping, f.yamlExample)
	}
	out := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%s: line %d: %s must be a plain string", f.setting, k.Line, f.keyName)
		}
		name := k.Value
		var count int
		if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || v.Decode(&count) != nil {
			return nil, fmt.Errorf("%s.%s: line %d: %q is not a whole number: give %s, from 1 to %d",
				f.setting, name, v.Line, nodeText(v), f.value, f.max)
		}
		out[name] = count
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// parseCounts reads a flag's or variable's list NAME=N,NAME=N.
func parseCounts(s string, f countsForm) (map[string]int, error) {
	out := map[string]int{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		name, val, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not %s, such as %s", p, f.pair, f.pairExample)
		}
		name = strings.TrimSpace(name)
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s %s is named twice", f.noun, name)
		}
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a whole number", name, strings.TrimSpace(val))
		}
		out[name] = n
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("needs at least one %s, such as %s", f.pair, f.pairExample)
	}
	return out, nil
}

// formatCounts is m as a list NAME=N,NAME=N, in name order.
func formatCounts(m map[string]int) string {
	var parts []string
	for _, name := range sortedNames(m) {
		parts = append(parts, name+"="+strconv.Itoa(m[name]))
	}
	return strings.Join(parts, ",")
}

// sortedNames returns the names of m in order.
func sortedNames(m map[string]int) []string { return slices.Sorted(maps.Keys(m)) }

// nodeText is how a value looked in the file, for errors.
func nodeText(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return n.Value
	}
	b, err := yaml.Marshal(n)
	if err != nil {
		return n.Tag
	}
	return strings.TrimSpace(string(b))
}
