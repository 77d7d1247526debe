package configs

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// reaper.schedule, a cron string, was replaced by reaper.interval, a
// duration like every other interval of docket's. A file or environment
// that still sets the old key is refused with the line to write instead,
// rather than with the decoder's "field schedule not found", or worse,
// silently ignored (an environment variable nothing reads).

// oldReapSchedule reports the YAML document b setting reaper.schedule.
func oldReapSchedule(b []byte) error {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&doc); err != nil || len(doc.Content) == 0 {
		return nil // empty, or the strict decode says what is wrong
	}
	reaper := mappingValue(doc.Content[0], "reaper")
	if reaper == nil {
		return nil
	}
	for i := 0; i+1 < len(reaper.Content); i += 2 {
		if k, v := reaper.Content[i], reaper.Content[i+1]; k.Value == "schedule" {
			return fmt.Errorf("line %d: reaper.schedule: %q: %s", k.Line, v.Value, reapScheduleReplaced(v.Value))
		}
	}
	return nil
}

// mappingValue is the value of key in the mapping node m, nil when m is
// not a mapping or has no such key.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// reapScheduleReplaced says what replaces the old reaper schedule s.
func reapScheduleReplaced(s string) string {
	msg := "the reaper's cron schedule was replaced by reaper.interval, a duration (DOCKET_REAP_INTERVAL, --reap-interval)"
	if d, ok := strings.CutPrefix(strings.TrimSpace(s), "@every "); ok {
		if iv, err := time.ParseDuration(strings.TrimSpace(d)); err == nil && iv > 0 {
			return fmt.Sprintf("%s: write reaper.interval: %s instead", msg, iv)
		}
	}
	return msg + `: write the time between passes, such as reaper.interval: 15s`
}
