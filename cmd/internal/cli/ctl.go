package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"os/user"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/docketq/docket/cmd/internal/dashboard"
	"github.com/docketq/docket/configs"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// ctlCommands are docketctl's subcommands: the operator's view of the jobs.
var ctlCommands = map[string]subcommand{
	"stats":     {"jobs per queue, kind and state, each queue's longest-waiting job and the waiting jobs no live worker serves, as the elected leader last counted them (--exact: count now; --json)", ctlStats},
	"list":      {"list jobs: --state, --kind, --queue, --since, --until filter; --after pages", ctlList},
	"show":      {"show jobs by id (as list prints it: the id, or @… for an id of another type or with odd characters), with every attempt's error", ctlShow},
	"retry":     {"run jobs again now, attempts reset, errors kept: by id (as list prints it), or --state dead [--kind K] [--queue Q]", ctlRetry},
	"cancel":    {"cancel jobs by id (as list prints it): available ones at once, running ones at their next heartbeat", cancelCommand},
	"delete":    {"delete finished jobs by id (as list prints it; --force: available ones too; never a running one)", ctlDelete},
	"purge":     {"delete the jobs that finished in a state long ago: --state succeeded --older-than 24h", ctlPurge},
	"pause":     {"stop every worker claiming from the queues named, within a second; running jobs finish", ctlPause},
	"resume":    {"let workers claim from the paused queues named again", ctlResume},
	"workers":   {"the worker processes alive: id, host, pid, version, queues, concurrency, running jobs, process limits, started, last seen", ctlWorkers},
	"dashboard": {"serve the web dashboard: --addr 127.0.0.1:8080 (any other address needs " + dashboard.PasswordEnv + " and TLS); --dashboard-host NAME to be reached by another name", ctlDashboard},
}

// Ctl is the main function of the docketctl command; it returns the exit
// status: 0 done, 1 a failure (the database unreachable), 2 bad input or a
// job left alone.
func Ctl(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runTool("docketctl", ctlCommands, "Actions print what they changed; a job they left alone exits 2.", args, stdin, stdout, stderr)
}

// listFlag is a comma-separated list flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// filterFlags registers the flags that select jobs.
func filterFlags(fs *flag.FlagSet) (states, kinds, queues *listFlag) {
	states, kinds, queues = &listFlag{}, &listFlag{}, &listFlag{}
	fs.Var(states, "state", "states, comma-separated: blocked, available, running, succeeded, dead, cancelled")
	fs.Var(kinds, "kind", "kinds, comma-separated")
	fs.Var(queues, "queue", "queues, comma-separated")
	return states, kinds, queues
}

func parseStates(states []string) ([]jobs.State, error) {
	out := make([]jobs.State, len(states))
	for i, s := range states {
		out[i] = jobs.State(s)
		if !out[i].Valid() {
			return nil, badInput("--state: %q is not a state (blocked, available, running, succeeded, dead, cancelled)", s)
		}
	}
	return out, nil
}

// parseWhen reads a time as RFC 3339 or as a duration ago ("2h").
func parseWhen(flagName, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, badInput("--%s: %q is not a positive duration ago (it would select jobs created in the future: none); give one such as 2h, or a time such as 2026-11-23T08:00:00Z", flagName, s)
		}
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, badInput("--%s: %q is neither a time such as 2026-11-23T08:00:00Z nor a duration ago such as 2h", flagName, s)
	}
	return t, nil
}

func ctlStats(fs *flag.FlagSet) func(*env, []string) error {
	exact := fs.Bool("exact", false, "count every job now (on some servers a pass over the whole collection) rather than read the counts the elected leader stored")
	asJSON := fs.Bool("json", false, "print the counts, where they come from and how fresh they are as one JSON document")
	return func(e *env, rest []string) error {
		if len(rest) > 0 {
			return badInput("unexpected argument %q", rest[0])
		}
		r, err := readStatsReport(e, *exact)
		if err != nil {
			return err
		}
		if *asJSON {
			return printStatsJSON(e.stdout, r)
		}
		return printStatsText(e.stdout, r)
	}
}

// statsReport is what `docketctl stats` shows.
type statsReport struct {
	counts statsCounts
	served queue.Served
	paused []queue.QueueState
	caps   []queue.QueueCapacity
	limits []queue.RunLimit
	ls     limitStats
}

