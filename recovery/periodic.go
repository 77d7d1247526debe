package recovery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docketq/docket/internal/jobstore"
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
	Name string `yaml:"name"`
	// Schedule is a cron spec: five fields, or six with seconds first
	// ("*/10 * * * * *"), or a descriptor ("@hourly", "@every 30s").
	Schedule string `yaml:"schedule"`
	// Kind, Args, Queue, Priority and MaxAttempts are those of each job
	// enqueued; Args defaults to {}.
	Kind        string         `yaml:"kind"`
	Args        map[string]any `yaml:"args"`
	Queue       string         `yaml:"queue"`
	Priority    int            `yaml:"priority"`
	MaxAttempts int            `yaml:"maxAttempts"`
}

// DefaultPeriodicCollection holds the state of the periodic jobs: for each
// name, the last tick enqueued.
const DefaultPeriodicCollection = "periodic"

// periodicParser reads schedules with an optional seconds field.
var periodicParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// PeriodicEnqueuer enqueues each tick of its periodic jobs exactly once,
// however many processes run one: it is meant to run in the elected
// leader, but two running at once (a deposed leader that stalled, say)
// still enqueue each tick once.
//
// For each job it keeps {_id: name, lastTick, pending} in the periodic
// collection. A pass takes the latest tick that is due: it first moves
// lastTick to it with pending set, by a write conditioned on the state it
// read, then inserts the tick's job under an id made from the name and the
// tick, then clears pending. A pass that finds pending set (its writer
// died between the two writes) inserts that tick's job first; the id makes
// a second insert of a tick a duplicate, never a second job.
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
		q:     q,
		jobs:  jobs,
		log:   log.Named("periodic"),
		now:   time.Now,
		state: db.Collection(DefaultPeriodicCollection, options.Collection().SetWriteConcern(writeconcern.Majority())),
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
}

func (p *PeriodicEnqueuer) runJob(ctx context.Context, j periodicJob) (bool, error) {
	now := p.now().UTC().Truncate(time.Millisecond)
	raw, err := p.state.FindOne(ctx, bson.D{{Key: "_id", Value: j.Name}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		// The first pass ever: count ticks from now.
		_, err := p.state.InsertOne(ctx, bson.D{{Key: "_id", Value: j.Name}, {Key: "lastTick", Value: now}})
		if err != nil && !mongo.IsDuplicateKeyError(err) {
			return false, fmt.Errorf("record its first pass: %w", err)
		}
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read its state: %w", err)
	}
	var st periodicState
	if err := bson.Unmarshal(raw, &st); err != nil || st.LastTick.IsZero() {
		// A state document another program wrote badly: count ticks from
		// now rather than stop the job forever. The write is conditioned on
		// the document as read.
		p.log.Warn("the state of a periodic job is unusable; counting its ticks from now",
			zap.String("name", j.Name), zap.Stringer("state", raw), zap.NamedError("decode_error", err))
		var asRead any = raw.Lookup("lastTick")
		if raw.Lookup("lastTick").Type == 0 {
			asRead = bson.D{{Key: "$exists", Value: false}}
		}
		_, err := p.state.ReplaceOne(ctx, bson.D{{Key: "_id", Value: j.Name}, {Key: "lastTick", Value: asRead}},
			bson.D{{Key: "_id", Value: j.Name}, {Key: "lastTick", Value: now}})
		return false, err
	}
	added := false
	if st.Pending != nil { // its writer stopped between the two writes
		if added, err = p.enqueueTick(ctx, j, *st.Pending, now); err != nil {
			return false, err
		}
		if err := p.clearPending(ctx, j.Name, *st.Pending); err != nil {
			return added, err
		}
		st.LastTick = *st.Pending
	}
	tick, ok := latestTick(j.sched, st.LastTick, now)
	if !ok {
		return added, nil
	}
	res, err := p.state.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: j.Name}, {Key: "lastTick", Value: st.LastTick}, {Key: "pending", Value: nil}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lastTick", Value: tick}, {Key: "pending", Value: tick}}}})
	if err != nil {
		return added, fmt.Errorf("take tick %s: %w", tick.Format(time.RFC3339Nano), err)
	}
	if res.MatchedCount == 0 {
		return added, nil // another enqueuer took it: it inserts the job
	}
	ok, err = p.enqueueTick(ctx, j, tick, now)
	if err != nil {
		return added, err
	}
	return added || ok, p.clearPending(ctx, j.Name, tick)
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

// PeriodicJobID is the id of the job enqueued for tick of the periodic job
// name.
func PeriodicJobID(name string, tick time.Time) string {
	return "periodic:" + name + ":" + tick.UTC().Format(time.RFC3339Nano)
}

// enqueueTick inserts the job of tick, runnable now; a job already there
// for it is not an error. It reports whether it inserted one.
func (p *PeriodicEnqueuer) enqueueTick(ctx context.Context, j periodicJob, tick, now time.Time) (bool, error) {
	job, err := queue.NewJob(j.insert(), now)
	if err != nil {
		return false, err
	}
	job.ID = PeriodicJobID(j.Name, tick)
	_, err = jobstore.Of(p.q).Collection().InsertOne(ctx, job)
	if mongo.IsDuplicateKeyError(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("enqueue tick %s: %w", tick.Format(time.RFC3339Nano), err)
	}
	p.log.Info("enqueued a periodic job", zap.String("name", j.Name), zap.Time("tick", tick), zap.String("job_id", job.ID))
	return true, nil
}

func (p *PeriodicEnqueuer) clearPending(ctx context.Context, name string, tick time.Time) error {
	_, err := p.state.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: name}, {Key: "pending", Value: tick}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "pending", Value: ""}}}})
	if err != nil {
		return fmt.Errorf("clear tick %s: %w", tick.Format(time.RFC3339Nano), err)
	}
	return nil
}
