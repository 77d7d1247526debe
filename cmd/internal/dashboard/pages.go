package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
)

// states are the job states in the order pages show them.
var states = []string{
	string(jobs.StateAvailable), string(jobs.StateRunning), string(jobs.StateSucceeded),
	string(jobs.StateDead), string(jobs.StateCancelled),
}

type count struct {
	State string
	N     int64
	Link  string
}

type queueRow struct {
	Queue, Kind, Oldest string
	Counts              []count
	// First marks a queue's first row, which carries its state, capacity
	// and action.
	First, Paused bool
	// Unserved is set when jobs wait whose kind no live worker serves on
	// the queue.
	Unserved bool
	Capacity capacityCell
	jobs     int64 // in every state
}

// capacityCell is a queue's capacity as the overview shows it: "7 / 10"
// (admitted and unfinished / capacity), "—" when it is unbounded.
type capacityCell struct {
	Text string
	// Full is set when every slot is taken: enqueues are refused.
	Full bool
	// Malformed says what is wrong with a capacity another application
	// wrote; the queue is not bounded.
	Malformed string
}

// capacityCells reads the bounded queues' capacities by queue name.
func capacityCells(caps []queue.QueueCapacity) map[string]capacityCell {
	cells := make(map[string]capacityCell, len(caps))
	for _, c := range caps {
		if c.Malformed != "" {
			cells[c.Queue] = capacityCell{Text: "—", Malformed: c.Malformed}
			continue
		}
		cells[c.Queue] = capacityCell{Text: fmt.Sprintf("%d / %d", c.Occupied, c.Capacity), Full: c.Occupied >= c.Capacity}
	}
	return cells
}

type bar struct {
	X, W, YOk, HOk, YFailed, HFailed int
	Ok, Failed                       int
	Label                            string
}

type chart struct {
	Width, Max, TotalOk, TotalFailed int
	Bars                             []bar
}

// minuteChart draws ok and failed, counts per minute keyed by the minute's
// start, over the hour that ends at end, as bars 140 units high at most.
func minuteChart(ok, failed map[time.Time]int64, end time.Time) chart {
	const minutes, height = 60, 130
	start := end.UTC().Truncate(time.Minute).Add(-(minutes - 1) * time.Minute)
	okN, failN := make([]int, minutes), make([]int, minutes)
	bucket := func(counts map[time.Time]int64, into []int) int {
		n := 0
		for t, c := range counts {
			if i := int(t.Sub(start) / time.Minute); t.Sub(start) >= 0 && i < minutes {
				into[i] += int(c)
				n += int(c)
			}
		}
		return n
	}
	c := chart{Width: minutes * 10, TotalOk: bucket(ok, okN), TotalFailed: bucket(failed, failN)}
	for i := range minutes {
		c.Max = max(c.Max, okN[i]+failN[i])
	}
	scale := func(n int) int {
		if c.Max == 0 {
			return 0
		}
		return n * height / c.Max
	}
	for i := range minutes {
		hOk, hFailed := scale(okN[i]), scale(failN[i])
		c.Bars = append(c.Bars, bar{
			X: i * 10, W: 8, Ok: okN[i], Failed: failN[i],
			YOk: 140 - hOk, HOk: hOk, YFailed: 140 - hOk - hFailed, HFailed: hFailed,
			Label: start.Add(time.Duration(i) * time.Minute).UTC().Format("15:04"),
		})
	}
	return c
}

