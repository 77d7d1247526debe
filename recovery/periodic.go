package recovery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/robfig/cron/v3"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.uber.org/zap"
)

// PeriodicJob is a job enqueued on a schedule.
type PeriodicJob struct {
	// Name identifies the periodic job across restarts; its ticks are
	// counted under it. Required, at most 100 bytes.
	Name string
	// Schedule is a cron spec: five fields, or six with seconds first
	// ("*/10 * * * * *"), or a descriptor ("@hourly", "@every 30s").
	Schedule string
	// Kind, Args, Queue, Priority and MaxAttempts are those of each job
	// enqueued. Args is anything that encodes to a BSON document (the
	// configuration file's mapping, a typed args struct); defaults to {}.
	Kind        string
	Args        any
	Queue       string
	Priority    int
	MaxAttempts int
}

// defaultPeriodicCollection holds the state of the periodic jobs: for each
// name, the last tick enqueued.
const defaultPeriodicCollection = "periodic"

// periodicParser reads schedules with an optional seconds field.
var periodicParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// PeriodicEnqueuer enqueues each tick of its periodic jobs exactly once,
// however many processes run one: it is meant to run in the elected
// leader, but two running at once (a deposed leader that stalled, say)
// still enqueue each tick once, and a pass that stalls between any two of
// its writes and resumes after everything else happened (another leader
// enqueued the tick, the job ran and was purged or removed by retention)
// enqueues nothing more.
//
// For each job it keeps {_id: name, lastTick, pending, gen, committed} in
// the periodic collection. The tick's job, periodic:NAME:TICK, is first
// inserted held (runAt far in the future, and periodicHold: {name, tick,
// gen}), then released (runAt now, periodicHold removed) once the state
// document records the tick as committed. A pass:
//
//  1. takes the latest due tick: moves lastTick to it with pending set and
//     gen 1, by a write conditioned on the state it read;
//  2. inserts the tick's job held under its gen;
//  3. commits: sets committed, conditioned on pending and gen being still
//     its own and committed not set;
//  4. releases the job held under its gen;
//  5. clears pending, gen and committed.
//
// A pass that finds pending set finishes that tick first: when committed,
// it releases the job held under the recorded gen (a no-op if that was
// done) and clears; otherwise its writer may be dead or stalled, and the
// pass supersedes it (gen+1, conditioned on the gen it read and on no
// commit) and goes on from step 2 under the new gen.
//
// Why this runs each tick at most once, whatever stalls: an insert cannot
// be conditioned on another document, and a purge removes the job's id,
// so a late insert lands whenever it arrives. It lands held, and only the
// release makes a job runnable. Commit is conditioned on the state, so at
// most one gen commits a tick, and no gen supersedes a committed one; a
// release is conditioned on the committed gen. A job held under that gen
// exists only from its committer's own insert (or its conditioned re-gen of
// an older held job, see below), which was acknowledged before the commit:
// no copy of it can land after the release. Any other late insert is held
// under a gen that never commits: its writer's commit fails and it deletes
// what it inserted, or, if it died first, the orphan sweep deletes it.
// Why no tick is lost: pending is cleared only after a release, or when
// the tick's job was found already there and not held (inserted before
// holds existed, or by another app); a writer that dies leaves pending for
// the next pass. An insert that finds a job held under an older gen moves
// it to its own gen, conditioned on the gen it read (an older gen never
// commits: it was superseded before any commit); one held under a newer
// gen means this pass was superseded: it stops. An operator who cancels or
// deletes a held job decides for that tick: it is not released.
//
// Ticks missed while no process ran (or while the leader was changing) are
// not caught up one by one: the latest missed tick is enqueued once, and
// the earlier ones are skipped. A job's first pass enqueues nothing: it
// starts counting ticks from then.
type PeriodicEnqueuer struct {
	q     *queue.Client
	state *mongo.Collection
	jobs  []periodicJob
	log   *zap.Logger
	now   func() time.Time
	// step, when set (by tests), is called after the read of a job's
	// state and after each write of a pass, with the step's name: where a
	// pass may stall.
	step func(ctx context.Context, name string) error

	mu       sync.Mutex
	sweptAt  map[string]time.Time // when each job's orphans were last swept
	sweepGap time.Duration
}

