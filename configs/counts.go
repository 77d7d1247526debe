package configs

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// countsForm says how a setting that maps names to whole numbers
// (Capacities, Limits) reads and words its errors.
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
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s.%s: line %d: the %s is named twice", f.setting, name, k.Line, f.noun)
		}
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
