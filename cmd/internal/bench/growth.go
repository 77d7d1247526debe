package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// The growth run's defaults: its backlogs, the finished jobs retained beside
// a small backlog at its last point, how long each point is measured, and
// the budget the whole run stops itself within.
const (
	DefaultGrowthBacklogs        = "300,3000,20000,100000"
	DefaultGrowthRetained        = 1_000_000
	DefaultGrowthRetainedBacklog = 300
	DefaultGrowthWindow          = 60 * time.Second
	DefaultGrowthBudget          = 10 * time.Minute
)

// growthChunk is how many jobs one insert of the growth run's loads sends.
const growthChunk = 1000

// growthStopGrace is how long a growth point's worker process has to stop
// after its window before a second signal, and half as long again before a
// SIGKILL: on a slow server its last completions and its resignation take
// seconds each.
const growthStopGrace = 30 * time.Second

// Growth is how docket's cost grows with the work: one worker process with
// its defaults and the raw loop at the same concurrency, each on a fresh
// database, at growing backlogs of no-op jobs and beside many retained
// finished jobs, each measured for a bounded window (or until drained), the
// whole run within a budget.
type Growth struct {
	Concurrency   int          `json:"concurrency"`
	WindowSeconds float64      `json:"windowSeconds"`
	BudgetSeconds float64      `json:"budgetSeconds"`
	Seconds       float64      `json:"seconds"`
	Rows          []*GrowthRow `json:"rows"`
	// Skipped says, for each point not measured, why.
	Skipped []string `json:"skipped,omitempty"`
}

// GrowthRow is one system at one point of the growth run.
type GrowthRow struct {
	System   string `json:"system"` // "docket" or "raw"
	Backlog  int    `json:"backlog"`
	Retained int    `json:"retained,omitempty"`
	// LoadSeconds is the time to insert the retained jobs and the backlog;
	// ReadySeconds, docket's, from the worker process's start until it
	// claims.
	LoadSeconds  float64 `json:"loadSeconds"`
	ReadySeconds float64 `json:"readySeconds,omitempty"`
	// Seconds is the window measured: from the first claim possible until
	// the backlog was drained or the window ended.
	Seconds float64 `json:"seconds"`
	Drained bool    `json:"drained"`
	// Completed counts the jobs the completions' replies finished in the
	// window; SucceededInDB the backlog's jobs the database holds as
	// succeeded once the system stopped (-1: the count failed).
	Completed     int64   `json:"completed"`
	SucceededInDB int64   `json:"succeededInDB"`
	JobsPerSec    float64 `json:"jobsPerSec"`
	// VsRaw is docket's jobs/s over the raw loop's at the same point.
	VsRaw float64 `json:"vsRaw,omitempty"`
	// Commands counts the commands sent in the window, all of them.
	Commands       int64   `json:"commands"`
	CommandsPerJob float64 `json:"commandsPerJob,omitempty"`
	// Claims are the claims answered in the window, with their round
	// trips in ms (a batch claim's find and stamp together); ClaimErrors the
	// claims' commands that failed.
	Claims      int     `json:"claims"`
	ClaimP50    float64 `json:"claimP50ms"`
	ClaimP99    float64 `json:"claimP99ms"`
	ClaimErrors int64   `json:"claimErrors"`
	// GivenBack counts the jobs given back unstarted in the window, their
	// attempt not counted (the worker's ReleasedUnstarted: a claim whose
	// reply it lost, a lease too short to start).
	GivenBack int64 `json:"givenBack"`
	// LeaderTerms is docket's leadership's term once its one process
	// stopped: 1 when it was elected once and never lost it (0: unread).
	LeaderTerms int64 `json:"leaderTerms,omitempty"`
	// StopSeconds is how long docket's worker process took to stop after
	// the window; StoppedBy is "second signal" or "killed" when the first
	// SIGTERM did not stop it in time.
	StopSeconds float64 `json:"stopSeconds,omitempty"`
	StoppedBy   string  `json:"stoppedBy,omitempty"`
	// Note says what the row is short of: "measured 60 s of 100,000, not
	// drained", an error.
	Note string `json:"note,omitempty"`
}

type growthPoint struct{ backlog, retained int }

func (p growthPoint) String() string {
	if p.retained > 0 {
		return thousands(p.backlog) + " beside " + thousands(p.retained) + " retained"
	}
	return thousands(p.backlog)
}