type periodicJob struct {
	PeriodicJob
	sched cron.Schedule
}

// NewPeriodicEnqueuer returns an enqueuer of jobs into q, keeping its state
// in db. Every job is checked now: a bad schedule, name or kind is an
// error naming the job.
func NewPeriodicEnqueuer(db *mongo.Database, q *queue.Client, list []PeriodicJob, log *zap.Logger) (*PeriodicEnqueuer, error) {
	if log == nil {
		log = zap.NewNop()
	}
	jobs, err := parsePeriodicJobs(list)
	if err != nil {
		return nil, fmt.Errorf("recovery: %w", err)
	}
	return &PeriodicEnqueuer{
		q:    q,
		jobs: jobs,
		log:  log.Named("periodic"),
		now:  time.Now,

		sweptAt:  map[string]time.Time{},
		sweepGap: orphanSweepInterval,
		state:    db.Collection(defaultPeriodicCollection, options.Collection().SetWriteConcern(writeconcern.Majority())),
	}, nil
}

// ValidatePeriodicJobs reports the first periodic job of list that cannot
// run, naming it: a bad schedule, name or kind, or args that do not encode.
func ValidatePeriodicJobs(list []PeriodicJob) error {
	_, err := parsePeriodicJobs(list)
	return err
}

func parsePeriodicJobs(list []PeriodicJob) ([]periodicJob, error) {
	var out []periodicJob
	seen := map[string]bool{}
	for i, j := range list {
		name := fmt.Sprintf("periodic job %d (%q)", i, j.Name)
		switch {
		case j.Name == "" || len(j.Name) > 100:
			return nil, fmt.Errorf("%s: name must be 1 to 100 bytes", name)
		case seen[j.Name]:
			return nil, fmt.Errorf("%s: a second job with the same name", name)
		case j.Kind == "":
			return nil, fmt.Errorf("%s: kind must not be empty", name)
		}
		seen[j.Name] = true
		sched, err := periodicParser.Parse(j.Schedule)
		if err != nil {
			return nil, fmt.Errorf("%s: schedule %q: %w", name, j.Schedule, err)
		}
		if _, err := queue.NewJob(j.insert(), time.Now()); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, periodicJob{PeriodicJob: j, sched: sched})
	}
	return out, nil
}

func (j PeriodicJob) insert() queue.Insert {
	var args any = j.Args
	if j.Args == nil {
		args = bson.D{}
	}
	return queue.Insert{Kind: j.Kind, Args: args, Opts: queue.InsertOpts{Queue: j.Queue, Priority: j.Priority, MaxAttempts: j.MaxAttempts}}
}

// Schedule is checked every second: the enqueuer works out which ticks are
// due itself.
func (p *PeriodicEnqueuer) Schedule() string { return "@every 1s" }

// Run is a cron job: one pass, with its error logged.
func (p *PeriodicEnqueuer) Run() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.RunOnce(ctx); err != nil {
		p.log.Warn("periodic pass failed; it runs again in a second", zap.Error(err))
	}
}

// RunOnce enqueues the due tick of each job, and returns how many jobs it
// enqueued.
func (p *PeriodicEnqueuer) RunOnce(ctx context.Context) (int, error) {
	n := 0
	var errs []error
	for _, j := range p.jobs {
		added, err := p.runJob(ctx, j)
		if added {
			n++
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("periodic job %q: %w", j.Name, err))
		}
	}
	return n, errors.Join(errs...)
}

