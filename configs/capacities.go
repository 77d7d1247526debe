package configs

import (
	"fmt"

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

// capacitiesForm is how Capacities read.
var capacitiesForm = countsForm{
	setting: "capacities", mapping: "queue names to capacities", yamlExample: "{orders: 5}",
	keyName: "a queue name", noun: "queue", value: "the most unfinished jobs of the queue",
	pair: "QUEUE=N", pairExample: "orders=5", max: queue.MaxCapacity,
}

// UnmarshalYAML reads the mapping queue name → capacity, refusing any
// value that is not a whole number with an error that names the queue and
// the line. An empty mapping is no capacity.
func (c *Capacities) UnmarshalYAML(n *yaml.Node) error {
	m, err := decodeCounts(n, capacitiesForm)
	if err != nil {
		return err
	}
	*c = m
	return nil
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
func (c Capacities) Names() []string { return sortedNames(c) }

// capacitiesValue is Capacities as a flag or variable: orders=5,bulk=1000.
type capacitiesValue Capacities

func (v *capacitiesValue) String() string { return formatCounts(*v) }

func (v *capacitiesValue) Set(s string) error {
	m, err := parseCounts(s, capacitiesForm)
	if err != nil {
		return err
	}
	*v = m
	return nil
}
