package configs

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// StringSetting is a setting of *p, the key field in the file (a.b is b
// under a), env in the environment and flag on the command line; with env
// and flag "", it is set in the file only.
func StringSetting(field, env, flag, usage string, p *string) Setting {
	return Setting{field, env, flag, usage, (*stringValue)(p)}
}

// IntSetting is StringSetting for an int.
func IntSetting(field, env, flag, usage string, p *int) Setting {
	return Setting{field, env, flag, usage, (*intValue)(p)}
}

// DurationSetting is StringSetting for a time.Duration.
func DurationSetting(field, env, flag, usage string, p *time.Duration) Setting {
	return Setting{field, env, flag, usage, (*durationValue)(p)}
}

// BoolSetting is StringSetting for a bool: true or false in the file and
// the environment; --flag alone is --flag=true.
func BoolSetting(field, env, flag, usage string, p *bool) Setting {
	return Setting{field, env, flag, usage, (*boolValue)(p)}
}

// StringsSetting is StringSetting for a list of strings: a YAML list in
// the file, comma-separated in the environment and on the command line.
func StringsSetting(field, env, flag, usage string, p *[]string) Setting {
	return Setting{field, env, flag, usage, (*listValue)(p)}
}

// FileSetting is a setting of *p, which must be a non-nil pointer, read
// from the file only: whatever the file writes under field (a list, a map,
// a mapping of a struct's fields) is decoded into *p as yaml.v3 decodes
// it, yaml tags included, and strictly: a key that *p's type has no field
// for is an error naming its line.
func FileSetting(field, usage string, p any) Setting {
	return Setting{field, "", "", usage, fileValue{field, p}}
}

// fileValue is a FileSetting's value.
type fileValue struct {
	field string
	p     any
}

func (v fileValue) String() string { return "" } // never a flag

func (v fileValue) Set(string) error {
	return fmt.Errorf("%s is set in the configuration file only", v.field)
}

// decodeYAML decodes n into v.p, then refuses a key its type does not
// have. yaml.v3 decodes first: it refuses an alias that contains itself.
func (v fileValue) decodeYAML(n *yaml.Node) error {
	if err := n.Decode(v.p); err != nil {
		return err
	}
	return knownKeys(n, reflect.TypeOf(v.p), v.field)
}

// unmarshalerType is yaml.Unmarshaler's type: a type that decodes itself
// checks its own keys.
var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// knownKeys refuses the first key of n, at path, that t (decoded from n)
// has no field for.
func knownKeys(n *yaml.Node, t reflect.Type, path string) error {
	n = resolve(n)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind == yaml.MappingNode {
			return knownFields(n, t, path)
		}
	case reflect.Map, reflect.Slice, reflect.Array:
		return knownElems(n, t.Elem(), path)
	}
	return nil
}

// knownElems runs knownKeys on each value of the mapping or the list n,
// at path, of type elem.
func knownElems(n *yaml.Node, elem reflect.Type, path string) error {
	if n.Kind != yaml.MappingNode && n.Kind != yaml.SequenceNode {
		return nil
	}
	for i, c := range n.Content {
		if n.Kind == yaml.MappingNode && i%2 == 0 {
			continue // a key
		}
		if err := knownKeys(c, elem, childPath(n, i, path)); err != nil {
			return err
		}
	}
	return nil
}

// knownFields refuses the first key of the mapping n, at path, that the
// struct t has no field for.
func knownFields(n *yaml.Node, t reflect.Type, path string) error {
	fields, anyKey := yamlFields(t)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		ft, ok := fields[k.Value]
		if !ok && !anyKey {
			return fmt.Errorf("line %d: field %s not found: %s is not a key of %s", k.Line, k.Value, k.Value, path)
		}
		if ok {
			if err := knownKeys(n.Content[i+1], ft, joinPath(path, k.Value)); err != nil {
				return err
			}
		}
	}
	return nil
}

// yamlFields are the keys yaml.v3 decodes into the struct t, with their
// types: a field's tag name, or its name in lower case; an inline struct's
// keys too. anyKey is whether t has an inline map, which takes any key.
func yamlFields(t reflect.Type) (fields map[string]reflect.Type, anyKey bool) {
	fields = map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if strings.Contains(","+opts+",", ",inline,") {
			if f.Type.Kind() == reflect.Map {
				anyKey = true
				continue
			}
			inner, innerAny := yamlFields(f.Type)
			for k, v := range inner {
				fields[k] = v
			}
			anyKey = anyKey || innerAny
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = f.Type
	}
	return fields, anyKey
}

// checkApp refuses an app's settings that clash with docket's ss or with
// each other: a key that is another's, or leads to one (a beside a.b), or
// a variable or a flag named twice; and a FileSetting not given a non-nil
// pointer. Each is a programming error of the app, named.
func checkApp(ss []Setting, app App) error {
	as := app.Settings()
	for _, s := range as {
		if fv, ok := s.value.(fileValue); ok {
			if rv := reflect.ValueOf(fv.p); rv.Kind() != reflect.Pointer || rv.IsNil() {
				return fmt.Errorf("configs: the app's setting %s: FileSetting needs a non-nil pointer, not %T", s.field, fv.p)
			}
		}
	}
	return checkClashes(append(append([]Setting(nil), ss...), as...))
}

// checkClashes refuses the first setting of ss whose key, variable or
// flag an earlier one has taken.
func checkClashes(ss []Setting) error {
	keys, sections := map[string]bool{}, map[string]bool{}
	names := map[string]string{} // variable or flag → the key it sets
	for _, s := range ss {
		if keys[s.field] || sections[s.field] {
			return fmt.Errorf("configs: the app's setting %s is one of docket's keys or another of the app's, or a section of them", s.field)
		}
		for p := s.field; strings.Contains(p, "."); {
			p = p[:strings.LastIndex(p, ".")]
			if keys[p] {
				return fmt.Errorf("configs: the app's setting %s is under %s, a setting of its own", s.field, p)
			}
			sections[p] = true
		}
		keys[s.field] = true
		if err := takeNames(names, s); err != nil {
			return err
		}
	}
	return nil
}

// takeNames records in names the variable and the flag of s, refusing
// one an earlier setting took.
func takeNames(names map[string]string, s Setting) error {
	for _, n := range []string{s.env, "--" + s.flag} {
		if n == "" || n == "--" {
			continue
		}
		if other, taken := names[n]; taken {
			return fmt.Errorf("configs: the app's setting %s takes %s, already %s's", s.field, n, other)
		}
		names[n] = s.field
	}
	return nil
}