// periodicState is a job's state document, as read.
type periodicState struct {
	LastTick time.Time  `bson:"lastTick"`
	Pending  *time.Time `bson:"pending"`
	// Gen is the generation of the pass that holds the pending tick: 1 for
	// the pass that took it, one more for each pass that superseded the
	// one before (0: pending written before generations existed).
	Gen int64 `bson:"gen"`
	// Committed: the job held under Gen is the tick's job, to release.
	Committed bool `bson:"committed"`
}

// genAsRead matches a state's or a hold's gen as read: 0 is a document
// written without one.
func genAsRead(gen int64) any {
	if gen == 0 {
		return bson.D{{Key: "$in", Value: bson.A{nil, int64(0)}}}
	}
	return gen
}

// periodicHold marks a tick's job inserted and not released yet.
type periodicHold struct {
	Name string    `bson:"name"`
	Tick time.Time `bson:"tick"`
	Gen  int64     `bson:"gen"`
}

// heldJob is a tick's job as inserted: held.
type heldJob struct {
	jobs.Job `bson:",inline"`
	Hold     periodicHold `bson:"periodicHold"`
}

// heldRunAt is the runAt of a held job: no claim takes it.
var heldRunAt = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// orphanSweepInterval is how often a pass looks for held jobs that will
// never be released (see sweepOrphans).
const orphanSweepInterval = time.Minute

// maxHoldRounds bounds how often one pass inserts a tick's job again after
// the job it found was removed under it.
const maxHoldRounds = 4

func (p *PeriodicEnqueuer) stepped(ctx context.Context, name string) error {
	if p.step == nil {
		return nil
	}
	return p.step(ctx, name)
}

func (p *PeriodicEnqueuer) runJob(ctx context.Context, j periodicJob) (bool, error) {
	now := p.now().UTC().Truncate(time.Millisecond)
	if err := p.maybeSweepOrphans(ctx, j, now); err != nil {
		p.log.Warn("sweeping the held jobs of a periodic job failed; it is tried again next pass", zap.String("name", j.Name), zap.Error(err))
	}
	st, ok, err := p.readState(ctx, j, now)
	if !ok || err != nil {
		return false, err
	}
	if err := p.stepped(ctx, "periodic:read"); err != nil {
		return false, err
	}
	added := false
	if st.Pending != nil { // its writer stopped, or is still at work
		var goOn bool
		if added, goOn, err = p.finishPending(ctx, j, st, now); err != nil || !goOn {
			return false, err
		}
	}
	ok, err = p.takeTick(ctx, j, st.LastTick, now)
	return added || ok, err
}

// readState reads the state of j. ok is false when there was none (the
// first pass ever: ticks are counted from now) or it was unusable (then
// replaced, counting from now): the pass ends there.
func (p *PeriodicEnqueuer) readState(ctx context.Context, j periodicJob, now time.Time) (st periodicState, ok bool, err error) {
	raw, err := p.state.FindOne(ctx, bson.D{{Key: "_id", Value: j.Name}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		_, err := p.state.InsertOne(ctx, bson.D{{Key: "_id", Value: j.Name}, {Key: "lastTick", Value: now}})
		if err != nil && !mongo.IsDuplicateKeyError(err) {
			return st, false, fmt.Errorf("record its first pass: %w", err)
		}
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("read its state: %w", err)
	}
	if err := bson.Unmarshal(raw, &st); err != nil || st.LastTick.IsZero() {
		// A state document another program wrote badly: count ticks from
		// now rather than stop the job forever. The write is conditioned on
		// the document as read.
		p.log.Warn("the state of a periodic job is unusable; counting its ticks from now",
			zap.String("name", j.Name), zap.Stringer("state", raw), zap.NamedError("decode_error", err))
		asRead := store.AsRead(raw.Lookup("lastTick"))
		if raw.Lookup("lastTick").Type == 0 {
			asRead = bson.D{{Key: "$exists", Value: false}}
		}
		_, err := p.state.ReplaceOne(ctx, bson.D{{Key: "_id", Value: j.Name}, {Key: "lastTick", Value: asRead}},
			bson.D{{Key: "_id", Value: j.Name}, {Key: "lastTick", Value: now}})
		return st, false, err
	}
	return st, true, nil
}

// finishPending finishes the tick st holds pending, whose writer stopped
// or is still at work: it releases the tick's job once committed, else
// supersedes the writer (from then on only this pass may commit the tick)
// and enqueues the tick itself. goOn is false when another pass moved the
// tick on first: that pass finishes it, and this one ends.
func (p *PeriodicEnqueuer) finishPending(ctx context.Context, j periodicJob, st periodicState, now time.Time) (added, goOn bool, err error) {
	tick := st.Pending.UTC()
	if st.Committed {
		added, err = p.release(ctx, j, tick, st.Gen, now)
		return added, true, err
	}
	gen := st.Gen + 1
	res, err := p.state.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: j.Name}, {Key: "pending", Value: tick}, {Key: "gen", Value: genAsRead(st.Gen)}, {Key: "committed", Value: bson.D{{Key: "$ne", Value: true}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "gen", Value: gen}}}})
	if err != nil {
		return false, false, fmt.Errorf("take over tick %s: %w", tick.Format(time.RFC3339Nano), err)
	}
	if res.MatchedCount == 0 {
		return false, false, nil // another pass moved it on: it finishes the tick
	}
	if err := p.stepped(ctx, "periodic:supersede"); err != nil {
		return false, false, err
	}
	added, err = p.enqueueTick(ctx, j, tick, gen, now)
	return added, true, err
}

