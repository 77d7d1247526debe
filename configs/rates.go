package configs

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/docketq/docket/queue"
	"gopkg.in/yaml.v3"
)

// ratesValue is the rate limits of the configuration: a limit's name,
// "kind:KIND" or "queue:QUEUE", → at most N starts per period, with a
// burst. In YAML, a mapping: rates: {"kind:email": "14/s burst 5"}; in
// DOCKET_RATES and --rates, kind:email=14/s burst 5,queue:bulk=600/m.
type ratesValue map[string]queue.Rate

// ratesForm is how rates read.
var ratesForm = namedForm[queue.Rate]{setting: "rates", noun: "rate", pair: "NAME=RATE", example: "14/s burst 5", parse: queue.ParseRate}

func (v *ratesValue) String() string { return formatNamed(*v) }

func (v *ratesValue) Set(s string) error { return ratesForm.set(s, (*map[string]queue.Rate)(v)) }

func (v *ratesValue) decodeYAML(n *yaml.Node) error {
	return ratesForm.decode(n, (*map[string]queue.Rate)(v))
}

// partitionsValue is the partition limits of the configuration: a
// limit's name → at most N jobs running at once per value of an args
// field. In YAML, a mapping: partitionLimits: {"kind:email": "2 per
// customerId"}; in DOCKET_PARTITION_LIMITS and --partition-limits,
// kind:email=2 per customerId,queue:bulk=1 per tenant.
type partitionsValue map[string]queue.PartitionLimit

// partitionsForm is how partition limits read.
var partitionsForm = namedForm[queue.PartitionLimit]{setting: "partitionLimits", noun: "partition limit", pair: "NAME=N per FIELD", example: "2 per customerId", parse: queue.ParsePartitionLimit}

func (v *partitionsValue) String() string { return formatNamed(*v) }

func (v *partitionsValue) Set(s string) error {
	return partitionsForm.set(s, (*map[string]queue.PartitionLimit)(v))
}

func (v *partitionsValue) decodeYAML(n *yaml.Node) error {
	return partitionsForm.decode(n, (*map[string]queue.PartitionLimit)(v))
}

// namedForm is how a mapping of limit names to values written as text
// (a rate, a partition limit) reads.
type namedForm[T any] struct {
	setting, noun, example string
	pair                   string // how a flag writes one: NAME=...
	parse                  func(string) (T, error)
}

// decode reads the YAML mapping n into *out (nil when empty).
func (f namedForm[T]) decode(n *yaml.Node, out *map[string]T) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		*out = nil
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf(`%s: line %d: must map limit names to %ss, such as {"kind:email": %q}`, f.setting, n.Line, f.noun, f.example)
	}
	m := map[string]T{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s: line %d: each entry is a limit's name and a %s such as %s", f.setting, k.Line, f.noun, f.example)
		}
		val, err := f.parse(v.Value)
		if err != nil {
			return fmt.Errorf("%s.%s: line %d: %w", f.setting, k.Value, v.Line, err)
		}
		m[k.Value] = val
	}
	if len(m) == 0 {
		m = nil // {} is the default, none, as for the limits
	}
	*out = m
	return nil
}

// set reads s, NAME=VALUE,..., into *out, as a flag or a variable.
func (f namedForm[T]) set(s string, out *map[string]T) error {
	m := map[string]T{}
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return fmt.Errorf("%s: %q: write %s, such as kind:email=%s", f.setting, part, f.pair, f.example)
		}
		name = strings.TrimSpace(name)
		v, err := f.parse(val)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", f.setting, name, err)
		}
		if _, twice := m[name]; twice {
			return fmt.Errorf("%s.%s: the %s is named twice", f.setting, name, f.noun)
		}
		m[name] = v
	}
	*out = m
	return nil
}

// formatNamed writes m as set reads it.
func formatNamed[T fmt.Stringer](m map[string]T) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, name+"="+m[name].String())
	}
	return strings.Join(parts, ",")
}