// growth makes the growth run: its points in order, docket then the raw
// loop at each, skipping what the budget no longer holds.
func (b *bencher) growth(ctx context.Context) (*Growth, error) {
	start := time.Now()
	deadline := start.Add(b.o.GrowthBudget)
	g := &Growth{Concurrency: worker.DefaultConcurrency, WindowSeconds: b.o.GrowthWindow.Seconds(), BudgetSeconds: b.o.GrowthBudget.Seconds()}
	var points []growthPoint
	for _, n := range b.o.GrowthBacklogs {
		points = append(points, growthPoint{backlog: n})
	}
	if b.o.GrowthRetained > 0 {
		points = append(points, growthPoint{backlog: b.o.GrowthRetainedBacklog, retained: b.o.GrowthRetained})
	}
	var perDoc time.Duration // load time per document, as measured
	for _, pt := range points {
		load := time.Duration(pt.backlog+pt.retained) * perDoc
		left := time.Until(deadline)
		if need := 2 * (b.o.GrowthWindow + load); left < need {
			why := fmt.Sprintf("%s skipped: the budget ran out (%s left of %s; a point needs two windows of %s",
				pt, left.Round(time.Second), b.o.GrowthBudget, b.o.GrowthWindow)
			if load > 0 {
				why += fmt.Sprintf(" and two loads of about %s", load.Round(time.Second))
			}
			g.Skipped = append(g.Skipped, why+")")
			fmt.Fprintf(b.log, "bench: growth: %s\n", why+")")
			continue
		}
		var rows []*GrowthRow
		for _, system := range []string{"docket", "raw"} {
			// Leave the raw loop the window docket had, or half what is
			// left: the two are compared.
			share := 2
			if system == "raw" {
				share = 1
			}
			row, err := b.growthPoint(ctx, system, pt, deadline, share, load)
			if err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				row = &GrowthRow{System: system, Backlog: pt.backlog, Retained: pt.retained, SucceededInDB: -1, Note: err.Error()}
			}
			if row.LoadSeconds > 0 {
				perDoc = time.Duration(row.LoadSeconds * float64(time.Second) / float64(pt.backlog+pt.retained))
				load = time.Duration(pt.backlog+pt.retained) * perDoc
			}
			fmt.Fprintf(b.log, "bench: growth: %s at %s: %s\n", system, pt, row.summary())
			rows = append(rows, row)
		}
		if rows[1].JobsPerSec > 0 {
			rows[0].VsRaw = rows[0].JobsPerSec / rows[1].JobsPerSec
		}
		g.Rows = append(g.Rows, rows...)
	}
	g.Seconds = time.Since(start).Seconds()
	return g, nil
}

// growthPoint measures one system at one point on a fresh database, for the
// window or 1/share of the budget left after the load, whichever is less.
func (b *bencher) growthPoint(ctx context.Context, system string, pt growthPoint, deadline time.Time, share int, nextLoad time.Duration) (*GrowthRow, error) {
	name := fmt.Sprintf("growth_%s_%d", system, pt.backlog)
	if pt.retained > 0 {
		name += fmt.Sprintf("_r%d", pt.retained)
	}
	db, q, err := b.freshDB(ctx, name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Drop(context.Background()) }()
	row := &GrowthRow{System: system, Backlog: pt.backlog, Retained: pt.retained, SucceededInDB: -1}
	t := time.Now()
	if err := loadGrowth(ctx, q, pt, deadline); err != nil {
		return nil, fmt.Errorf("loading %s: %w", pt, err)
	}
	row.LoadSeconds = time.Since(t).Seconds()
	window := b.o.GrowthWindow
	if share > 1 {
		window = min(window, (time.Until(deadline)-nextLoad)/time.Duration(share))
	} else {
		window = min(window, time.Until(deadline))
	}
	if window < time.Second {
		row.Note = "not measured: the budget ran out while loading"
		return row, nil
	}
	if system == "docket" {
		err = b.growthDocket(ctx, db, row, window, deadline)
	} else {
		err = b.growthRaw(ctx, db, q, row, window)
	}
	if err != nil {
		return nil, err
	}
	if !row.Drained && row.Note == "" {
		row.Note = fmt.Sprintf("measured %s of %s, not drained", time.Duration(row.Seconds*float64(time.Second)).Round(time.Second), pt)
	}
	// The cross-check of the monitor's count: the backlog's jobs the
	// database holds as succeeded (at least those completed in the window).
	cctx, cancel := context.WithTimeout(ctx, max(time.Until(deadline), time.Minute))
	defer cancel()
	if n, err := store.Of(q).Collection().CountDocuments(cctx, bson.D{{Key: "state", Value: jobs.StateSucceeded}}); err == nil {
		row.SucceededInDB = n - int64(pt.retained)
	}
	return row, nil
}

