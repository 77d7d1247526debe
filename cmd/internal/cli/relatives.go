package cli

import (
	"fmt"
	"io"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
)

// maxShownDependents bounds the dependents show lists for one job.
const maxShownDependents = 50

// showRelatives prints, under a job show printed, the jobs it waits for
// (its parents) and those that wait for it (its dependents), each with its
// state.
func showRelatives(w io.Writer, parents, dependents []queue.Relative, more bool) {
	if len(parents) > 0 {
		fmt.Fprintf(w, "  parents:\n")
		for _, p := range parents {
			note := ""
			if p.Waiting {
				note = " (waited for)"
			}
			fmt.Fprintf(w, "    %s %s%s\n", shown(p.ID), relativeState(p.State), note)
		}
	}
	if len(dependents) > 0 {
		fmt.Fprintf(w, "  dependents:\n")
		for _, d := range dependents {
			fmt.Fprintf(w, "    %s %s\n", shown(d.ID), relativeState(d.State))
		}
		if more {
			fmt.Fprintf(w, "    and more (the first %d shown): find them by their after field\n", len(dependents))
		}
	}
}

// relativeState names a related job's state, or says it is gone.
func relativeState(s jobs.State) string {
	if s == "" {
		return "(not in the collection)"
	}
	return shown(string(s))
}
