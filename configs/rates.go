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

// UnmarshalYAML reads the mapping limit name → rate, refusing an entry
// that does not read with an error that names it and its line.
func (r *Rates) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		*r = nil
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf(`rates: line %d: must map limit names to rates, such as {"kind:email": "14/s burst 5"}`, n.Line)
	}
	out := Rates{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
			return fmt.Errorf("rates: line %d: each entry is a limit's name and a rate such as 14/s", k.Line)
		}
		rate, err := queue.ParseRate(v.Value)
		if err != nil {
			return fmt.Errorf("rates.%s: line %d: %w", k.Value, v.Line, err)
		}
		out[k.Value] = rate
	}
	if len(out) == 0 {
		out = nil // rates: {} is the default, none, as for the limits
	}
	*r = out
	return nil
}

// Validate reports the first rate whose name or value is invalid.
func (r Rates) Validate() error { return queue.ValidateRates("rates", r) }

// ratesValue is Rates as a flag or variable: kind:email=14/s burst 5,queue:bulk=600/m.
type ratesValue Rates

func (v *ratesValue) String() string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(*v)) {
		parts = append(parts, name+"="+(*v)[name].String())
	}
	return strings.Join(parts, ",")
}

func (v *ratesValue) Set(s string) error {
	out := ratesValue{}
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return fmt.Errorf("rates: %q: write NAME=RATE, such as kind:email=14/s burst 5", part)
		}
		rate, err := queue.ParseRate(val)
		if err != nil {
			return fmt.Errorf("rates.%s: %w", strings.TrimSpace(name), err)
		}
		out[strings.TrimSpace(name)] = rate
	}
	*v = out
	return nil
}