// loadGrowth inserts pt's retained jobs, finished an hour ago to a minute
// ago (inside the default retention, which leaves them be), then its
// backlog, in chunks of growthChunk; it gives up at deadline.
func loadGrowth(ctx context.Context, q *queue.Client, pt growthPoint, deadline time.Time) error {
	coll := store.Of(q).Collection()
	now := time.Now()
	for i := 0; i < pt.retained; i += growthChunk {
		if time.Now().After(deadline) {
			return fmt.Errorf("the budget ran out after %s of %s retained jobs", thousands(i), thousands(pt.retained))
		}
		docs := make([]any, min(growthChunk, pt.retained-i))
		for k := range docs {
			finished := now.Add(-time.Hour + time.Duration(i+k)*(time.Hour-time.Minute)/time.Duration(pt.retained))
			j, err := queue.NewJob(queue.Insert{Kind: "noop"}, finished.Add(-time.Second))
			if err != nil {
				return err
			}
			j.State, j.Attempt, j.UpdatedAt, j.FinishedAt = jobs.StateSucceeded, 1, finished, &finished
			docs[k] = j
		}
		if _, err := coll.InsertMany(ctx, docs); err != nil {
			return err
		}
	}
	for i := 0; i < pt.backlog; i += growthChunk {
		ins := make([]queue.Insert, min(growthChunk, pt.backlog-i))
		for k := range ins {
			ins[k] = queue.Insert{Kind: "noop"}
		}
		if _, err := q.EnqueueMany(ctx, ins); err != nil {
			return err
		}
	}
	return nil
}

// growthDocket runs one worker process with its defaults on db for window
// or until the backlog is drained.
func (b *bencher) growthDocket(ctx context.Context, db *mongo.Database, row *GrowthRow, window time.Duration, deadline time.Time) error {
	t := time.Now()
	p, err := startWorker(workerOpts{uri: b.uri, db: db.Name(), concurrency: worker.DefaultConcurrency, claimBatch: defaultClaimBatch}, b.log)
	if err != nil {
		return err
	}
	if err := p.waitReady(max(time.Until(deadline), time.Minute)); err != nil {
		_, _, _ = p.stopWithin(growthStopGrace)
		return err
	}
	row.ReadySeconds = time.Since(t).Seconds()
	t0 := time.Now()
	base, n0 := p.window()
	end, n1 := base, n0
	exited := false
	// The backlog is drained when the worker has completed all of it, some
	// perhaps in the moment between its start and its ready report.
	for time.Since(t0) < window {
		time.Sleep(reportEvery)
		select {
		case <-p.done:
			exited = true
		default:
		}
		if end, n1 = p.window(); end.Completed >= int64(row.Backlog) || exited {
			break
		}
	}
	row.Seconds = time.Since(t0).Seconds()
	row.Drained = end.Completed >= int64(row.Backlog)
	row.Completed = end.Completed - base.Completed
	row.Commands = end.Commands - base.Commands
	row.GivenBack = end.GivenBack - base.GivenBack
	row.ClaimErrors = end.ClaimErrors - base.ClaimErrors
	claims := p.claimsSince(n0)[:n1-n0]
	row.Claims, row.ClaimP50, row.ClaimP99 = len(claims), pct(claims, 50), pct(claims, 99)
	row.derive()

	t = time.Now()
	_, how, err := p.stopWithin(growthStopGrace)
	row.StopSeconds, row.StoppedBy = time.Since(t).Seconds(), how
	if exited {
		return fmt.Errorf("the worker process exited during the window: %v", err)
	}
	if err != nil {
		row.Note = err.Error()
	}
	var lease struct {
		Term int64 `bson:"term"`
	}
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := db.Collection(leadership.DefaultCollection).FindOne(lctx, bson.D{{Key: "_id", Value: leadership.DefaultName}}).Decode(&lease); err == nil {
		row.LeaderTerms = lease.Term
	}
	return nil
}

