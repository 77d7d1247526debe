package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/internal/testdb/asworker"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// The periodic harness: the counterpart, for the leader's periodic
// enqueuer, of handlers/harness_test.go. A pass of enqueuer A stalls after
// each of its steps (the read of the state, then each write); while it is
// stalled, everything else may happen: another leader's passes, the jobs
// running, an operator's purge, delete, cancel or retry, retention, a
// month-long outage, the next tick, the sweep of held jobs. Then A resumes
// (or resumes and dies at its next step), the passes, the jobs and the
// sweep run until nothing is left, and the invariants are checked:
//
//   - no tick's job runs twice (an operator's retry allows one more run);
//   - every tick taken runs once, unless an operator cancelled its job
//     before it ran;
//   - after an outage, the ticks taken are the latest due tick, once;
//   - no job is left held, no tick pending, no job unfinished.
//
// A's pass starts in one of five situations: the tick is due and nothing
// is pending, or a previous pass died after its take, its insert, its
// commit or its release.

// errPassKilled is what the hook of a pass killed at a step returns: the
// pass stops there, as if its process had died.
var errPassKilled = errors.New("harness: pass killed")

// passCtl stalls or kills the passes of one enqueuer at a step index
// (0 is the read of the state, then one per write).
type passCtl struct {
	w        *periodicWorld
	stallAt  int // -1: never
	killAt   int // -1: never; the pass dies right after this step
	mu       sync.Mutex
	steps    []string
	stalled  chan struct{}
	resume   chan struct{}
	didStall bool
}

func (w *periodicWorld) ctl(stallAt, killAt int) *passCtl {
	return &passCtl{w: w, stallAt: stallAt, killAt: killAt, stalled: make(chan struct{}), resume: make(chan struct{})}
}

func (c *passCtl) hook(ctx context.Context, step string) error {
	if step == "periodic:take" {
		c.w.recordTaken(ctx)
	}
	c.mu.Lock()
	c.steps = append(c.steps, step)
	k := len(c.steps) - 1
	stall := k == c.stallAt
	if stall {
		c.didStall = true
	}
	c.mu.Unlock()
	if stall {
		close(c.stalled)
		<-c.resume
	}
	if k == c.killAt {
		return fmt.Errorf("%w after %s", errPassKilled, step)
	}
	return nil
}

// periodicWorld is one schedule's world: a database of its own, a clock,
// and three enqueuers of one "@every 1s" job: P (a previous pass, killed),
// A (the pass under test) and B (the next leader).
type periodicWorld struct {
	t          *testing.T
	ctx        context.Context
	db         *mongo.Database
	q          *queue.Client
	clock      *fakeClock
	start      time.Time
	p, a, b    *recovery.PeriodicEnqueuer
	recordHook func(context.Context, string) error

	mu      sync.Mutex
	phase   string
	taken   []takenTick
	ran     map[string]int
	retried map[string]int
	dropped map[string]bool
	outage  bool // the schedule had a month-long outage
	// prepareCut: a failure reply stopped the previous pass before the
	// step it was to be killed at.
	prepareCut bool
}

type takenTick struct {
	tick  time.Time
	phase string
}

var harnessPeriodic = recovery.PeriodicJob{Name: "tick", Schedule: "@every 1s", Kind: "noop"}

func newPeriodicWorld(t *testing.T) *periodicWorld {
	t.Helper()
	db := testdb.NewDB(t)
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	q, err := queue.New(db, queue.Config{Logger: log})
	require.NoError(t, err)
	w := &periodicWorld{t: t, ctx: context.Background(), db: db, q: q,
		// Two months back: a job released at the clock's now, a month on
		// after the outage, is due for the runner's claim.
		clock: newClock(time.Now().UTC().Add(-60 * 24 * time.Hour).Truncate(time.Second)),
		ran:   map[string]int{}, retried: map[string]int{}, dropped: map[string]bool{}, phase: "start"}
	mk := func() *recovery.PeriodicEnqueuer {
		e, err := recovery.NewPeriodicEnqueuer(db, q, []recovery.PeriodicJob{harnessPeriodic}, log)
		require.NoError(t, err)
		e.SetNow(w.clock.now)
		return e
	}
	w.p, w.a, w.b = mk(), mk(), mk()
	w.recordHook = w.ctl(-1, -1).hook
	w.b.SetStep(w.recordHook)
	w.pass(w.p) // the first pass counts ticks from now
	w.start = w.clock.now()
	w.clock.add(time.Second)
	return w
}