// overviewCounts returns the counts the elected leader stored, or, when
// exact is asked or there are none to read, counts every job now (bounded
// by the request's timeout), with a line that says how fresh they are.
func (s *Server) overviewCounts(ctx context.Context, exact bool) (queue.StoredStats, freshness, error) {
	var why string
	if !exact {
		counts, err := s.q.StoredStats(ctx)
		switch {
		case err == nil:
			f := freshness{Text: fmt.Sprintf("Counts as of %s ago, counted by %s", counts.Age().Round(time.Second), orUnknown(counts.By))}
			if counts.Every > 0 {
				f.Text += fmt.Sprintf(", the elected leader, every %s", counts.Every.Round(time.Second))
			}
			f.Stale = counts.Stale()
			if counts.Unreadable > 0 {
				f.Text += fmt.Sprintf("; %d stored entries could not be read and are left out", counts.Unreadable)
			}
			return counts, f, nil
		case errors.Is(err, queue.ErrNoStoredStats), errors.Is(err, queue.ErrStoredStatsMalformed):
			why = err.Error()
		default:
			return queue.StoredStats{}, freshness{}, err
		}
	}
	counts, err := s.q.CountStats(ctx)
	if err != nil {
		if why != "" && ctx.Err() != nil {
			return counts, freshness{}, fmt.Errorf("%s, and counting every job now did not end within %s: start a worker, whose elected leader stores counts: %w", why, requestTimeout, err)
		}
		return counts, freshness{}, err
	}
	f := freshness{Text: "Counted now, exactly", Exact: true}
	if why != "" {
		f.Text += ": " + why
	}
	return counts, f, nil
}

// freshness says where the overview's counts come from and how old they
// are.
type freshness struct {
	Text string
	// Exact is set when they were counted for this page.
	Exact bool
	// Stale is set when they are older than their leader's pace explains.
	Stale bool
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	counts, fresh, err := s.overviewCounts(ctx, r.URL.Query().Get("exact") != "")
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	queueStates, err := s.q.QueueStates(ctx)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	pausedList, paused := pausedRows(queueStates)
	caps, err := s.q.QueueCapacities(ctx)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	capacity := capacityCells(caps)
	limits, err := s.limitRows(ctx) // limits.go
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	served, err := s.q.Served(ctx) // unserved.go
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	stats := counts.Queues
	ok, failed := counts.Finished[jobs.StateSucceeded], counts.Finished[jobs.StateDead]
	totals := map[string]int64{}
	var rows []queueRow
	var oldest time.Time
	oldestOf := map[string]time.Time{} // by queue
	for _, qs := range stats {
		if !qs.OldestAvailable.IsZero() && (oldest.IsZero() || qs.OldestAvailable.Before(oldest)) {
			oldest = qs.OldestAvailable
		}
		oldestOf[qs.Queue] = qs.OldestAvailable
		for k, byState := range qs.Counts {
			row := queueRow{Queue: qs.Queue, Kind: k, Paused: paused[qs.Queue],
				Unserved: byState[jobs.StateAvailable] > 0 && !served.Serves(qs.Queue, k)}
			for _, st := range states {
				n := byState[jobs.State(st)]
				totals[st] += n
				row.jobs += n
				row.Counts = append(row.Counts, count{State: st, N: n, Link: jobsURL("queue", qs.Queue, "kind", k, "state", st)})
			}
			rows = append(rows, row)
		}
	}
	rows, left := biggestRows(rows, s.cfg.OverviewRows)
	for i := range rows {
		row := &rows[i]
		if row.First = i == 0 || rows[i-1].Queue != row.Queue; row.First {
			row.Oldest = since(oldestOf[row.Queue])
			row.Capacity = capacity[row.Queue]
			if row.Capacity.Text == "" {
				row.Capacity.Text = "—"
			}
		}
	}
	if len(pausedList) > s.cfg.OverviewRows {
		left.Paused = len(pausedList) - s.cfg.OverviewRows
		pausedList = pausedList[:s.cfg.OverviewRows]
	}
	var cards []count
	for _, st := range states {
		cards = append(cards, count{State: st, N: totals[st]})
	}
	s.render(w, r, http.StatusOK, "overview", struct {
		page
		Totals   []count
		Oldest   string
		States   []string
		Rows     []queueRow
		Left     leftOut
		Chart    chart
		Paused   []pausedRow
		Alive    int
		Fresh    freshness
		Limits   []limitRow
		Unserved unservedView
	}{page{Title: "Overview", Nav: "overview", Refresh: s.cfg.Refresh}, cards, since(oldest), states, rows, left, minuteChart(ok, failed, counts.CountedAt),
		pausedList, served.Alive, fresh, limits, unservedSection(served, stats)})
}