// takeTick takes the latest tick of j after lastTick that is due by now,
// if any, and enqueues its job, unless another enqueuer took it first.
func (p *PeriodicEnqueuer) takeTick(ctx context.Context, j periodicJob, lastTick, now time.Time) (bool, error) {
	tick, ok := latestTick(j.sched, lastTick, now)
	if !ok {
		return false, nil
	}
	res, err := p.state.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: j.Name}, {Key: "lastTick", Value: lastTick}, {Key: "pending", Value: nil}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lastTick", Value: tick}, {Key: "pending", Value: tick}, {Key: "gen", Value: int64(1)}}},
			{Key: "$unset", Value: bson.D{{Key: "committed", Value: ""}}}})
	if err != nil {
		return false, fmt.Errorf("take tick %s: %w", tick.Format(time.RFC3339Nano), err)
	}
	if res.MatchedCount == 0 {
		return false, nil // another enqueuer took it: it inserts the job
	}
	if err := p.stepped(ctx, "periodic:take"); err != nil {
		return false, err
	}
	return p.enqueueTick(ctx, j, tick, 1, now)
}

// latestTick returns the latest tick of sched after last and at or before
// now, without walking the ticks in between: arithmetic for "@every", a
// search of a few dozen steps for a cron spec, however long the enqueuer
// was away.
func latestTick(sched cron.Schedule, last, now time.Time) (time.Time, bool) {
	var tick time.Time
	var found bool
	if s, ok := sched.(cron.ConstantDelaySchedule); ok && s.Delay >= time.Second && s.Delay%time.Second == 0 {
		tick, found = latestConstantTick(s.Delay, last, now)
	} else {
		tick, found = searchLatestTick(sched, last, now)
	}
	return tick.UTC().Truncate(time.Millisecond), found
}

// latestConstantTick is latestTick for "@every d", d a whole number of
// seconds (what cron.Every makes). Its ticks are those of walking
// ConstantDelaySchedule.Next from last: last's whole second, plus k·d.
func latestConstantTick(d time.Duration, last, now time.Time) (time.Time, bool) {
	base, step := last.Unix(), int64(d/time.Second)
	elapsed := now.Unix() - base // whole seconds: a tick at now.Unix() is ≤ now
	if elapsed < step {
		return time.Time{}, false
	}
	return time.Unix(base+elapsed/step*step, 0), true
}

