package configs

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// mapKeys expands, in place, the merge keys (<<: *base) of every mapping
// under n, as yaml.v3 reads them into a Go value: a mapping's own keys win
// over merged ones, and an earlier mapping of a merged list over a later
// one. It refuses a key a mapping gives twice itself, naming both lines.
// Each node is expanded once, however many aliases lead to it.
func mapKeys(n *yaml.Node) error {
	m := merger{done: map[*yaml.Node]bool{}, busy: map[*yaml.Node]bool{}}
	return m.walk(n, "")
}

// merger tracks the nodes expanded (done) and those being expanded
// (busy: n and the nodes that contain it).
type merger struct {
	done, busy map[*yaml.Node]bool
}

// walk expands the mappings under n, first reached at path (a.b, or a[2]
// in a list), named in errors.
func (m merger) walk(n *yaml.Node, path string) error {
	n = resolve(n)
	if m.done[n] || m.busy[n] {
		return nil // expanded, or an alias of a node that contains it
	}
	m.busy[n] = true
	for i, c := range n.Content {
		if err := m.walk(c, childPath(n, i, path)); err != nil {
			return err
		}
	}
	if n.Kind == yaml.MappingNode {
		if err := m.expand(n, path); err != nil {
			return err
		}
	}
	delete(m.busy, n)
	m.done[n] = true
	return nil
}

// expand replaces the mapping n's content by its own keys, then those of
// the mappings it merges that it does not give itself.
func (m merger) expand(n *yaml.Node, path string) error {
	var own, merged []*yaml.Node
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMerge(k) {
			from, err := m.merged(k, v)
			if err != nil {
				return err
			}
			merged = append(merged, from...)
			continue
		}
		if line, ok := lines[k.Value]; ok && k.Kind == yaml.ScalarNode {
			return fmt.Errorf("line %d: %s is set twice (also on line %d)", k.Line, joinPath(path, k.Value), line)
		}
		lines[k.Value] = k.Line
		own = append(own, k, v)
	}
	for i := 0; i+1 < len(merged); i += 2 {
		if _, ok := lines[merged[i].Value]; !ok {
			lines[merged[i].Value] = merged[i].Line
			own = append(own, merged[i], merged[i+1])
		}
	}
	n.Content = own
	return nil
}

// merged is the content of the mappings v, the value of the merge key k,
// merges: a mapping, or a list of mappings, expanded already.
func (m merger) merged(k, v *yaml.Node) ([]*yaml.Node, error) {
	from := []*yaml.Node{resolve(v)}
	if from[0].Kind == yaml.SequenceNode {
		from = from[0].Content
	}
	var out []*yaml.Node
	for _, f := range from {
		f = resolve(f)
		if f.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: << must merge a mapping or a list of mappings", k.Line)
		}
		if !m.done[f] {
			return nil, fmt.Errorf("line %d: << merges a mapping that contains it", k.Line)
		}
		out = append(out, f.Content...)
	}
	return out, nil
}

// isMerge is whether k is a merge key: << unquoted.
func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge"
}

// childPath is the path of the i-th node of n's content, n at path.
func childPath(n *yaml.Node, i int, path string) string {
	switch {
	case n.Kind == yaml.SequenceNode:
		return fmt.Sprintf("%s[%d]", path, i)
	case n.Kind == yaml.MappingNode && i%2 == 1:
		return joinPath(path, n.Content[i-1].Value)
	}
	return path
}

// joinPath is key under path ("" for the document).
func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