// leftOut is what the overview leaves out to stay small, said on the page.
type leftOut struct {
	// Rows and Jobs are the queue × kind rows left out and their jobs.
	Rows int
	Jobs int64
	// Paused is how many paused queues are not listed.
	Paused int
}

// RowsText says what rows were left out: "4,800 more queue × kind rows".
func (l leftOut) RowsText() string {
	return fmt.Sprintf("and %s more queue × kind rows (%s jobs), each with fewer jobs than those shown: the totals above count them; filter the jobs list by queue or kind to see them",
		thousands(int64(l.Rows)), thousands(l.Jobs))
}

// biggestRows keeps the n rows with the most jobs (another application
// can write thousands of kinds: a page of them all, every few seconds,
// was megabytes), in queue then kind order, and says what it left out.
func biggestRows(rows []queueRow, n int) ([]queueRow, leftOut) {
	var left leftOut
	if len(rows) > n {
		sort.SliceStable(rows, func(i, j int) bool {
			if rows[i].jobs != rows[j].jobs {
				return rows[i].jobs > rows[j].jobs
			}
			return rows[i].Queue+"\x00"+rows[i].Kind < rows[j].Queue+"\x00"+rows[j].Kind
		})
		for _, r := range rows[n:] {
			left.Rows++
			left.Jobs += r.jobs
		}
		rows = rows[:n]
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Queue != rows[j].Queue {
			return rows[i].Queue < rows[j].Queue
		}
		return rows[i].Kind < rows[j].Kind
	})
	return rows, left
}

// thousands writes n with a comma every three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

type jobRow struct {
	ID, Href, Kind, Queue, State, Updated, LastError string
	Attempt, MaxAttempts                             int
}

// jobPath is the path of a job's page: its id's token, escaped as one
// path segment, so that any id, of any type, leads to its own job (an id
// "VICTIM/delete" to itself, not to VICTIM's delete).
func jobPath(id queue.JobID) string {
	return "/jobs/" + url.PathEscape(id.Token())
}

// pathID reads the job id of a request's path.
func pathID(r *http.Request) (queue.JobID, error) {
	id, err := queue.ParseJobID(r.PathValue("id"))
	if err == nil && id.IsZero() {
		err = errors.New("no job id in the path")
	}
	return id, err
}

func (s *Server) jobs(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	q := r.URL.Query()
	f := struct{ State, Kind, Queue string }{q.Get("state"), q.Get("kind"), q.Get("queue")}
	var filter queue.JobFilter
	if f.State != "" {
		if !jobs.State(f.State).Valid() {
			s.fail(w, r, http.StatusBadRequest, fmt.Errorf("state %q is not a job state", f.State))
			return
		}
		filter.States = []jobs.State{jobs.State(f.State)}
	}
	if f.Kind != "" {
		filter.Kinds = []string{f.Kind}
	}
	if f.Queue != "" {
		filter.Queues = []string{f.Queue}
	}
	if _, err := queue.ParseJobID(q.Get("after")); err != nil {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("after: %w", err))
		return
	}
	list, more, err := s.q.List(ctx, filter, q.Get("after"), s.cfg.PageSize)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	rows := make([]jobRow, len(list))
	for i, j := range list {
		rows[i] = jobRow{ID: j.ID, Href: jobPath(j.JobID), Kind: j.Kind, Queue: j.Queue, State: string(j.State), Attempt: j.Attempt, MaxAttempts: j.MaxAttempts,
			Updated: since(j.UpdatedAt), LastError: oneLine(j.LastError, 80)}
	}
	next := ""
	if more {
		// The next page starts after the last job's id, of its type: a
		// foreign _id 7 is followed by the string ids.
		next = jobsURL("state", f.State, "kind", f.Kind, "queue", f.Queue, "after", list[len(list)-1].JobID.Token())
	}
	s.render(w, r, http.StatusOK, "jobs", struct {
		page
		States []string
		Filter struct{ State, Kind, Queue string }
		Jobs   []jobRow
		Next   string
		First  string
	}{page{Title: "Jobs", Nav: "jobs", Refresh: s.cfg.Refresh}, states, f, rows, next, jobsURL("state", f.State, "kind", f.Kind, "queue", f.Queue)})
}

