package configs

import (
	"cmp"
	"errors"
	"reflect"
	"slices"
	"strings"
)

// settingNames is a replacer of docket.Config's field names, as the
// client's errors name them (Config.Lease), by the settings of c that set
// them (worker.lease): the field a setting's value points at.
func settingNames(c *Config) *strings.Replacer {
	client := reflect.ValueOf(&c.Client).Elem()
	var pairs [][2]string
	for _, s := range fileSettings(c) {
		for i := range client.NumField() {
			if f := client.Field(i); valueAddr(s.value) == f.Addr().Pointer() {
				pairs = append(pairs, [2]string{"Config." + client.Type().Field(i).Name, s.field})
			}
		}
	}
	// The longest first, so that no name is replaced by a prefix of it.
	slices.SortFunc(pairs, func(a, b [2]string) int { return cmp.Compare(len(b[0]), len(a[0])) })
	var old []string
	for _, p := range pairs {
		old = append(old, p[0], p[1])
	}
	return strings.NewReplacer(old...)
}

// valueAddr is the address of the variable v sets.
func valueAddr(v value) uintptr {
	if cv, ok := v.(countsValue); ok {
		return reflect.ValueOf(cv.m).Pointer()
	}
	return reflect.ValueOf(v).Pointer()
}

// renameSettings is err with docket.Config's field names replaced by the
// settings of c that set them.
func renameSettings(c *Config, err error) error {
	return errors.New(settingNames(c).Replace(err.Error()))
}