// recordTaken notes the tick a take just wrote: until its pending is
// cleared, no other pass can move lastTick.
func (w *periodicWorld) recordTaken(ctx context.Context) {
	st := w.state(ctx)
	w.mu.Lock()
	w.taken = append(w.taken, takenTick{tick: st.LastTick.UTC(), phase: w.phase})
	w.mu.Unlock()
}

// harnessState is the periodic job's state document, as the harness reads it.
type harnessState struct {
	LastTick time.Time  `bson:"lastTick"`
	Pending  *time.Time `bson:"pending"`
}

// state reads the periodic job's state, retrying a failure reply; none
// before the first pass's insert.
func (w *periodicWorld) state(ctx context.Context) harnessState {
	var st harnessState
	w.must("read the periodic state", func() error {
		err := w.db.Collection(recovery.DefaultPeriodicCollection).FindOne(ctx, bson.D{{Key: "_id", Value: harnessPeriodic.Name}}).Decode(&st)
		if errors.Is(err, mongo.ErrNoDocuments) {
			return nil
		}
		return err
	})
	return st
}

// notePending records the tick pending in the state as taken, unless it
// was: a pass that returned a failure reply (devdb's --faults) may have
// taken it, its take applied and its reply lost, before its step hook
// (recordTaken) ran. Each tick is taken at most once (lastTick only moves
// on), so a tick recorded already is that take.
func (w *periodicWorld) notePending() {
	st := w.state(w.ctx)
	if st.Pending == nil {
		return
	}
	tick := st.Pending.UTC()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, tt := range w.taken {
		if tt.tick.Equal(tick) {
			return
		}
	}
	w.taken = append(w.taken, takenTick{tick: tick, phase: w.phase})
}

// must runs f, an app's or an operator's call, sending it again on a
// failure reply as an app on a replica set would (testdb.Retry), and fails
// the test on any other error.
func (w *periodicWorld) must(what string, f func() error) {
	w.t.Helper()
	require.NoError(w.t, testdb.Retry(w.t.Logf, what, f), what)
}

// pass runs one pass of e, as the leader does: a pass that met a failure
// reply stopped there, as if its process had died, and the next pass
// finishes what it left (notePending records a take it may have made).
func (w *periodicWorld) pass(e *recovery.PeriodicEnqueuer) {
	w.t.Helper()
	w.must("periodic pass", func() error {
		_, err := e.RunOnce(w.ctx)
		if testdb.Transient(err) {
			w.notePending()
		}
		return err
	})
}

// passEnded checks how a pass the harness kills at a step ended: killed
// there, or stopped earlier by a failure reply (devdb's --faults), which
// is a death at that write; then notes a take it may have made.
func (w *periodicWorld) passEnded(err error, msg string) {
	w.t.Helper()
	if testdb.Transient(err) {
		w.notePending()
		return
	}
	if err != nil {
		require.ErrorIs(w.t, err, errPassKilled, msg)
	}
}

func (w *periodicWorld) setPhase(p string) {
	w.mu.Lock()
	w.phase = p
	w.mu.Unlock()
}

// leader runs three passes of the next leader.
func (w *periodicWorld) leader() {
	for range 3 {
		w.pass(w.b)
	}
}

// run claims and completes every runnable job.
func (w *periodicWorld) run() {
	for {
		j, err := asworker.Claim(w.ctx, w.t.Logf, store.Of(w.q), store.ClaimParams{
			Owner: "runner", Queues: []string{jobs.DefaultQueue}, Kinds: []string{"noop"}, Lease: time.Minute,
		}, nil)
		require.NoError(w.t, err)
		if j == nil {
			return
		}
		w.mu.Lock()
		w.ran[j.ID]++
		w.mu.Unlock()
		w.must("complete", func() error { return store.Of(w.q).Complete(w.ctx, store.LeaseOf(j)) })
	}
}