type field struct{ Name, Value string }

type event struct {
	at       time.Time
	At, What string
}

// get reads one job as stored.
func (s *Server) get(r *http.Request, id queue.JobID) (queue.JobSummary, error) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	list, _, err := s.q.List(ctx, queue.JobFilter{JobIDs: []queue.JobID{id}}, "", 1)
	if err != nil {
		return queue.JobSummary{}, err
	}
	if len(list) == 0 {
		return queue.JobSummary{}, fmt.Errorf("job %s: %w", id, queue.ErrNotFound)
	}
	return list[0], nil
}

func showValue(v bson.RawValue) string {
	switch v.Type {
	case bson.TypeString:
		return v.StringValue()
	case bson.TypeDateTime:
		t := v.Time()
		return t.UTC().Format(time.RFC3339) + " (" + since(t) + ")"
	case bson.TypeInt32, bson.TypeInt64:
		n, _ := v.AsInt64OK()
		return strconv.FormatInt(n, 10)
	}
	return v.String()
}

func (s *Server) job(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, err)
		return
	}
	j, err := s.get(r, id)
	if errors.Is(err, queue.ErrNotFound) {
		s.fail(w, r, http.StatusNotFound, err)
		return
	}
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	var fields []field
	for _, name := range []string{"kind", "queue", "priority", "attempt", "maxAttempts", "runAt", "createdAt", "updatedAt",
		"finishedAt", "owner", "leaseExpiresAt", "uniqueKey", "finishedUniqueKey", "cancelRequestedAt"} {
		if v := j.Raw.Lookup(name); v.Type != 0 {
			fields = append(fields, field{name, showValue(v)})
		}
	}
	var timeline []event
	add := func(v bson.RawValue, what string) {
		if t, ok := v.TimeOK(); ok {
			timeline = append(timeline, event{at: t, What: what})
		}
	}
	add(j.Raw.Lookup("createdAt"), "enqueued")
	if errs, ok := j.Raw.Lookup("errors").ArrayOK(); ok {
		vals, _ := errs.Values()
		for _, v := range vals {
			if d, ok := v.DocumentOK(); ok {
				add(d.Lookup("at"), fmt.Sprintf("attempt %s failed on %s: %s", showValue(d.Lookup("attempt")), showValue(d.Lookup("owner")), showValue(d.Lookup("message"))))
			}
		}
	}
	if j.State == jobs.StateRunning {
		add(j.Raw.Lookup("heartbeatAt"), fmt.Sprintf("attempt %d running on %s (last heartbeat)", j.Attempt, showValue(j.Raw.Lookup("owner"))))
	}
	add(j.Raw.Lookup("finishedAt"), "ended "+string(j.State))
	sort.SliceStable(timeline, func(a, b int) bool { return timeline[a].at.Before(timeline[b].at) })
	for i := range timeline {
		timeline[i].At = timeline[i].at.UTC().Format("2006-01-02 15:04:05.000")
	}
	args := "{}"
	switch v := j.Raw.Lookup("args"); v.Type {
	case 0:
	case bson.TypeEmbeddedDocument:
		if b, err := bson.MarshalExtJSONIndent(v.Document(), false, false, "", "  "); err == nil {
			args = string(b)
		}
	default: // not a document: another app wrote it; show it as it is
		args = v.String()
	}
	result := ""
	if v, ok := j.Raw.Lookup("result").DocumentOK(); ok {
		if b, err := bson.MarshalExtJSONIndent(v, false, false, "", "  "); err == nil {
			result = string(b)
		}
	}
	workflow, _ := j.Raw.Lookup("workflow").StringValueOK()
	st := jobs.State(j.State)
	s.render(w, r, http.StatusOK, "job", struct {
		page
		Job                            queue.JobSummary
		Href                           string
		Fields                         []field
		Timeline                       []event
		Args, Result                   string
		Workflow, WorkflowHref         string
		CanRetry, CanCancel, CanDelete bool
		Progress                       *progressView
	}{page{Title: "Job " + j.ID, Nav: "jobs", Refresh: s.cfg.Refresh}, j, jobPath(j.JobID), fields, timeline, args, result,
		workflow, jobWorkflowPath(j), // workflow.go
		st.Valid() && st != jobs.StateRunning, st == jobs.StateAvailable || st == jobs.StateRunning, st.Finished(),
		progressOf(j.Progress)}) // progress.go
}

