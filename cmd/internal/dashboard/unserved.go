package dashboard

import (
	"fmt"
	"strings"

	"github.com/docketq/docket/queue"
)

// unservedRows bounds the overview's list of queue and kind pairs no live
// worker serves (another application can write thousands of kinds).
const unservedRows = 20

// unservedView is the overview's section on the waiting jobs whose kind
// no live worker serves on their queue: they wait, unnoticed otherwise,
// until a worker that serves them starts.
type unservedView struct {
	// Jobs is how many jobs wait so; 0 hides the section.
	Jobs int64
	// NoWorker is set when no worker process is alive at all: the page
	// says that rather than list every kind.
	NoWorker bool
	Rows     []unservedRow
	// Left is how many pairs are not listed.
	Left int
	// Kinds says what live workers serve.
	Kinds string
}

type unservedRow struct {
	Queue, Kind, Link string
	Waiting           int64
}

// unservedSection reads, from the counts, the waiting jobs no live worker
// serves.
func unservedSection(served queue.Served, stats []queue.QueueStats) unservedView {
	var v unservedView
	for i, u := range served.Unserved(stats) {
		v.Jobs += u.Waiting
		if i >= unservedRows {
			v.Left++
			continue
		}
		v.Rows = append(v.Rows, unservedRow{Queue: u.Queue, Kind: u.Kind, Waiting: u.Waiting,
			Link: jobsURL("queue", u.Queue, "kind", u.Kind, "state", "available")})
	}
	v.NoWorker = served.Alive == 0
	kinds := served.Kinds()
	switch {
	case len(kinds) > unservedRows:
		v.Kinds = fmt.Sprintf("%d kinds (listed on the workers' registry documents)", len(kinds))
	case len(kinds) == 1:
		v.Kinds = "the kind " + kinds[0]
	default:
		v.Kinds = "the kinds " + strings.Join(kinds, ", ")
	}
	return v
}