func readStatsReport(e *env, exact bool) (r statsReport, err error) {
	if r.counts, err = readStats(e.ctx, e.q, exact, e.cfg.Mongo.Timeout); err != nil {
		return r, err
	}
	if r.paused, err = e.q.QueueStates(e.ctx); err != nil {
		return r, err
	}
	if r.caps, err = e.q.QueueCapacities(e.ctx); err != nil {
		return r, err
	}
	if r.limits, err = e.q.RunLimits(e.ctx); err != nil {
		return r, err
	}
	if r.ls, err = readLimitStats(e, r.limits); err != nil { // rate.go
		return r, err
	}
	r.served, err = e.q.Served(e.ctx) // unserved.go
	return r, err
}

// printStatsText prints r as stats' table of counts, then a line for
// each unserved kind, paused queue, capacity, limit and rate.
func printStatsText(w io.Writer, r statsReport) error {
	fmt.Fprintln(w, r.counts.freshness())
	stats := r.counts.Queues
	sort.Slice(stats, func(i, j int) bool { return stats[i].Queue < stats[j].Queue })
	if err := printCountsTable(w, r.counts, stats); err != nil {
		return err
	}
	writeUnserved(w, "", r.served, stats)
	for _, p := range r.paused {
		fmt.Fprintf(w, "queue %s: %s\n", shown(p.Queue), pausedNote(p))
	}
	for _, c := range r.caps {
		if c.Malformed != "" {
			fmt.Fprintf(w, "queue %s: unbounded (its capacity is malformed: %s)\n", shown(c.Queue), shown(c.Malformed))
			continue
		}
		fmt.Fprintf(w, "queue %s: capacity %d, %d admitted and unfinished\n", shown(c.Queue), c.Capacity, c.Occupied)
	}
	for _, l := range r.limits {
		if l.Malformed != "" {
			fmt.Fprintf(w, "limit %s: limits nothing (malformed: %s)\n", shown(l.Name), shown(l.Malformed))
			continue
		}
		fmt.Fprintf(w, "limit %s: %s, %d waiting\n", shown(l.Name), shown(l.Use()), r.ls.waiting[l.Name])
	}
	r.ls.printText(w)
	return nil
}

// printCountsTable prints a row of counts by state for each queue and
// kind of stats, with the queue's oldest waiting job's age.
func printCountsTable(w io.Writer, counts statsCounts, stats []queue.QueueStats) error {
	states := []jobs.State{jobs.StateAvailable, jobs.StateRunning, jobs.StateSucceeded, jobs.StateDead, jobs.StateCancelled, jobs.StateBlocked}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "queue\tkind\t")
	for _, s := range states {
		fmt.Fprintf(tw, "%s\t", s)
	}
	fmt.Fprintln(tw, "oldest waiting")
	for _, qs := range stats {
		kinds := slices.Sorted(maps.Keys(qs.Counts))
		for i, k := range kinds {
			fmt.Fprintf(tw, "%s\t%s\t", shown(qs.Queue), shown(k))
			for _, s := range states {
				fmt.Fprintf(tw, "%d\t", qs.Counts[k][s])
			}
			if i == 0 && !qs.OldestAvailable.IsZero() {
				fmt.Fprintf(tw, "%s", counts.now().Sub(qs.OldestAvailable).Round(time.Millisecond))
			}
			fmt.Fprintln(tw)
		}
	}
	return tw.Flush()
}

