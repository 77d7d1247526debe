package configs

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/docketq/docket/queue"
	"gopkg.in/yaml.v3"
)

// Rates are rate limits from the configuration: a limit's name,
// "kind:KIND" or "queue:QUEUE", → at most N starts per period, with a
// burst (queue.Client.SetRate). As with Limits, a worker sets each one at
// start, every start; a rate the file does not name is left as it is.
//
// In YAML, a mapping: rates: {"kind:email": "14/s burst 5"}; in
// DOCKET_RATES and --rates, kind:email=14/s burst 5,queue:bulk=600/m.
type Rates map[string]queue.Rate

// ratesForm is how Rates read.
var ratesForm = namedForm[queue.Rate]{setting: "rates", noun: "rate", pair: "NAME=RATE", example: "14/s burst 5", parse: queue.ParseRate}

// UnmarshalYAML reads the mapping limit name → rate, refusing an entry
// that does not read with an error that names it and its line.
func (r *Rates) UnmarshalYAML(n *yaml.Node) error {
	return ratesForm.decode(n, (*map[string]queue.Rate)(r))
}

// Validate reports the first rate whose name or value is invalid.
func (r Rates) Validate() error { return queue.ValidateRates("rates", r) }

// ratesValue is Rates as a flag or variable: kind:email=14/s burst 5,queue:bulk=600/m.
type ratesValue Rates

func (v *ratesValue) String() string { return formatNamed(*v) }

func (v *ratesValue) Set(s string) error { return ratesForm.set(s, (*map[string]queue.Rate)(v)) }

// PartitionLimits are concurrency limits per value of an args field from
// the configuration: a limit's name, "kind:KIND" or "queue:QUEUE", → at
// most N jobs running at once per value of the field
// (queue.Client.SetPartitionLimit). As with Limits, a worker sets each one
// at start, every start; a limit the file does not name is left as it is.
//
// In YAML, a mapping: partitionLimits: {"kind:email": "2 per customerId"};
// in DOCKET_PARTITION_LIMITS and --partition-limits,
// kind:email=2 per customerId,queue:bulk=1 per tenant.
type PartitionLimits map[string]queue.PartitionLimit

// partitionsForm is how PartitionLimits read.
var partitionsForm = namedForm[queue.PartitionLimit]{setting: "partitionLimits", noun: "partition limit", pair: "NAME=N per FIELD", example: "2 per customerId", parse: queue.ParsePartitionLimit}

// UnmarshalYAML reads the mapping limit name → partition limit, refusing
// an entry that does not read with an error that names it and its line.
func (p *PartitionLimits) UnmarshalYAML(n *yaml.Node) error {
	return partitionsForm.decode(n, (*map[string]queue.PartitionLimit)(p))
}

// Validate reports the first partition limit whose name or value is
// invalid.
func (p PartitionLimits) Validate() error {
	for _, name := range slices.Sorted(maps.Keys(p)) {
		if _, _, err := queue.ParseLimitName(name); err != nil {
			return fmt.Errorf("partitionLimits: %w", err)
		}
		if err := p[name].Validate(); err != nil {
			return fmt.Errorf("partitionLimits.%s: %w", name, err)
		}
	}
	return nil
}

// partitionsValue is PartitionLimits as a flag or variable.
type partitionsValue PartitionLimits

func (v *partitionsValue) String() string { return formatNamed(*v) }

func (v *partitionsValue) Set(s string) error {
	return partitionsForm.set(s, (*map[string]queue.PartitionLimit)(v))
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
		if _, twice := m[k.Value]; twice {
			return fmt.Errorf("%s.%s: line %d: the %s is named twice", f.setting, k.Value, k.Line, f.noun)
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
