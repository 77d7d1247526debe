package configs

import (
	"fmt"
	"strings"
	"time"
)

// reaper.schedule, a cron string, was replaced by reaper.interval, a
// duration like every other interval of docket's. A file or environment
// that still sets the old key is refused with the line to write instead,
// rather than as an unknown key, or worse, silently ignored (an
// environment variable nothing reads).

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