func ctlList(fs *flag.FlagSet) func(*env, []string) error {
	states, kinds, queues := filterFlags(fs)
	since := fs.String("since", "", "created at or after: a time (RFC 3339) or a duration ago (2h)")
	until := fs.String("until", "", "created before: a time (RFC 3339) or a duration ago")
	limit := fs.Int("limit", 50, "jobs per page, 1 to 1000")
	after := fs.String("after", "", "list jobs after this one: the token the previous page printed (a job's id, or @… for an id of another type)")
	asJSON := fs.Bool("json", false, "print the job documents as JSON, one per line")
	return func(e *env, rest []string) error {
		if len(rest) > 0 {
			return badInput("unexpected argument %q", rest[0])
		}
		if *limit < 1 || *limit > 1000 {
			return badInput("--limit: %d must be 1 to 1000", *limit)
		}
		f := queue.JobFilter{Kinds: *kinds, Queues: *queues}
		var err error
		if f.States, err = parseStates(*states); err != nil {
			return err
		}
		if f.CreatedAfter, err = parseWhen("since", *since); err != nil {
			return err
		}
		if f.CreatedBefore, err = parseWhen("until", *until); err != nil {
			return err
		}
		if _, err := queue.ParseJobID(*after); err != nil {
			return badInput("--after: %v", err)
		}
		list, more, err := e.q.List(e.ctx, f, *after, *limit)
		if err != nil {
			return err
		}
		if *asJSON {
			for _, j := range list {
				b, err := bson.MarshalExtJSON(j.Raw, false, false)
				if err != nil {
					return err
				}
				if err := printJSON(e.stdout, b); err != nil {
					return err
				}
			}
		} else {
			states, err := e.q.QueueStates(e.ctx)
			if err != nil {
				return err
			}
			paused := map[string]bool{}
			for _, s := range states {
				paused[s.Queue] = s.Paused
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "id\tkind\tqueue\tstate\tattempt\tupdated\tlast error")
			for _, j := range list {
				qn := shown(j.Queue)
				if paused[j.Queue] {
					qn += " (paused)"
				}
				lastError := shown(strings.ReplaceAll(j.LastError, "\n", " "))
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", idLabel(j.JobID), shown(j.Kind), qn, shown(string(j.State)), j.Attempt, j.MaxAttempts,
					j.UpdatedAt.Format(time.RFC3339), truncate(lastError, 60))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		if more {
			fmt.Fprintf(e.stderr, "more: --after %s\n", list[len(list)-1].JobID.Token())
		}
		return nil
	}
}

func ctlShow(fs *flag.FlagSet) func(*env, []string) error {
	asJSON := fs.Bool("json", false, "print the job documents as JSON, one per line")
	return func(e *env, tokens []string) error {
		ids, err := jobIDsToAct(tokens, "show")
		if err != nil {
			return err
		}
		list, _, err := e.q.List(e.ctx, queue.JobFilter{JobIDs: ids}, "", len(ids))
		if err != nil {
			return err
		}
		var missing []string
		for _, id := range ids {
			if !slices.ContainsFunc(list, func(j queue.JobSummary) bool { return j.JobID.Equal(id) }) {
				missing = append(missing, idLabel(id))
			}
		}
		for _, j := range list {
			if *asJSON {
				b, err := bson.MarshalExtJSON(j.Raw, false, false)
				if err != nil {
					return err
				}
				if err := printJSON(e.stdout, b); err != nil {
					return err
				}
				continue
			}
			showJob(e.stdout, j)
			parents, dependents, more, err := e.q.Relatives(e.ctx, j, maxShownDependents)
			if err != nil {
				return err
			}
			showRelatives(e.stdout, parents, dependents, more)
		}
		if len(missing) > 0 {
			return usageError{fmt.Errorf("no job with id %s", strings.Join(missing, ", "))}
		}
		return nil
	}
}

// showJob prints one job for a person: its fields, each attempt's error,
// its args and result.
// Every value is shown (escaped), the args' JSON too.
func showJob(w io.Writer, j queue.JobSummary) {
	fmt.Fprintf(w, "job %s\n", idLabel(j.JobID))
	for _, f := range []string{"kind", "queue", "state", "priority", "attempt", "maxAttempts", "runAt", "createdAt", "updatedAt", "finishedAt", "owner", "uniqueKey", "finishedUniqueKey", "uniquePeriodKey", "uniqueUntil", "cancelRequestedAt", "runAnyway", "linking"} {
		if v := j.Raw.Lookup(f); v.Type != 0 {
			fmt.Fprintf(w, "  %-18s %s\n", f+":", shown(showValue(v)))
		}
	}
	if j.Progress != nil {
		fmt.Fprintf(w, "  %-18s %s\n", "progress:", progressLine(*j.Progress))
	}
	if errs, ok := j.Raw.Lookup("errors").ArrayOK(); ok {
		vals, _ := errs.Values()
		if len(vals) > 0 {
			fmt.Fprintf(w, "  errors:\n")
		}
		for _, v := range vals {
			d, ok := v.DocumentOK()
			if !ok {
				fmt.Fprintf(w, "    %s\n", shown(v.String()))
				continue
			}
			fmt.Fprintf(w, "    attempt %s at %s by %s: %s\n", shown(showValue(d.Lookup("attempt"))), shown(showValue(d.Lookup("at"))),
				shown(showValue(d.Lookup("owner"))), shown(showValue(d.Lookup("message"))))
		}
	}
	for _, f := range []string{"args", "result"} {
		if v := j.Raw.Lookup(f); v.Type != 0 {
			b, err := bson.MarshalExtJSON(bson.D{{Key: f, Value: v}}, false, false)
			if err == nil {
				fmt.Fprintf(w, "  %-18s %s\n", f+":", shown(strings.TrimSuffix(strings.TrimPrefix(string(b), `{"`+f+`":`), "}")))
			}
		}
	}
}

func showValue(v bson.RawValue) string {
	switch {
	case v.Type == 0:
		return "-"
	case v.Type == bson.TypeString:
		return v.StringValue()
	case v.Type == bson.TypeDateTime:
		return v.Time().UTC().Format(time.RFC3339Nano)
	case v.Type == bson.TypeInt32 || v.Type == bson.TypeInt64:
		n, _ := v.AsInt64OK()
		return fmt.Sprint(n)
	}
	return v.String()
}

// report prints what an action did to each job, and returns a usage error
// (exit 2) when it left any alone.
func report(e *env, verb string, results []queue.ActionResult) error {
	left := 0
	for _, r := range results {
		if r.Err != nil {
			left++
			fmt.Fprintf(e.stdout, "%s\tnot %s: %s\n", idLabel(r.JobID), verb, shown(r.Err.Error()))
			continue
		}
		fmt.Fprintf(e.stdout, "%s\t%s (was %s)\n", idLabel(r.JobID), verb, shown(r.From))
	}
	if left > 0 {
		return usageError{fmt.Errorf("%d of %d jobs not %s", left, len(results), verb)}
	}
	return nil
}

func ctlRetry(fs *flag.FlagSet) func(*env, []string) error {
	states, kinds, queues := filterFlags(fs)
	return func(e *env, tokens []string) error {
		ids, err := parseJobIDs(tokens)
		if err != nil {
			return err
		}
		f := queue.JobFilter{JobIDs: ids, Kinds: *kinds, Queues: *queues}
		if f.States, err = parseStates(*states); err != nil {
			return err
		}
		if len(ids) == 0 && len(f.States) == 0 {
			return badInput("give job ids, or a filter with --state (such as --state dead --kind transfer)")
		}
		if slices.Contains(f.States, jobs.StateRunning) {
			return badInput("--state running: a running job is its worker's; it is never retried")
		}
		results, err := e.q.Retry(e.ctx, f)
		if err != nil {
			return err
		}
		if len(results) == 0 {
			fmt.Fprintln(e.stdout, "no job matched")
			return nil
		}
		return report(e, "retried", results)
	}
}

func ctlDelete(fs *flag.FlagSet) func(*env, []string) error {
	force := fs.Bool("force", false, "also delete jobs that have not finished (available); never a running one")
	return func(e *env, tokens []string) error {
		ids, err := jobIDsToAct(tokens, "delete")
		if err != nil {
			return err
		}
		results, err := e.q.Delete(e.ctx, queue.JobFilter{JobIDs: ids}, *force)
		if err != nil {
			return err
		}
		return report(e, "deleted", results)
	}
}

func ctlPurge(fs *flag.FlagSet) func(*env, []string) error {
	state := fs.String("state", "", "the finished state to purge: succeeded, dead or cancelled (required)")
	olderThan := fs.Duration("older-than", 0, "purge jobs that finished longer ago than this, such as 24h (required)")
	return func(e *env, rest []string) error {
		if len(rest) > 0 {
			return badInput("unexpected argument %q", rest[0])
		}
		s := jobs.State(*state)
		if !s.Finished() {
			return badInput("--state: %q must be succeeded, dead or cancelled", *state)
		}
		if *olderThan <= 0 {
			return badInput("--older-than: give how long ago the jobs finished, such as 24h")
		}
		n, err := e.q.Purge(e.ctx, s, *olderThan)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "purged %d %s jobs that finished more than %s ago\n", n, s, *olderThan)
		return nil
	}
}

