package dashboard

import (
	"strconv"
	"time"

	"github.com/docketq/docket/jobs"
)

// progressView is a job's progress as the pages show it (the "progress"
// template): a bar at its percentage (none when the fraction is unknown),
// the percentage and message, and when it was reported.
// html/template escapes every string.
type progressView struct {
	Known    bool   // the fraction is a number from 0 to 1
	Percent  int    // 0 to 100, when Known
	Label    string // "42%", or "?" when not Known
	Message  string // as bounded by ProgressReport.UnmarshalBSONValue
	Reported string // when it was reported, "" when not known
}

// progressOf is the view of p, nil when the job has no progress.
func progressOf(p *jobs.ProgressReport) *progressView {
	if p == nil {
		return nil
	}
	v := &progressView{Label: "?", Message: p.Message}
	if pct := p.Percent(); pct >= 0 {
		v.Known, v.Percent, v.Label = true, pct, strconv.Itoa(pct)+"%"
	}
	if !p.At.IsZero() {
		v.Reported = p.At.UTC().Format(time.RFC3339) + " (" + since(p.At) + ")"
	}
	return v
}
