package configs

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

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

// UnmarshalYAML reads the mapping limit name → limit, refusing any value
// that is not a whole number with an error that names the limit and the
// line. An empty mapping is no limit.
func (l *Limits) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		*l = nil
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("limits: line %d: must map limit names to limits, such as {\"kind:email\": 3}", n.Line)
	}
	out := Limits{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("limits: line %d: a limit's name must be a plain string", k.Line)
		}
		name := k.Value
		if _, dup := out[name]; dup {
			return fmt.Errorf("limits.%s: line %d: the limit is named twice", name, k.Line)
		}
		var limit int
		if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || v.Decode(&limit) != nil {
			return fmt.Errorf("limits.%s: line %d: %q is not a whole number: give the most jobs that run at once, from 1 to %d",
				name, v.Line, nodeText(v), queue.MaxLimit)
		}
		out[name] = limit
	}
	if len(out) == 0 {
		out = nil
	}
	*l = out
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
func (l Limits) Names() []string {
	names := make([]string, 0, len(l))
	for name := range l {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// limitsValue is Limits as a flag or variable: kind:email=3,queue:bulk=10.
type limitsValue Limits

func (v *limitsValue) String() string {
	var parts []string
	for _, name := range Limits(*v).Names() {
		parts = append(parts, name+"="+strconv.Itoa((*v)[name]))
	}
	return strings.Join(parts, ",")
}

func (v *limitsValue) Set(s string) error {
	out := limitsValue{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		name, val, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Errorf("%q is not NAME=N, such as kind:email=3", p)
		}
		name = strings.TrimSpace(name)
		if _, dup := out[name]; dup {
			return fmt.Errorf("limit %s is named twice", name)
		}
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil {
			return fmt.Errorf("%s: %q is not a whole number", name, strings.TrimSpace(val))
		}
		out[name] = n
	}
	if len(out) == 0 {
		return fmt.Errorf("needs at least one NAME=N, such as kind:email=3")
	}
	*v = out
	return nil
}