func ctlDashboard(fs *flag.FlagSet) func(*env, []string) error {
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on; any but loopback needs "+dashboard.PasswordEnv+" and TLS (--tls-cert, --tls-key)")
	refresh := fs.Int("refresh", dashboard.DefaultRefresh, fmt.Sprintf("seconds between page refreshes, at most %d (0: the default, negative: off)", dashboard.MaxRefresh))
	return func(e *env, rest []string) error {
		if len(rest) > 0 {
			return badInput("unexpected argument %q", rest[0])
		}
		log, err := e.cfg.Log.NewLogger(e.stderr)
		if err != nil {
			return usageError{err}
		}
		d := e.cfg.Dashboard
		srv, err := dashboard.New(e.db, e.q, dashboard.Config{
			Addr: *addr, Password: os.Getenv(dashboard.PasswordEnv), Refresh: *refresh, Logger: log,
			Hosts: d.Hosts, TLSCert: d.TLSCert, TLSKey: d.TLSKey, PlainHTTP: d.PlainHTTP,
			Redact: func(s string) string { return configs.Redact(s, e.cfg.Mongo.URI) },
		})
		if err != nil {
			return usageError{err}
		}
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			return usageError{fmt.Errorf("--addr: %w", err)}
		}
		scheme := "http"
		if tc := srv.TLSConfig(); tc != nil {
			ln, scheme = tls.NewListener(ln, tc), "https"
		}
		hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(sigs)
		go func() {
			<-sigs
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = hs.Shutdown(ctx)
		}()
		fmt.Fprintf(e.stdout, "dashboard: %s://%s/\n", scheme, ln.Addr())
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}