// actions are the operator's actions on one job.
var actions = map[string]struct{ verb, explain string }{
	"retry":  {"Retry", "The job becomes available now, its attempts reset and its past errors kept. A running job is never retried."},
	"cancel": {"Cancel", "An available job is cancelled at once; a running one is asked to stop at its next heartbeat. A transfer that has started applying cannot be cancelled."},
	"delete": {"Delete", "The job document is removed for good. Only a finished job can be deleted here."},
}

func (s *Server) confirm(w http.ResponseWriter, r *http.Request) {
	a, ok := actions[r.PathValue("action")]
	if !ok {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no action %q", r.PathValue("action")))
		return
	}
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, err)
		return
	}
	s.render(w, r, http.StatusOK, "confirm", struct {
		page
		ID, Href, Action, Verb, Explain, CSRF string
	}{page{Title: a.verb + " job", Nav: "jobs"}, id.String(), jobPath(id), r.PathValue("action"), a.verb, a.explain, s.csrf})
}

func (s *Server) act(w http.ResponseWriter, r *http.Request) {
	if err := s.checkPost(r); err != nil {
		s.fail(w, r, http.StatusForbidden, err)
		return
	}
	jobID, err := pathID(r)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, err)
		return
	}
	id, action := jobID.String(), r.PathValue("action")
	ctx, cancel := s.ctx(r)
	defer cancel()
	var msg string
	var failed bool
	switch action {
	case "retry", "delete":
		var res []queue.ActionResult
		var err error
		if action == "retry" {
			res, err = s.q.Retry(ctx, queue.JobFilter{JobIDs: []queue.JobID{jobID}})
		} else {
			res, err = s.q.Delete(ctx, queue.JobFilter{JobIDs: []queue.JobID{jobID}}, false)
		}
		if err != nil {
			s.fail(w, r, http.StatusServiceUnavailable, err)
			return
		}
		verb := map[string]string{"retry": "retried", "delete": "deleted"}[action]
		for _, x := range res {
			if x.Err != nil {
				msg, failed = fmt.Sprintf("Job %s not %s: %v.", x.ID, verb, x.Err), true
			} else {
				msg = fmt.Sprintf("Job %s %s (it was %s).", x.ID, verb, x.From)
			}
		}
	case "cancel":
		out, err := s.cancel(ctx, jobID)
		switch {
		case errors.Is(err, queue.ErrNotFound), errors.Is(err, queue.ErrFinished), errors.Is(err, queue.ErrNotCancellable):
			msg, failed = fmt.Sprintf("Job %s not cancelled: %s.", id, s.cfg.Redact(err.Error())), true
		case err != nil:
			s.fail(w, r, http.StatusServiceUnavailable, err)
			return
		default:
			msg = fmt.Sprintf("Job %s: %s.", id, out)
		}
	default:
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no action %q", action))
		return
	}
	status := http.StatusOK
	if failed {
		status = http.StatusConflict
	}
	s.log.Info("dashboard action", zap.String("action", action), zap.String("job_id", strconv.QuoteToASCII(id)), zap.String("result", msg))
	s.render(w, r, status, "result", struct {
		page
		ID, Href, Message string
		Failed            bool
	}{page{Title: "Done", Nav: "jobs"}, id, jobPath(jobID), msg, failed})
}

// cancel cancels the job as docketctl cancel does, with the cancel hooks
// the program registered on its queue client (queue.OnCancel):
// a transfer's job cancels its transfer too.
func (s *Server) cancel(ctx context.Context, id queue.JobID) (queue.CancelOutcome, error) {
	return s.q.CancelJobID(ctx, id)
}
