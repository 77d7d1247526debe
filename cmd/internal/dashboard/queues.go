package dashboard

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/docketq/docket/queue"
)

// Pausing and resuming queues, and the workers page.

type pausedRow struct {
	Queue, Since, By, Malformed string
}

// pausedRows reads the queues' stored states for the overview: the paused
// ones, and those whose document another app wrote malformed (running).
func pausedRows(states []queue.QueueState) (rows []pausedRow, paused map[string]bool) {
	paused = map[string]bool{}
	for _, s := range states {
		paused[s.Queue] = s.Paused
		rows = append(rows, pausedRow{Queue: s.Queue, Since: since(s.PausedAt), By: s.PausedBy, Malformed: s.Malformed})
	}
	return rows, paused
}

// queueActions are the operator's actions on a queue.
var queueActions = map[string]struct{ verb, done, explain string }{
	"pause": {"Pause", "paused", "Every worker stops claiming from this queue within " + queue.PauseRefresh.String() +
		"; jobs already running finish, and its waiting jobs stay waiting until it is resumed."},
	"resume": {"Resume", "resumed", "Workers that serve this queue claim from it again within " + queue.PauseRefresh.String() + "."},
}

func (s *Server) queueConfirm(w http.ResponseWriter, r *http.Request) {
	a, ok := queueActions[r.PathValue("action")]
	if !ok {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no action %q", r.PathValue("action")))
		return
	}
	name := r.URL.Query().Get("queue")
	if name == "" {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("no queue named: the link needs ?queue=NAME"))
		return
	}
	s.render(w, r, http.StatusOK, "queueconfirm", struct {
		page
		Queue, Action, Verb, Explain, CSRF string
	}{page{Title: a.verb + " queue", Nav: "overview"}, name, r.PathValue("action"), a.verb, a.explain, s.csrf})
}

func (s *Server) queueAct(w http.ResponseWriter, r *http.Request) {
	if err := s.checkPost(r); err != nil {
		s.fail(w, r, http.StatusForbidden, err)
		return
	}
	action := r.PathValue("action")
	a, ok := queueActions[action]
	if !ok {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no action %q", action))
		return
	}
	name := r.PostForm.Get("queue")
	ctx, cancel := s.ctx(r)
	defer cancel()
	by := "dashboard"
	if u, _, ok := r.BasicAuth(); ok && u != "" {
		by = "dashboard:" + u
	}
	var changed bool
	var err error
	if action == "pause" {
		changed, err = s.q.Pause(ctx, name, by)
	} else {
		changed, err = s.q.Resume(ctx, name, by)
	}
	if err != nil {
		status := http.StatusServiceUnavailable
		if name == "" || len(name) > 256 {
			status = http.StatusBadRequest
		}
		s.fail(w, r, status, err)
		return
	}
	msg := fmt.Sprintf("Queue %s %s.", name, a.done)
	if !changed {
		msg = fmt.Sprintf("Queue %s was already %s; nothing changed.", name, a.done)
		if action == "resume" {
			msg = fmt.Sprintf("Queue %s was not paused; nothing changed.", name)
		}
	}
	s.log.Info("dashboard action", zap.String("action", action), zap.String("queue", name), zap.String("result", msg))
	s.render(w, r, http.StatusOK, "queueresult", struct {
		page
		Message string
	}{page{Title: "Done", Nav: "overview"}, msg})
}

type workerRow struct {
	ID, Host, Version, Queues, Limits, Started, LastSeen string
	PID, Concurrency, Running                            int64
}

func (s *Server) workers(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	list, err := s.q.Workers(ctx, 0, false)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	rows := make([]workerRow, len(list))
	var running, slots int64
	for i, x := range list {
		rows[i] = workerRow{ID: x.ID, Host: x.Host, Version: x.Version, PID: x.PID, Concurrency: x.Concurrency, Running: x.Running,
			Started: since(x.StartedAt), LastSeen: x.Age.Round(100*time.Millisecond).String() + " ago"}
		for j, q := range x.Queues {
			if j > 0 {
				rows[i].Queues += ", "
			}
			rows[i].Queues += q
		}
		rows[i].Limits = limitsCell(x.ProcessLimits)
		running += x.Running
		slots += x.Concurrency
	}
	s.render(w, r, http.StatusOK, "workers", struct {
		page
		Workers        []workerRow
		Running, Slots int64
		MissedBeats    int
	}{page{Title: "Workers", Nav: "workers", Refresh: s.cfg.Refresh}, rows, running, slots, queue.WorkerMissedBeats})
}

// limitsCell says a process's limits on the workers page: kind:email=2,
// queue:reports=3, in name order; "-" when there are none. The names are
// as stored, escaped by the template like everything else on the page.
func limitsCell(limits map[string]int) string {
	if len(limits) == 0 {
		return "-"
	}
	cells := make([]string, 0, len(limits))
	for _, name := range slices.Sorted(maps.Keys(limits)) {
		cells = append(cells, fmt.Sprintf("%s=%d", name, limits[name]))
	}
	return strings.Join(cells, ", ")
}