func (w *periodicWorld) purge(s jobs.State) {
	w.must("purge", func() error { _, err := w.q.Purge(w.ctx, s, -time.Hour); return err })
}

func (w *periodicWorld) retention(s jobs.State) {
	w.must("retention", func() error { _, err := store.Of(w.q).Clean(w.ctx, s, -time.Hour, 1000); return err })
}

func (w *periodicWorld) sweep() {
	w.must("sweep orphans", func() error { _, err := w.b.SweepOrphans(w.ctx); return err })
}

// jobStates reads the state of every job of the given states.
func (w *periodicWorld) jobStates(states ...jobs.State) map[string]jobs.State {
	var found []jobs.Job
	w.must("read jobs", func() error {
		cur, err := store.Of(w.q).Collection().Find(w.ctx, bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: states}}}})
		if err != nil {
			return err
		}
		return cur.All(w.ctx, &found)
	})
	out := map[string]jobs.State{}
	for _, j := range found {
		out[j.ID] = j.State
	}
	return out
}

// cancelAvailable is the operator cancelling every job not yet run, held
// ones too. Which it dropped is read back: a cancel whose reply failed
// may have been applied, and its resend then refused.
func (w *periodicWorld) cancelAvailable() {
	before := w.jobStates(jobs.StateAvailable)
	for id := range before {
		err := testdb.Retry(w.t.Logf, "cancel", func() error { _, err := w.q.Cancel(w.ctx, id); return err })
		if err != nil && testdb.Transient(err) {
			require.NoError(w.t, err)
		}
	}
	after := w.jobStates(jobs.StateCancelled)
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range before {
		if after[id] == jobs.StateCancelled {
			w.dropped[id] = true
		}
	}
}

// retrySucceeded is the operator retrying every succeeded job. Which it
// retried is read back: a retry whose reply failed may have been applied
// to some, which its resend no longer selects.
func (w *periodicWorld) retrySucceeded() {
	before := w.jobStates(jobs.StateSucceeded)
	w.must("retry", func() error {
		_, err := w.q.Retry(w.ctx, queue.JobFilter{States: []jobs.State{jobs.StateSucceeded}})
		return err
	})
	after := w.jobStates(jobs.StateSucceeded)
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range before {
		if _, still := after[id]; !still {
			w.retried[id]++
		}
	}
}

// periodicDisturbances is what may happen while A is stalled, each run to
// completion.
var periodicDisturbances = []struct {
	name string
	do   func(w *periodicWorld)
}{
	{"leader", func(w *periodicWorld) { w.leader() }},
	{"leader-run-purge", func(w *periodicWorld) { w.leader(); w.run(); w.purge(jobs.StateSucceeded) }},
	{"leader-run-retention", func(w *periodicWorld) { w.leader(); w.run(); w.retention(jobs.StateSucceeded) }},
	{"leader-run-delete", func(w *periodicWorld) {
		w.leader()
		w.run()
		w.must("delete", func() error {
			_, err := w.q.Delete(w.ctx, queue.JobFilter{States: []jobs.State{jobs.StateSucceeded}}, false)
			return err
		})
	}},
	{"leader-cancel-retention", func(w *periodicWorld) {
		w.leader()
		w.cancelAvailable()
		w.retention(jobs.StateCancelled)
	}},
	{"leader-run-retry-run-purge", func(w *periodicWorld) {
		w.leader()
		w.run()
		w.retrySucceeded()
		w.run()
		w.purge(jobs.StateSucceeded)
	}},
	{"outage", func(w *periodicWorld) {
		w.clock.add(30 * 24 * time.Hour)
		w.mu.Lock()
		w.outage = true
		w.mu.Unlock()
		w.setPhase("outage")
		w.leader()
		w.setPhase("after-outage")
		w.run()
		w.purge(jobs.StateSucceeded)
	}},
	{"next-tick", func(w *periodicWorld) {
		w.leader()
		w.run()
		w.purge(jobs.StateSucceeded)
		w.clock.add(time.Second)
		w.leader()
		w.run()
		w.purge(jobs.StateSucceeded)
		w.sweep()
	}},
}