// searchLatestTick is latestTick for any schedule whose ticks are whole
// seconds and whose Next(t) is its first tick after t (a cron spec). It
// looks back from now over windows that double until one holds a tick,
// then bisects that window for the last c whose Next is still ≤ now: a
// few dozen calls of Next whether the latest tick was a second or years
// ago (a spec of February 29 skips three years in four).
func searchLatestTick(sched cron.Schedule, last, now time.Time) (time.Time, bool) {
	due := func(c time.Time) bool {
		t := sched.Next(c)
		return !t.IsZero() && !t.After(now)
	}
	if !due(last) {
		return time.Time{}, false
	}
	// due(lo) holds and due(hi) does not (Next(now) is after now).
	lo, hi := last, now
	for w := time.Second; ; w *= 2 {
		c := now.Add(-w)
		if !c.After(last) || w > time.Duration(1<<62) {
			break
		}
		if due(c) {
			lo = c
			break
		}
		hi = c
	}
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2)
		if due(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	// A tick after Next(lo) would be a whole second after lo+1s ≥ hi, so
	// Next(hi) would be at most it, and due(hi) would hold.
	return sched.Next(lo), true
}

// periodicJobID is the id of the job enqueued for tick of the periodic job
// name.
func periodicJobID(name string, tick time.Time) string {
	return "periodic:" + name + ":" + tick.UTC().Format(time.RFC3339Nano)
}

// enqueueTick enqueues the job of tick for the pass of generation gen,
// which holds the tick (pending, gen, not committed): steps 2 to 5 of the
// protocol (see PeriodicEnqueuer). It reports whether it released a job.
func (p *PeriodicEnqueuer) enqueueTick(ctx context.Context, j periodicJob, tick time.Time, gen int64, now time.Time) (bool, error) {
	job, err := queue.NewJob(j.insert(), now)
	if err != nil {
		return false, err
	}
	job.ID = periodicJobID(j.Name, tick)
	job.RunAt = heldRunAt
	at := tick.Format(time.RFC3339Nano)
	switch h, err := p.holdTickJob(ctx, j, job, tick, gen); {
	case err != nil:
		return false, err
	case h == notHeld:
		// Enqueued before holds existed, or by another app. It is the
		// tick's job; nothing to release.
		return false, p.clearPending(ctx, j.Name, tick, gen)
	case h == superseded:
		return false, nil // the newer pass finishes the tick
	}
	res, err := p.state.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: j.Name}, {Key: "pending", Value: tick}, {Key: "gen", Value: gen}, {Key: "committed", Value: bson.D{{Key: "$ne", Value: true}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "committed", Value: true}}}})
	if err != nil {
		return false, fmt.Errorf("commit tick %s: %w", at, err)
	}
	if err := p.stepped(ctx, "periodic:commit"); err != nil {
		return false, err
	}
	if res.MatchedCount == 0 {
		// Superseded, or the tick was finished long ago and this insert
		// came late: what it inserted is never released. Remove it.
		_, err := store.Of(p.q).Collection().DeleteOne(ctx, heldFilter(job.ID, gen))
		if err != nil {
			return false, fmt.Errorf("tick %s: remove the job this pass held: %w", at, err)
		}
		return false, p.stepped(ctx, "periodic:drop")
	}
	return p.release(ctx, j, tick, gen, now)
}

// tickHold says whose the job of a tick is, once holdTickJob is done.
type tickHold int

const (
	heldByThisGen tickHold = iota // inserted or taken over, held for gen
	notHeld                       // there, not held: nothing to release
	superseded                    // held by a newer gen
)

