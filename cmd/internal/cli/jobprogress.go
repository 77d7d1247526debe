package cli

import (
	"strconv"
	"time"

	"github.com/docketq/docket/jobs"
)

// progressLine is a job's progress for a person: the percentage ("?" when
// the stored fraction is not a number from 0 to 1), the message and when
// it was reported, each shown (escaped).
func progressLine(p jobs.ProgressReport) string {
	line := "?"
	if pct := p.Percent(); pct >= 0 {
		line = strconv.Itoa(pct) + "%"
	}
	if p.Message != "" {
		line += " " + shown(p.Message)
	}
	if !p.At.IsZero() {
		line += " (reported " + p.At.UTC().Format(time.RFC3339) + ")"
	}
	return line
}
