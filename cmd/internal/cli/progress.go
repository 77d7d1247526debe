package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"
)

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress draws one line on a terminal: jobs done of total, the rate and
// the time left. It draws nothing when off, nor before the work has run
// for showAfter, so short batches print nothing.
type progress struct {
	w     io.Writer
	on    bool
	total int
	start time.Time
	last  time.Time
	drawn bool
	now   func() time.Time
}

// Progress timing: nothing is drawn before showAfter, then at most every
// redrawEvery. A variable for tests.
var showAfter = time.Second

const redrawEvery = 200 * time.Millisecond

func newProgress(w io.Writer, on bool, total int) *progress {
	p := &progress{w: w, on: on, total: total, now: time.Now}
	p.start = p.now()
	return p
}

// update redraws the line for done jobs, at most every redrawEvery.
func (p *progress) update(done int) {
	if !p.on {
		return
	}
	t := p.now()
	if t.Sub(p.start) < showAfter || (p.drawn && t.Sub(p.last) < redrawEvery && done < p.total) {
		return
	}
	p.last = t
	p.drawn = true
	fmt.Fprintf(p.w, "\r%s\x1b[K", p.line(done, t.Sub(p.start)))
}

// line is the text of the progress line after elapsed.
func (p *progress) line(done int, elapsed time.Duration) string {
	s := fmt.Sprintf("enqueue batch: %d/%d jobs (%d%%)", done, p.total, done*100/max(p.total, 1))
	if elapsed <= 0 || done == 0 {
		return s
	}
	rate := float64(done) / elapsed.Seconds()
	s += fmt.Sprintf(", %.0f jobs/s", rate)
	if done < p.total {
		eta := time.Duration(float64(p.total-done) / rate * float64(time.Second))
		s += ", ETA " + eta.Round(time.Second).String()
	}
	return s
}

// clear erases the line, if drawn, before other output.
func (p *progress) clear() {
	if p.on && p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
}