// holdTickJob inserts job, the tick's, held for gen; when a job is there
// already, it is this gen's (an insert whose reply was lost), a newer
// gen's, not held at all, or an older gen's, which this gen takes over.
func (p *PeriodicEnqueuer) holdTickJob(ctx context.Context, j periodicJob, job *jobs.Job, tick time.Time, gen int64) (tickHold, error) {
	jobsColl := store.Of(p.q).Collection()
	at := tick.Format(time.RFC3339Nano)
	mine := periodicHold{Name: j.Name, Tick: tick, Gen: gen}
	for range maxHoldRounds {
		_, err := jobsColl.InsertOne(ctx, heldJob{Job: *job, Hold: mine})
		if err == nil {
			return heldByThisGen, p.stepped(ctx, "periodic:insert")
		}
		if !mongo.IsDuplicateKeyError(err) {
			return 0, fmt.Errorf("enqueue tick %s: %w", at, err)
		}
		raw, err := jobsColl.FindOne(ctx, bson.D{{Key: "_id", Value: job.ID}},
			options.FindOne().SetProjection(bson.D{{Key: "periodicHold", Value: 1}})).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue // removed meanwhile: insert again
		}
		if err != nil {
			return 0, fmt.Errorf("enqueue tick %s: read the job there: %w", at, err)
		}
		hold := raw.Lookup("periodicHold")
		if hold.Type == 0 {
			return notHeld, nil
		}
		theirs, ok := holdGen(hold)
		switch {
		case ok && theirs == gen:
			return heldByThisGen, nil
		case ok && theirs > gen:
			return superseded, nil
		}
		// An older gen's (or one another app wrote badly): it can never
		// be committed, as this gen superseded it first.
		res, err := jobsColl.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: job.ID}, {Key: "periodicHold", Value: holdAsRead(hold)}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "periodicHold", Value: mine}}}})
		if err != nil {
			return 0, fmt.Errorf("enqueue tick %s: take over the held job: %w", at, err)
		}
		if err := p.stepped(ctx, "periodic:regen"); err != nil {
			return 0, err
		}
		if res.MatchedCount == 1 {
			return heldByThisGen, nil
		}
	}
	return 0, fmt.Errorf("enqueue tick %s: its job kept changing under this pass", at)
}

// heldFilter matches the job id while it is held by gen and not touched
// by an operator.
func heldFilter(id string, gen int64) bson.D {
	return bson.D{{Key: "_id", Value: id}, {Key: "periodicHold.gen", Value: gen}, {Key: "state", Value: jobs.StateAvailable}}
}

// holdGen reads the gen of a periodicHold as stored.
func holdGen(v bson.RawValue) (int64, bool) {
	doc, ok := v.DocumentOK()
	if !ok {
		return 0, false
	}
	return doc.Lookup("gen").AsInt64OK()
}

// release makes the job of tick held by gen, committed, runnable now, and
// clears pending. It reports whether it released the job (false: released
// already, or cancelled or deleted by an operator while held).
func (p *PeriodicEnqueuer) release(ctx context.Context, j periodicJob, tick time.Time, gen int64, now time.Time) (bool, error) {
	id := periodicJobID(j.Name, tick)
	res, err := store.Of(p.q).Collection().UpdateOne(ctx, heldFilter(id, gen),
		bson.D{{Key: "$set", Value: bson.D{{Key: "runAt", Value: now}, {Key: "updatedAt", Value: now}}},
			{Key: "$unset", Value: bson.D{{Key: "periodicHold", Value: ""}}}})
	if err != nil {
		return false, fmt.Errorf("release tick %s: %w", tick.Format(time.RFC3339Nano), err)
	}
	if err := p.stepped(ctx, "periodic:release"); err != nil {
		return false, err
	}
	released := res.MatchedCount == 1
	if released {
		p.log.Info("enqueued a periodic job", zap.String("name", j.Name), zap.Time("tick", tick), zap.String("job_id", id))
	}
	return released, p.clearPending(ctx, j.Name, tick, gen)
}

func (p *PeriodicEnqueuer) clearPending(ctx context.Context, name string, tick time.Time, gen int64) error {
	_, err := p.state.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: name}, {Key: "pending", Value: tick}, {Key: "gen", Value: genAsRead(gen)}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "pending", Value: ""}, {Key: "gen", Value: ""}, {Key: "committed", Value: ""}}}})
	if err != nil {
		return fmt.Errorf("clear tick %s: %w", tick.Format(time.RFC3339Nano), err)
	}
	return p.stepped(ctx, "periodic:clear")
}

