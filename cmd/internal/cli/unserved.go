package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
)

// Jobs of kinds no live worker serves: they wait, unnoticed, until a
// worker that serves them starts. enqueue warns of them, stats lists them.

// maxUnservedNamed is how many queue and kind pairs a warning or stats
// names before it counts the rest; and how many kinds live workers serve
// are named at most.
const maxUnservedNamed = 10

// enqueued counts the jobs a command enqueues by queue and kind.
type enqueued map[queueKind]int64

type queueKind struct{ queue, kind string }

func (e enqueued) add(queueName, kind string) {
	if queueName == "" {
		queueName = jobs.DefaultQueue
	}
	e[queueKind{queueName, kind}]++
}

// warnUnserved warns on stderr, the exit status unchanged, of the jobs a
// command enqueued whose kind no live worker serves on their queue: a
// misspelt kind waits forever otherwise. When no worker is alive at all it
// says that once. A registry that cannot be read is no warning: the jobs
// are in.
func (e *env) warnUnserved(cmd string, in enqueued) {
	ctx, cancel := context.WithTimeout(e.base, e.cfg.Mongo.Timeout)
	defer cancel()
	served, err := e.q.Served(ctx)
	if err != nil {
		return
	}
	stats := make([]queue.QueueStats, 0, len(in))
	for qk, n := range in {
		stats = append(stats, queue.QueueStats{Queue: qk.queue, Counts: map[string]map[jobs.State]int64{qk.kind: {jobs.StateAvailable: n}}})
	}
	writeUnserved(e.stderr, cmd+": warning: ", served, stats)
}

// writeUnserved writes, each line starting with prefix, the waiting jobs
// of stats whose kind no live worker serves on their queue: one line per
// queue and kind (the first maxUnservedNamed, the rest counted), then the
// kinds live workers serve when they are few; or, when no worker is alive
// at all, one line that says so.
func writeUnserved(w io.Writer, prefix string, served queue.Served, stats []queue.QueueStats) {
	unserved := served.Unserved(stats)
	if len(unserved) == 0 {
		return
	}
	if served.Alive == 0 {
		var n int64
		for _, u := range unserved {
			n += u.Waiting
		}
		fmt.Fprintf(w, "%sno worker process is alive: %s until one that serves their kind starts\n", prefix, jobsWait(n))
		return
	}
	for i, u := range unserved {
		if i == maxUnservedNamed {
			var jobs int64
			for _, u := range unserved[i:] {
				jobs += u.Waiting
			}
			fmt.Fprintf(w, "%sand %d more queue and kind pairs no live worker serves (%d jobs)\n", prefix, len(unserved)-i, jobs)
			break
		}
		msg := fmt.Sprintf("no live worker serves kind %s on queue %s: %s until one does", shown(u.Kind), shown(u.Queue), jobsWait(u.Waiting))
		if qs := served.Queues(u.Kind); len(qs) > 0 {
			msg += "; live workers serve it on " + namesList(qs, "queue")
		}
		fmt.Fprintln(w, prefix+msg)
	}
	switch kinds := served.Kinds(); {
	case len(kinds) == 0:
	case len(kinds) <= maxUnservedNamed:
		fmt.Fprintf(w, "%slive workers serve %s\n", prefix, namesList(kinds, "kind"))
	default:
		fmt.Fprintf(w, "%slive workers serve %d kinds (docketctl workers --json lists them)\n", prefix, len(kinds))
	}
}

// namesList says names, shown, the first maxUnservedNamed of them:
// "kind noop", "kinds a, b", "queues a, b, … and 5 more".
func namesList(names []string, noun string) string {
	if len(names) != 1 {
		noun += "s"
	}
	shownNames := make([]string, 0, maxUnservedNamed+1)
	for _, n := range names[:min(len(names), maxUnservedNamed)] {
		shownNames = append(shownNames, shown(n))
	}
	if more := len(names) - maxUnservedNamed; more > 0 {
		shownNames = append(shownNames, fmt.Sprintf("… and %d more", more))
	}
	return noun + " " + strings.Join(shownNames, ", ")
}

// jobsWait says "1 job waits", "3 jobs wait".
func jobsWait(n int64) string {
	if n == 1 {
		return "1 job waits"
	}
	return fmt.Sprintf("%d jobs wait", n)
}
