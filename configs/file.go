package configs

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// LoadFile reads the YAML file at path into c, leaving settings the file
// does not name as they were. Unknown keys are errors.
func LoadFile(path string, c *Config) error {
	return LoadFileApp(path, c, nil)
}

// LoadFileApp is LoadFile for a file that may also hold app's keys (nil
// for none), those of its Settings: a key that neither docket nor app
// knows is an error naming its line.
func LoadFileApp(path string, c *Config, app App) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	ss := fileSettings(c)
	if app != nil {
		if err := checkApp(ss, app); err != nil {
			return err
		}
		ss = append(ss, app.Settings()...)
	}
	if err := decodeFile(b, ss); err != nil {
		return fmt.Errorf("config file %s: %s", path, redactFile(err.Error(), b))
	}
	return nil
}

// decodeFile decodes the YAML document b into the settings ss, each found
// by its key path; a key that leads to none, or one given twice, is an
// error. Merge keys (<<: *base) are expanded first.
func decodeFile(b []byte, ss []Setting) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return err
	}
	if len(doc.Content) == 0 {
		return nil // an empty file
	}
	if err := mapKeys(&doc); err != nil {
		return err
	}
	f := fileKeys{settings: map[string]Setting{}, sections: map[string]bool{}}
	for _, s := range ss {
		f.settings[s.field] = s
		for p := s.field; strings.Contains(p, "."); {
			p = p[:strings.LastIndex(p, ".")]
			f.sections[p] = true
		}
	}
	return f.decode(doc.Content[0], "")
}

// fileKeys are the keys a file may hold: settings by their path, and the
// sections (mappings) that lead to them.
type fileKeys struct {
	settings map[string]Setting
	sections map[string]bool
}

// decode reads the mapping n, the section at path prefix ("" for the
// document).
func (f fileKeys) decode(n *yaml.Node, prefix string) error {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // a section left empty
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: %s must be a mapping of settings", n.Line, cmp.Or(prefix, "the file"))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if strings.Contains(k.Value, ".") {
			return fmt.Errorf("line %d: %s: write a setting's key nested, one section per line (worker:\n  lease: 30s for worker.lease), not dotted", k.Line, k.Value)
		}
		path := joinPath(prefix, k.Value)
		if err := f.decodeKey(k, resolve(v), path); err != nil {
			return err
		}
	}
	return nil
}

// decodeKey reads v, the value of key k at path.
func (f fileKeys) decodeKey(k, v *yaml.Node, path string) error {
	if s, ok := f.settings[path]; ok {
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			return nil // left to its default
		}
		if err := s.value.decodeYAML(v); err != nil {
			return yamlError(path, err)
		}
		return nil
	}
	if f.sections[path] {
		return f.decode(v, path)
	}
	if path == "reaper.schedule" {
		return fmt.Errorf("line %d: reaper.schedule: %q: %s", k.Line, v.Value, reapScheduleReplaced(v.Value))
	}
	return fmt.Errorf("line %d: field %s not found: %s is not a setting", k.Line, k.Value, path)
}

// resolve is n, or the node it is an alias of.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// yamlError names path in err, a value's decoding error; the decoders of
// structured settings (capacities, rates) name it themselves.
func yamlError(path string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return fmt.Errorf("%s: %s", path, strings.Join(te.Errors, "; "))
	}
	return err
}

// redactFile redacts from msg, an error about the YAML text b, the password
// of any connection string b holds: a YAML error can quote a value, and the
// URI is not known yet when the file does not decode.
func redactFile(msg string, b []byte) string {
	for _, line := range strings.Split(string(b), "\n") {
		_, v, ok := strings.Cut(line, ":")
		if !ok || !strings.Contains(v, "@") {
			continue
		}
		msg = Redact(msg, strings.Trim(v, " \t\r'\""))
	}
	return msg
}