// periodicSituations: where the pass before A's died (-1: it did not run).
var periodicSituations = []struct {
	name   string
	killAt int
}{{"due", -1}, {"died-after-take", 1}, {"died-after-insert", 2}, {"died-after-commit", 3}, {"died-after-release", 4}}

type periodicSchedule struct {
	situation, stall, disturbance int
	dieOnResume                   bool
}

func (s periodicSchedule) String() string {
	resume := "resumes"
	if s.dieOnResume {
		resume = "resumes-and-dies"
	}
	return fmt.Sprintf("%s/A-stall-%d/%s/%s", periodicSituations[s.situation].name, s.stall, periodicDisturbances[s.disturbance].name, resume)
}

// prepare runs the previous pass of situation, killed where it says.
func (w *periodicWorld) prepare(situation int) {
	if k := periodicSituations[situation].killAt; k >= 0 {
		w.p.SetStep(w.ctl(-1, k).hook)
		_, err := w.p.RunOnce(w.ctx)
		require.Error(w.t, err, "the previous pass was not killed")
		w.prepareCut = testdb.Transient(err)
		w.passEnded(err, "the previous pass")
	}
}

// settle runs passes, jobs and the sweep until nothing is left to do.
func (w *periodicWorld) settle() {
	w.setPhase("settle")
	w.a.SetStep(w.recordHook)
	for range 3 {
		w.pass(w.a)
		w.leader()
		w.run()
	}
	w.sweep()
	w.run()
}

// check checks the invariants from what ran and from the database.
func (w *periodicWorld) check() {
	t := w.t
	w.mu.Lock()
	defer w.mu.Unlock()
	takenIDs := map[string]bool{}
	for _, tt := range w.taken {
		takenIDs[recovery.PeriodicJobID(harnessPeriodic.Name, tt.tick)] = true
	}
	for id, n := range w.ran {
		require.LessOrEqual(t, n, 1+w.retried[id], "tick job %s ran %d times (retried %d times by the operator)", id, n, w.retried[id])
		require.True(t, takenIDs[id], "job %s ran for a tick never taken", id)
	}
	for id := range takenIDs {
		if !w.dropped[id] {
			require.GreaterOrEqual(t, w.ran[id], 1, "tick job %s was taken and never ran (ran: %v)", id, w.ran)
		}
	}
	var outage []time.Time
	for _, tt := range w.taken {
		if tt.phase == "outage" {
			outage = append(outage, tt.tick)
		}
	}
	if w.outage {
		require.Equal(t, []time.Time{w.clock.now().UTC()}, outage, "after a month away the ticks taken are the latest, once")
	}
	var held, open int64
	w.must("count held jobs", func() (err error) {
		held, err = store.Of(w.q).Collection().CountDocuments(w.ctx, bson.D{{Key: "periodicHold", Value: bson.D{{Key: "$exists", Value: true}}}, {Key: "state", Value: jobs.StateAvailable}})
		return err
	})
	require.Zero(t, held, "held jobs left")
	w.must("count unfinished jobs", func() (err error) {
		open, err = store.Of(w.q).Collection().CountDocuments(w.ctx, bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{jobs.StateAvailable, jobs.StateRunning}}}}})
		return err
	})
	require.Zero(t, open, "unfinished jobs left")
	var st bson.M
	w.must("read the periodic state", func() error {
		return w.db.Collection(recovery.DefaultPeriodicCollection).FindOne(w.ctx, bson.D{{Key: "_id", Value: harnessPeriodic.Name}}).Decode(&st)
	})
	require.NotContains(t, st, "pending", "a tick left pending")
}