func cancelCommand(fs *flag.FlagSet) func(*env, []string) error {
	return func(e *env, tokens []string) error {
		ids, err := jobIDsToAct(tokens, "cancel")
		if err != nil {
			return err
		}
		var failed []string
		for _, id := range ids {
			out, err := e.q.CancelJobID(e.ctx, id)
			if errors.Is(err, queue.ErrNotFound) || errors.Is(err, queue.ErrFinished) || errors.Is(err, queue.ErrNotCancellable) {
				fmt.Fprintf(e.stderr, "%s: %s\n", idLabel(id), shown(err.Error()))
				failed = append(failed, idLabel(id))
				continue
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s\t%s\n", idLabel(id), shown(fmt.Sprint(out)))
		}
		if len(failed) > 0 {
			return usageError{fmt.Errorf("%d of %d jobs not cancelled", len(failed), len(ids))}
		}
		return nil
	}
}

// parseJobIDs reads the ids given to show, retry, cancel and delete: each as
// list prints it first, a token (queue.JobID.Token) that is the string id
// itself, or "@…" for an id of another type or a string with characters a
// shell or a terminal would take as its own. Any other string not
// starting with "@" is a string id, as typed.
func parseJobIDs(tokens []string) ([]queue.JobID, error) {
	ids := make([]queue.JobID, len(tokens))
	for i, t := range tokens {
		id, err := queue.ParseJobID(t)
		if err != nil {
			return nil, badInput("%v", err)
		}
		if id.IsZero() {
			return nil, badInput("an empty job id: give each id as list prints it")
		}
		ids[i] = id
	}
	return ids, nil
}

// jobIDsToAct is parseJobIDs of the tokens a command that acts on jobs
// (verb) requires: at least one.
func jobIDsToAct(tokens []string, verb string) ([]queue.JobID, error) {
	if len(tokens) == 0 {
		return nil, badInput("give the ids of the jobs to %s", verb)
	}
	return parseJobIDs(tokens)
}

// idLabel names a job for a person, in every table and line docketctl
// prints: its token, which every command takes back, and when that is not
// the id itself (an id of another type, or a string with characters a
// shell, a URL or a terminal would take as its own), the id after it,
// escaped: `@EAcAAAA ({"$numberInt":"7"})`.
func idLabel(id queue.JobID) string {
	tok := id.Token()
	if s, ok := id.StringID(); ok && s == tok {
		return tok
	}
	return tok + " (" + shown(id.String()) + ")"
}

// operator names who acts, for the queues documents: user@host.
func operator() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// queueNames checks the queue names of a pause or resume, all before the
// first write.
func queueNames(names []string) error {
	if len(names) == 0 {
		return badInput("give the names of the queues")
	}
	for _, q := range names {
		if q == "" || strings.TrimSpace(q) != q {
			return badInput("queue name %q: empty or with spaces at its ends", q)
		}
		if len(q) > 256 {
			return badInput("queue name %.20q…: longer than 256 bytes", q)
		}
		if strings.HasPrefix(q, "-") {
			return badInput("queue name %q looks like a flag: put flags before the queue names", q)
		}
	}
	return nil
}

func ctlPause(fs *flag.FlagSet) func(*env, []string) error {
	by := fs.String("by", "", "who pauses, recorded with the pause (default: user@host)")
	return func(e *env, names []string) error {
		if err := queueNames(names); err != nil {
			return err
		}
		for _, q := range names {
			// A queue enqueue would refuse has no jobs to pause.
			if err := queue.ValidQueueName(q); err != nil {
				return badInput("%v", err)
			}
		}
		return e.changeQueues(names, *by, e.q.Pause,
			fmt.Sprintf("paused: workers stop claiming from it within %s; running jobs finish", queue.PauseRefresh), "already paused")
	}
}

func ctlResume(fs *flag.FlagSet) func(*env, []string) error {
	by := fs.String("by", "", "who resumes, recorded with the queue (default: user@host)")
	return func(e *env, names []string) error {
		if err := queueNames(names); err != nil {
			return err
		}
		return e.changeQueues(names, *by, e.q.Resume,
			fmt.Sprintf("resumed: workers claim from it again within %s", queue.PauseRefresh), "not paused")
	}
}

// changeQueues applies change to each queue of names, recording by (the
// operator when empty) as who made it, and reports each as reportChange
// does; it stops at the first error.
func (e *env) changeQueues(names []string, by string, change func(context.Context, string, string) (bool, error), done, unchanged string) error {
	if by == "" {
		by = operator()
	}
	for _, q := range names {
		changed, err := change(e.ctx, q, by)
		if err := e.reportChange(q, changed, err, done, unchanged); err != nil {
			return err
		}
	}
	return nil
}

// reportChange prints what a change to name did, given the write's result:
// done when it changed something, else how it already stood (unchanged)
// and that nothing changed. A write's error is returned as it is.
func (e *env) reportChange(name string, changed bool, err error, done, unchanged string) error {
	if err != nil {
		return err
	}
	if changed {
		fmt.Fprintf(e.stdout, "%s\t%s\n", shown(name), done)
	} else {
		fmt.Fprintf(e.stdout, "%s\t%s; nothing changed\n", shown(name), unchanged)
	}
	return nil
}

// pausedNote says how a queue's stored state reads in a table.
func pausedNote(s queue.QueueState) string {
	switch {
	case s.Malformed != "":
		return "running (its queues document is malformed: " + shown(s.Malformed) + ")"
	case s.Paused && !s.PausedAt.IsZero():
		note := "PAUSED since " + s.PausedAt.Format(time.RFC3339)
		if s.PausedBy != "" {
			note += " by " + shown(s.PausedBy)
		}
		return note
	case s.Paused:
		return "PAUSED"
	}
	return "running"
}

func ctlWorkers(fs *flag.FlagSet) func(*env, []string) error {
	ttl := fs.Duration("ttl", 0, "list processes seen within this long (default: within 3 of each process's beat intervals)")
	all := fs.Bool("all", false, "also list processes that stopped beating (kept an hour)")
	asJSON := fs.Bool("json", false, "print one JSON object per process")
	return func(e *env, rest []string) error {
		if len(rest) > 0 {
			return badInput("unexpected argument %q", rest[0])
		}
		if *ttl < 0 {
			return badInput("--ttl: %s must not be negative", *ttl)
		}
		list, err := e.q.Workers(e.ctx, *ttl, *all)
		if err != nil {
			return err
		}
		if *asJSON {
			for _, w := range list {
				limits := w.ProcessLimits
				if limits == nil {
					limits = map[string]int{} // an object always, as the registry stores it
				}
				b, err := json.Marshal(map[string]any{
					"id": w.ID, "host": w.Host, "pid": w.PID, "version": w.Version, "queues": w.Queues, "kinds": w.Kinds,
					"concurrency": w.Concurrency, "running": w.Running, "processLimits": limits, "startedAt": jsonTime(w.StartedAt),
					"lastSeen": jsonTime(w.LastSeen), "alive": w.Alive, "future": w.Future,
				})
				if err != nil {
					return err
				}
				if err := printJSON(e.stdout, b); err != nil {
					return err
				}
			}
			return nil
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "id\thost\tpid\tversion\tqueues\tconcurrency\trunning\tlimits\tstarted\tlast seen")
		for _, w := range list {
			queues := make([]string, len(w.Queues))
			for i, q := range w.Queues {
				queues[i] = shown(q)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", shown(w.ID), shown(w.Host), w.PID, shown(w.Version), strings.Join(queues, ","),
				w.Concurrency, w.Running, processLimitsCell(w.ProcessLimits), w.StartedAt.Format(time.RFC3339), lastSeen(w))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(list) == 0 {
			fmt.Fprintln(e.stderr, "no worker process is alive")
		}
		return nil
	}
}

// processLimitsCell says a process's limits in the workers table:
// kind:email=2,queue:reports=3, in name order, each name shown (another
// application may have stored it), and quoted when it holds a ',' or '='
// so that it reads as one entry; "-" when there are none.
func processLimitsCell(limits map[string]int) string {
	if len(limits) == 0 {
		return "-"
	}
	cells := make([]string, 0, len(limits))
	for _, name := range slices.Sorted(maps.Keys(limits)) {
		s := shown(name)
		if s == name && strings.ContainsAny(name, ",=") {
			s = strconv.Quote(name)
		}
		cells = append(cells, fmt.Sprintf("%s=%d", s, limits[name]))
	}
	return strings.Join(cells, ",")
}

// lastSeen says how a process's last beat reads in the workers table.
func lastSeen(w queue.WorkerInfo) string {
	switch {
	case w.LastSeen.IsZero():
		return "never (no lastSeen time)"
	case w.Future:
		return fmt.Sprintf("%s in the future (SUSPICIOUS: not a beat; not counted alive)", (-w.Age).Round(time.Millisecond))
	case w.Age < 0:
		return "just now"
	case !w.Alive:
		return w.Age.Round(time.Millisecond).String() + " ago (stopped beating)"
	}
	return w.Age.Round(time.Millisecond).String() + " ago"
}

// statsCounts are the counts stats prints, with where they come from.
type statsCounts struct {
	queue.StoredStats
	// Exact is set when they were counted now rather than read back.
	Exact bool
	// Why says why they were counted now when that was not asked for.
	Why string
}

// now is the time the counts are shown at: the server's when they were
// read back.
func (c statsCounts) now() time.Time {
	if c.ReadAt.IsZero() {
		return time.Now()
	}
	return c.ReadAt
}

// freshness says in one line where the counts come from and how old they
// are.
func (c statsCounts) freshness() string {
	if c.Exact {
		if c.Why != "" {
			return "counted now, exactly: " + c.Why
		}
		return "counted now, exactly (--exact)"
	}
	line := fmt.Sprintf("as of %s ago (%s), counted by %s", c.Age().Round(time.Second), c.CountedAt.Format(time.RFC3339), shown(orUnknown(c.By)))
	if c.Every > 0 {
		line += fmt.Sprintf(", the elected leader, every %s", c.Every.Round(time.Second))
	}
	line += "; --exact counts now"
	if c.Stale() {
		line += "; STALE: no leader has counted since; is a worker running?"
	}
	if c.Unreadable > 0 {
		line += fmt.Sprintf("; %d stored entries could not be read and are left out", c.Unreadable)
	}
	return line
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

// readStats returns the counts the elected leader stored or, with exact or
// when there are none to read, counts every job now, within ctx (bounded
// by the server timeout).
func readStats(ctx context.Context, q *queue.Client, exact bool, timeout time.Duration) (statsCounts, error) {
	var why string
	if !exact {
		s, err := q.StoredStats(ctx)
		switch {
		case err == nil:
			return statsCounts{StoredStats: s}, nil
		case errors.Is(err, queue.ErrNoStoredStats), errors.Is(err, queue.ErrStoredStatsMalformed):
			why = err.Error()
		default:
			return statsCounts{}, err
		}
	}
	stats, err := q.Stats(ctx)
	if err != nil {
		if ctx.Err() != nil || mongo.IsTimeout(err) {
			if why == "" {
				why = "--exact"
			}
			return statsCounts{}, fmt.Errorf("%s, and counting every job now did not end within %s (--mongo-timeout): start a worker, whose elected leader stores counts, or raise --mongo-timeout: %w", why, timeout, err)
		}
		return statsCounts{}, err
	}
	return statsCounts{StoredStats: queue.StoredStats{Queues: stats, CountedAt: time.Now().UTC()}, Exact: true, Why: why}, nil
}

// statsJSON is the document stats --json prints.
type statsJSON struct {
	// Source is "leader" (the counts the elected leader stored) or
	// "exact" (counted now).
	Source       string      `json:"source"`
	CountedAt    jsonTime    `json:"countedAt"`
	AgeSeconds   float64     `json:"ageSeconds"`
	CountedBy    string      `json:"countedBy,omitempty"`
	EverySeconds float64     `json:"everySeconds,omitempty"`
	Stale        bool        `json:"stale"`
	Note         string      `json:"note,omitempty"`
	Unreadable   int         `json:"unreadable,omitempty"`
	Queues       []queueJSON `json:"queues"`
	// Limits are the concurrency limits with their running jobs.
	Limits []limitJSON `json:"limits,omitempty"`
	// Rates are the rate limits with the starts they allow now.
	Rates []rateJSON `json:"rates,omitempty"`
	// WorkersAlive is how many worker processes are alive.
	WorkersAlive int `json:"workersAlive"`
	// Unserved are the waiting jobs whose kind no live worker serves on
	// their queue.
	Unserved []unservedJSON `json:"unserved"`
}

type unservedJSON struct {
	Queue   string `json:"queue"`
	Kind    string `json:"kind"`
	Waiting int64  `json:"waiting"`
}

type limitJSON struct {
	Name string `json:"name"`
	// Limit is the total, absent when only a partition limit applies.
	Limit          *int   `json:"limit,omitempty"`
	Running        int    `json:"running"`
	Waiting        int64  `json:"waiting"`
	PartitionBy    string `json:"partitionBy,omitempty"`
	PartitionLimit int    `json:"partitionLimit,omitempty"`
	Partitions     int    `json:"partitions,omitempty"`
	PartitionsFull int    `json:"partitionsFull,omitempty"`
	Malformed      string `json:"malformed,omitempty"`
}

type queueJSON struct {
	Queue           string                      `json:"queue"`
	Counts          map[string]map[string]int64 `json:"counts"`
	OldestAvailable *jsonTime                   `json:"oldestAvailable,omitempty"`
	Paused          bool                        `json:"paused,omitempty"`
	Capacity        *int                        `json:"capacity,omitempty"`
	Occupied        *int                        `json:"occupied,omitempty"`
}

func printStatsJSON(w io.Writer, r statsReport) error {
	c, served, paused, caps, limits, ls := r.counts, r.served, r.paused, r.caps, r.limits, r.ls
	out := statsJSON{Source: "leader", CountedAt: jsonTime(c.CountedAt), AgeSeconds: c.Age().Seconds(), CountedBy: c.By,
		EverySeconds: c.Every.Seconds(), Stale: c.Stale(), Unreadable: c.Unreadable, Queues: []queueJSON{},
		WorkersAlive: served.Alive, Unserved: []unservedJSON{}}
	for _, u := range served.Unserved(c.Queues) {
		out.Unserved = append(out.Unserved, unservedJSON{Queue: u.Queue, Kind: u.Kind, Waiting: u.Waiting})
	}
	if c.Exact {
		out.Source, out.Note = "exact", c.Why
	}
	byQueue := map[string]int{}
	row := func(name string) *queueJSON {
		i, ok := byQueue[name]
		if !ok {
			i = len(out.Queues)
			byQueue[name] = i
			out.Queues = append(out.Queues, queueJSON{Queue: name, Counts: map[string]map[string]int64{}})
		}
		return &out.Queues[i]
	}
	for _, qs := range c.Queues {
		r := row(qs.Queue)
		for k, states := range qs.Counts {
			if r.Counts[k] == nil {
				r.Counts[k] = map[string]int64{}
			}
			for st, n := range states {
				r.Counts[k][string(st)] += n
			}
		}
		if !qs.OldestAvailable.IsZero() {
			t := jsonTime(qs.OldestAvailable)
			r.OldestAvailable = &t
		}
	}
	for _, p := range paused {
		if p.Paused {
			row(p.Queue).Paused = true
		}
	}
	for _, cp := range caps {
		if cp.Malformed == "" {
			r := row(cp.Queue)
			capacity, occupied := cp.Capacity, cp.Occupied
			r.Capacity, r.Occupied = &capacity, &occupied
		}
	}
	sort.Slice(out.Queues, func(i, j int) bool { return out.Queues[i].Queue < out.Queues[j].Queue })
	for _, l := range limits {
		lj := limitJSON{Name: l.Name, Running: l.Running, Waiting: ls.waiting[l.Name], Malformed: l.Malformed,
			PartitionBy: l.PartitionBy, PartitionLimit: l.PartitionLimit, Partitions: l.Partitions, PartitionsFull: l.Saturated}
		if !l.NoTotal && l.Malformed == "" {
			n := l.Limit
			lj.Limit = &n
		}
		out.Limits = append(out.Limits, lj)
	}
	out.Rates = ls.json()
	return printIndentedJSON(w, out)
}