// growthRaw runs the raw loop at docket's default concurrency on db for
// window or until it finds no job. Its client is its own, so that ending
// the window closes its connections (a server such as devdb then drops the
// commands they left waiting).
func (b *bencher) growthRaw(ctx context.Context, db *mongo.Database, q *queue.Client, row *GrowthRow, window time.Duration) error {
	mon := newMonitor(store.Of(q).Collection().Name())
	c, err := mongo.Connect(options.Client().ApplyURI(b.uri).SetMonitor(mon.commandMonitor()))
	if err != nil {
		return err
	}
	defer func() { _ = c.Disconnect(context.Background()) }()
	coll := c.Database(db.Name()).Collection(store.Of(q).Collection().Name(),
		options.Collection().SetWriteConcern(writeconcern.Majority()))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu   sync.Mutex
		end  snapshot
		errs []error
		wg   sync.WaitGroup
	)
	t0 := time.Now()
	// At the window's end the counts are taken, then the commands in flight
	// cancelled: those count for nothing.
	fired := make(chan struct{})
	timer := time.AfterFunc(window, func() {
		defer close(fired)
		mu.Lock()
		end = mon.snapshot(true)
		row.Seconds = time.Since(t0).Seconds()
		mu.Unlock()
		cancel()
	})
	for range worker.DefaultConcurrency {
		wg.Go(func() {
			if err := rawClaimLoop(wctx, coll, nil); err != nil && wctx.Err() == nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if timer.Stop() { // every goroutine ended before the window did
		end = mon.snapshot(true)
		row.Seconds = time.Since(t0).Seconds()
		row.Drained = len(errs) == 0
	} else {
		<-fired
	}
	mu.Lock()
	defer mu.Unlock()
	row.Completed, row.Commands = end.Completed, end.Commands
	row.ClaimErrors, row.GivenBack = end.ClaimErrors, end.GivenBack
	row.Claims, row.ClaimP50, row.ClaimP99 = len(end.ClaimMs), pct(end.ClaimMs, 50), pct(end.ClaimMs, 99)
	row.derive()
	if len(errs) > 0 {
		row.Note = fmt.Sprintf("%d of %d goroutines stopped on an error: %v", len(errs), worker.DefaultConcurrency, errs[0])
	}
	return nil
}

func (r *GrowthRow) derive() {
	if r.Seconds > 0 {
		r.JobsPerSec = float64(r.Completed) / r.Seconds
	}
	if r.Completed > 0 {
		r.CommandsPerJob = float64(r.Commands) / float64(r.Completed)
	}
}

// summary is the row in one line, for the progress log.
func (r *GrowthRow) summary() string {
	if r.Seconds == 0 {
		return r.Note
	}
	s := fmt.Sprintf("%d jobs in %.1fs (%.2f jobs/s), %.2f commands/job, claim p50 %s p99 %s, %d given back",
		r.Completed, r.Seconds, r.JobsPerSec, r.CommandsPerJob, msStr(r.ClaimP50), msStr(r.ClaimP99), r.GivenBack)
	if r.Note != "" {
		s += "; " + r.Note
	}
	return s
}

func (g *Growth) write(w io.Writer) {
	fmt.Fprintf(w, "\ngrowth: one worker process with its defaults (%d jobs at once) against the raw loop's %d goroutines, each on a fresh database, each measured %s or until drained; took %s of a %s budget\n",
		g.Concurrency, g.Concurrency, time.Duration(g.WindowSeconds*float64(time.Second)), time.Duration(g.Seconds*float64(time.Second)).Round(time.Second),
		time.Duration(g.BudgetSeconds*float64(time.Second)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tbacklog\tretained\twindow\tdone\tin db\tjobs/s\tdocket/raw\tcmds/job\tclaims\tclaim p50\tclaim p99\tclaim errs\tgiven back\tleader terms\tstop\t")
	for _, r := range g.Rows {
		ratio, terms, stop, cmds := "-", "-", "-", "-"
		if r.VsRaw > 0 {
			ratio = fmt.Sprintf("%.2f", r.VsRaw)
		}
		if r.LeaderTerms > 0 {
			terms = strconv.FormatInt(r.LeaderTerms, 10)
		}
		if r.System == "docket" && r.Seconds > 0 {
			stop = fmt.Sprintf("%.1fs", r.StopSeconds)
			if r.StoppedBy != "" {
				stop += " (" + r.StoppedBy + ")"
			}
		}
		if r.Completed > 0 {
			cmds = fmt.Sprintf("%.2f", r.CommandsPerJob)
		}
		done := strconv.FormatInt(r.Completed, 10)
		if r.Drained {
			done += " (all)"
		}
		inDB := "-"
		if r.SucceededInDB >= 0 {
			inDB = strconv.FormatInt(r.SucceededInDB, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1fs\t%s\t%s\t%.2f\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t\n",
			r.System, thousands(r.Backlog), thousands(r.Retained), r.Seconds, done, inDB, r.JobsPerSec, ratio, cmds,
			r.Claims, msStr(r.ClaimP50), msStr(r.ClaimP99), r.ClaimErrors, r.GivenBack, terms, stop)
	}
	_ = tw.Flush()
	for _, r := range g.Rows {
		if r.Note != "" {
			fmt.Fprintf(w, "growth: %s at %s: %s\n", r.System, growthPoint{r.Backlog, r.Retained}, r.Note)
		}
	}
	for _, s := range g.Skipped {
		fmt.Fprintf(w, "growth: %s\n", s)
	}
}

// thousands writes n with commas: 100,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// parseBacklogs reads --growth-backlogs: "300,3000,20000".
func parseBacklogs(s string) ([]int, error) {
	var ns []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, errors.New("--growth-backlogs: want positive numbers separated by commas, got " + strconv.Quote(s))
		}
		ns = append(ns, n)
	}
	return ns, nil
}