// runPeriodic runs one schedule.
func runPeriodic(t *testing.T, s periodicSchedule) {
	w := newPeriodicWorld(t)
	w.prepare(s.situation)
	killAt := -1
	if s.dieOnResume {
		killAt = s.stall + 1
	}
	c := w.ctl(s.stall, killAt)
	w.a.SetStep(c.hook)
	done := make(chan error, 1)
	go func() {
		_, err := w.a.RunOnce(w.ctx)
		done <- err
	}()
	var err error
	finished := false
	select {
	case <-c.stalled:
	case err = <-done:
		finished = true
	case <-time.After(30 * time.Second):
		t.Fatal("pass A neither stalled nor ended")
	}
	w.setPhase("disturbance")
	periodicDisturbances[s.disturbance].do(w)
	if !finished {
		close(c.resume)
		err = <-done
	}
	w.passEnded(err, "pass A failed")
	w.settle()
	w.check()
}

// dryRunPeriodic runs A's pass in situation undisturbed and returns its
// steps, and whether a failure reply (devdb's --faults) cut the previous
// pass or A's short: their steps are then not the situation's.
func dryRunPeriodic(t *testing.T, situation int) (steps []string, cut bool) {
	w := newPeriodicWorld(t)
	w.prepare(situation)
	c := w.ctl(-1, -1)
	w.a.SetStep(c.hook)
	_, err := w.a.RunOnce(w.ctx)
	cut = testdb.Transient(err) || w.prepareCut
	if !testdb.Transient(err) {
		require.NoError(t, err)
	}
	w.passEnded(err, "pass A failed")
	w.settle()
	w.check()
	return c.steps, cut
}

// periodicSchedules lists the schedules: every situation, every stall
// point of A, every disturbance, A resuming or dying at its next step. A
// default run takes, for each situation and stall point, two disturbances
// in turn (every disturbance meets every situation), the resume and the
// death alternating; DOCKET_HARNESS=full runs them all.
func periodicSchedules(steps [][]string, full bool) []periodicSchedule {
	var out []periodicSchedule
	nd := len(periodicDisturbances)
	for sit, st := range steps {
		for stall := range st {
			for d := range nd {
				for _, die := range []bool{false, true} {
					k := ((d-sit-2*stall)%nd + nd) % nd
					pick := k == 0 || k == nd/2
					if full || pick && die == ((stall+d)%2 == 1) {
						out = append(out, periodicSchedule{situation: sit, stall: stall, disturbance: d, dieOnResume: die})
					}
				}
			}
		}
	}
	return out
}

// dryRunTries bounds the dry runs of a situation that failure replies cut.
const dryRunTries = 5

// TestPeriodicHarness runs the periodic schedules (see the top of this
// file) and logs how many it explored.
func TestPeriodicHarness(t *testing.T) {
	full := os.Getenv("DOCKET_HARNESS") == "full"
	start := time.Now()
	steps := make([][]string, len(periodicSituations))
	for i, s := range periodicSituations {
		// A dry run that a failure reply cut short runs again, each
		// checked, until one is whole.
		cut := true
		for try := 0; cut && try < dryRunTries; try++ {
			name := "dry-run/" + s.name
			if try > 0 {
				name += fmt.Sprintf("/again-%d", try)
			}
			t.Run(name, func(t *testing.T) { steps[i], cut = dryRunPeriodic(t, i) })
		}
		require.False(t, cut, "every dry run of %s met a failure reply", s.name)
	}
	require.False(t, t.Failed(), "a dry run failed")
	schedules := periodicSchedules(steps, full)
	var failed atomic.Int64
	t.Run("schedules", func(t *testing.T) {
		for _, s := range schedules {
			t.Run(s.String(), func(t *testing.T) {
				t.Parallel()
				defer func() {
					if t.Failed() {
						failed.Add(1)
					}
				}()
				runPeriodic(t, s)
			})
		}
	})
	mode := map[bool]string{false: "sample", true: "full"}[full]
	msg := fmt.Sprintf("periodic harness: steps %q, %d schedules explored (%s), %d violations, %s",
		steps, len(schedules), mode, failed.Load(), time.Since(start).Round(time.Millisecond))
	t.Log(msg)
	if testing.Verbose() {
		fmt.Println(msg)
	}
}