// maybeSweepOrphans runs sweepOrphans for j once every sweepGap.
func (p *PeriodicEnqueuer) maybeSweepOrphans(ctx context.Context, j periodicJob, now time.Time) error {
	p.mu.Lock()
	last, ok := p.sweptAt[j.Name]
	due := !ok || now.Sub(last) >= p.sweepGap || now.Before(last)
	if due {
		p.sweptAt[j.Name] = now
	}
	p.mu.Unlock()
	if !due {
		return nil
	}
	_, err := p.sweepOrphans(ctx, j)
	return err
}

// sweepOrphans deletes the held jobs of j that will never be released:
// those inserted late by a pass that died before it could remove them. It
// reads the held jobs, then the state: a job held by a gen that is not the
// state's pending one then was superseded or finished before that read,
// and no gen comes back, so it can never be committed. Each delete is
// conditioned on the gen read. It returns how many it deleted.
func (p *PeriodicEnqueuer) sweepOrphans(ctx context.Context, j periodicJob) (int, error) {
	// The ids of j's jobs: "periodic:NAME:" then the tick; ';' follows ':'.
	prefix := "periodic:" + j.Name
	cur, err := store.Of(p.q).Collection().Find(ctx,
		bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: prefix + ":"}, {Key: "$lt", Value: prefix + ";"}}},
			{Key: "periodicHold", Value: bson.D{{Key: "$exists", Value: true}}}, {Key: "state", Value: jobs.StateAvailable}},
		options.Find().SetProjection(bson.D{{Key: "periodicHold", Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("read its held jobs: %w", err)
	}
	type held struct {
		id   string
		tick time.Time
		gen  int64
		ok   bool
	}
	var found []held
	err = store.EachRaw(ctx, cur, func(d bson.Raw) error {
		id, ok := d.Lookup("_id").StringValueOK()
		if !ok {
			return nil
		}
		h := held{id: id}
		h.gen, h.ok = holdGen(d.Lookup("periodicHold"))
		if doc, ok := d.Lookup("periodicHold").DocumentOK(); ok {
			h.tick, _ = doc.Lookup("tick").TimeOK()
		}
		found = append(found, h)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("read its held jobs: %w", err)
	}
	if len(found) == 0 {
		return 0, nil
	}
	var st periodicState
	raw, err := p.state.FindOne(ctx, bson.D{{Key: "_id", Value: j.Name}}).Raw()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
	case err != nil:
		return 0, fmt.Errorf("read its state: %w", err)
	default:
		if bson.Unmarshal(raw, &st) != nil {
			return 0, nil // unusable: the next pass rewrites it
		}
	}
	n := 0
	for _, h := range found {
		if !h.ok || st.Pending != nil && st.Pending.Equal(h.tick) && st.Gen == h.gen {
			continue // the pending tick's own, or not docket's to judge
		}
		res, err := store.Of(p.q).Collection().DeleteOne(ctx, heldFilter(h.id, h.gen))
		if err != nil {
			return n, fmt.Errorf("remove held job %s: %w", h.id, err)
		}
		n += int(res.DeletedCount)
	}
	if n > 0 {
		p.log.Info("removed held jobs of a periodic job that would never be released", zap.String("name", j.Name), zap.Int("jobs", n))
	}
	return n, nil
}

// holdAsRead matches a periodicHold as read: by value, or, for a regex
// (another app's: docket writes a document there), by type, which docket's
// hold of any gen changes. A document with "$" keys is matched by value
// and refused: matched by type, it would match any gen's hold docket
// wrote since, where by value the takeover fails until retention.
func holdAsRead(hold bson.RawValue) any {
	if hold.Type == bson.TypeRegex {
		return store.AsRead(hold)
	}
	return hold
}
