package configs

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/docketq/docket/queue"
	"gopkg.in/yaml.v3"
)

// Capacities bounds queues from the configuration: queue name → the most
// admitted, unfinished jobs of that queue (queue.Client.SetCapacity). A
// worker sets each one at start, every start, so the last writer wins: a
// worker starting with the file re-applies its values over those set by
// `docketctl capacity` since. A queue the file does not name is left as it
// is (bounded or not): leaving a queue out never clears its capacity.
//
// In YAML, a mapping: capacities: {orders: 5}; in DOCKET_CAPACITIES and
// --capacities, orders=5,bulk=1000.
type Capacities map[string]int

// UnmarshalYAML reads the mapping queue name → capacity, refusing any
// value that is not a whole number with an error that names the queue and
// the line. An empty mapping is no capacity.
func (c *Capacities) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		*c = nil
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("capacities: line %d: must map queue names to capacities, such as {orders: 5}", n.Line)
	}
	out := Capacities{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("capacities: line %d: a queue name must be a plain string", k.Line)
		}
		name := k.Value
		if _, dup := out[name]; dup {
			return fmt.Errorf("capacities.%s: line %d: the queue is named twice", name, k.Line)
		}
		var capacity int
		if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || v.Decode(&capacity) != nil {
			return fmt.Errorf("capacities.%s: line %d: %q is not a whole number: give the most unfinished jobs of the queue, from 1 to %d",
				name, v.Line, nodeText(v), queue.MaxCapacity)
		}
		out[name] = capacity
	}
	if len(out) == 0 {
		out = nil
	}
	*c = out
	return nil
}

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

// Validate reports the first queue whose name or capacity is invalid. A
// capacity of 0 (which refuses every enqueue) is refused here: 0 in this
// file means "the default", and closing a queue is an operator's decision,
// made with `docketctl capacity QUEUE 0`.
func (c Capacities) Validate() error {
	for _, name := range c.Names() {
		n := c[name]
		if err := queue.ValidQueueName(name); err != nil {
			return fmt.Errorf("capacities: %w", err)
		}
		switch {
		case n < 1 || n > queue.MaxCapacity:
			msg := fmt.Sprintf("capacities.%s: %d must be from 1 to %d", name, n, queue.MaxCapacity)
			if n == 0 {
				msg += " (0 would refuse every enqueue: close a queue with `docketctl capacity " + name + " 0`, or leave it out of the file)"
			}
			return fmt.Errorf("%s", msg)
		}
	}
	return nil
}

// Names returns the queues of c in name order.
func (c Capacities) Names() []string {
	names := make([]string, 0, len(c))
	for name := range c {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// capacitiesValue is Capacities as a flag or variable: orders=5,bulk=1000.
type capacitiesValue Capacities

func (v *capacitiesValue) String() string {
	var parts []string
	for _, name := range Capacities(*v).Names() {
		parts = append(parts, name+"="+strconv.Itoa((*v)[name]))
	}
	return strings.Join(parts, ",")
}

func (v *capacitiesValue) Set(s string) error {
	out := capacitiesValue{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		name, val, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Errorf("%q is not QUEUE=N, such as orders=5", p)
		}
		name = strings.TrimSpace(name)
		if _, dup := out[name]; dup {
			return fmt.Errorf("queue %s is named twice", name)
		}
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil {
			return fmt.Errorf("%s: %q is not a whole number", name, strings.TrimSpace(val))
		}
		out[name] = n
	}
	if len(out) == 0 {
		return fmt.Errorf("needs at least one QUEUE=N, such as orders=5")
	}
	*v = out
	return nil
}
